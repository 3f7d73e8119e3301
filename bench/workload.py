"""The shared workload: one dataset, one schedule per epoch, the same for every contender.

The headline schedule is what training uses: ``shuffled`` lane windows (SEMANTICS 3b,
``stateful_n_windows=0``) of B lanes x T rows over every cycling stream, reshuffled
every epoch, computed by the planning core itself, so windpipe's plan and every other
contender read exactly the same windows in the same order. ``drop_incomplete`` and
``drop_incomplete_batches`` keep every batch full (``B * T`` tokens), and
``phase_shift=False`` keeps the windows the same in every epoch (only their order
changes). :data:`EPOCHS` epochs are precomputed; contenders cycle through them. The
``sequential`` schedule (SEMANTICS 3a) is kept for one windpipe row.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from windpipe.services.contract.configs import DataAccess, LoaderConfig, WindowConfig
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.planning.sizes import token_bytes
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams

__all__ = ["EPOCHS", "INPUTS", "TARGETS", "Workload", "build_workload", "load_workload",
           "plan_config"]

INPUTS: tuple[str, ...] = ("current_a", "temperature_c", "soc_pct")
TARGETS: tuple[str, ...] = ("voltage_v",)
EPOCHS = 4
Strategy = Literal["shuffled", "sequential"]


def plan_config(batch_size: int, seq_len: int, *, strategy: Strategy = "shuffled",
                data_access: DataAccess = "windowed") -> LoaderConfig:
    """The ``LoaderConfig`` of the workload's schedule (what windpipe plans)."""
    return LoaderConfig(
        split="train",
        default_window=WindowConfig(batch_size=batch_size, seq_len=seq_len,
                                    drop_incomplete=True),
        inputs={"cycling": INPUTS}, targets={"cycling": TARGETS},
        strategy=strategy, phase_shift=False, drop_incomplete_batches=True,
        data_access=data_access,
    )


@dataclass(frozen=True)
class Workload:
    """Dataset location, batch shape, and each epoch's lanes as (stream, row offset)."""

    root: str
    batch_size: int
    seq_len: int
    strategy: str
    stream_paths: tuple[str, ...]
    stream_rows: tuple[int, ...]
    lane_stream: np.ndarray  # int64 [EPOCHS, n_batches * B]
    lane_offset: np.ndarray  # int64 [EPOCHS, n_batches * B]

    @property
    def n_batches(self) -> int:
        """Full batches in one pass (every epoch has as many)."""
        return int(self.lane_stream.shape[1]) // self.batch_size

    @property
    def tokens_per_batch(self) -> int:
        """``B * T`` positions."""
        return self.batch_size * self.seq_len

    @property
    def batch_bytes(self) -> int:
        """Bytes of one batch: float32 inputs and targets, bool mask."""
        return self.batch_size * self.seq_len * token_bytes(len(INPUTS), len(TARGETS))

    def config(self, *, data_access: DataAccess = "windowed",
               strategy: Strategy | None = None) -> LoaderConfig:
        """The plan windpipe makes of this workload (``strategy``: another schedule)."""
        chosen = strategy or ("sequential" if self.strategy == "sequential" else "shuffled")
        return plan_config(self.batch_size, self.seq_len, strategy=chosen,
                           data_access=data_access)

    def lanes(self, epoch: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(stream, offset) arrays of batch ``batch`` of epoch ``epoch`` (mod :data:`EPOCHS`)."""
        s = slice(batch * self.batch_size, (batch + 1) * self.batch_size)
        e = epoch % self.lane_stream.shape[0]
        return self.lane_stream[e, s], self.lane_offset[e, s]

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
            strategy=meta["strategy"], stream_paths=tuple(meta["stream_paths"]),
            stream_rows=tuple(meta["stream_rows"]),
            lane_stream=z["lane_stream"], lane_offset=z["lane_offset"],
        )


def build_workload(root: Path, *, batch_size: int = 64, seq_len: int = 1024,
                   strategy: Strategy = "shuffled") -> Workload:
    """The schedule of every epoch over the dataset's single-segment cycling streams."""
    manifest = pl.read_parquet(root / "manifest.parquet").filter(pl.col("protocol") == "cycling")
    manifest = manifest.sort(["set_id", "cell_id", "cidx"])
    rows = [dict(r) for r in manifest.iter_rows(named=True)]
    streams = Streams.from_pieces(
        protocols=("cycling",), stream_protocols=["cycling"] * len(rows),
        group_keys=[(r["set_id"], r["cell_id"], r["cidx"], "cycling") for r in rows],
        alignment_keys=[(r["set_id"], r["cell_id"], r["cidx"]) for r in rows],
        pieces=[[(r["segment_path"],
                  manifest_row_id(r["set_id"], r["cell_id"], r["cidx"], "cycling"),
                  int(r["row_count"]))] for r in rows],
    )
    spec = plan_config(batch_size, seq_len, strategy=strategy)
    schedules = [epoch_schedule(streams, spec, e) for e in range(EPOCHS)]
    n = min(s.n_batches for s in schedules) * batch_size
    return Workload(
        root=str(root), batch_size=batch_size, seq_len=seq_len, strategy=strategy,
        stream_paths=tuple(r["segment_path"] for r in rows),
        stream_rows=tuple(int(r["row_count"]) for r in rows),
        lane_stream=np.stack([s.lane_stream[:n] for s in schedules]).astype(np.int64),
        lane_offset=np.stack([s.lane_offset[:n] for s in schedules]).astype(np.int64),
    )
