"""The shared workload: one dataset, one schedule, the same for every contender.

The schedule is SEMANTICS section 3a with ``drop_incomplete=True``: sequential plain
windows of B lanes x T rows over every cycling stream, so every batch is full and a
contender's tokens are ``B * T`` per batch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from planning.sizes import token_bytes

__all__ = ["INPUTS", "TARGETS", "Workload", "build_workload", "load_workload"]

INPUTS: tuple[str, ...] = ("current_a", "temperature_c", "soc_pct")
TARGETS: tuple[str, ...] = ("voltage_v",)


@dataclass(frozen=True)
class Workload:
    """Dataset location, batch shape, and lanes as (stream, row offset) per batch."""

    root: str
    batch_size: int
    seq_len: int
    stream_paths: tuple[str, ...]
    stream_rows: tuple[int, ...]
    lane_stream: np.ndarray  # int64 [n_batches * B]
    lane_offset: np.ndarray  # int64 [n_batches * B]

    @property
    def n_batches(self) -> int:
        """Full batches in one pass."""
        return int(self.lane_stream.shape[0]) // self.batch_size

    @property
    def tokens_per_batch(self) -> int:
        """``B * T`` positions."""
        return self.batch_size * self.seq_len

    @property
    def batch_bytes(self) -> int:
        """Bytes of one batch: float32 inputs and targets, bool mask."""
        return self.batch_size * self.seq_len * token_bytes(len(INPUTS), len(TARGETS))

    def lanes(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(stream, offset) arrays of batch ``batch``."""
        s = slice(batch * self.batch_size, (batch + 1) * self.batch_size)
        return self.lane_stream[s], self.lane_offset[s]

    def save(self, path: Path) -> None:
        """Write as ``.npz`` plus JSON metadata."""
        meta = {k: v for k, v in asdict(self).items() if k not in ("lane_stream", "lane_offset")}
        np.savez(path, lane_stream=self.lane_stream, lane_offset=self.lane_offset,
                 meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))


def load_workload(path: Path) -> Workload:
    """Read what :meth:`Workload.save` wrote."""
    with np.load(path) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        return Workload(
            root=meta["root"], batch_size=meta["batch_size"], seq_len=meta["seq_len"],
            stream_paths=tuple(meta["stream_paths"]), stream_rows=tuple(meta["stream_rows"]),
            lane_stream=z["lane_stream"], lane_offset=z["lane_offset"],
        )


def build_workload(root: Path, *, batch_size: int = 64, seq_len: int = 1024) -> Workload:
    """Plain sequential windows over the dataset's single-segment cycling streams."""
    manifest = pl.read_parquet(root / "manifest.parquet").filter(pl.col("protocol") == "cycling")
    manifest = manifest.sort(["set_id", "cell_id", "cidx"])
    paths = tuple(manifest["segment_path"].to_list())
    rows = tuple(int(r) for r in manifest["row_count"].to_list())
    window = batch_size * seq_len
    streams, offsets = [], []
    for s, n in enumerate(rows):
        n_windows = max(0, (n - 1) // window)  # complete: s_k + B*T + 1 <= N
        starts = np.arange(n_windows, dtype=np.int64) * window
        lanes = (starts[:, None] + np.arange(batch_size) * seq_len).ravel()
        streams.append(np.full(lanes.shape, s, dtype=np.int64))
        offsets.append(lanes)
    return Workload(
        root=str(root), batch_size=batch_size, seq_len=seq_len, stream_paths=paths,
        stream_rows=rows, lane_stream=np.concatenate(streams), lane_offset=np.concatenate(offsets),
    )
