"""The chunk bytes a batch pins (``windpipe.services.planning.working_set``) against a plain loop
over
lanes, pieces and chunks, on every strategy, with uneven and empty chunks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.planning.artifact import PieceLayout, PieceRecord
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import ChunkTable, batch_chunk_bytes, protocol_row_bytes

_IO: dict[str, Any] = {"inputs": {"cycling": ("v", "i"), "hppc": ("v",)},
                       "targets": {"cycling": ("v",), "hppc": ("v", "x")}}
CONFIGS = {
    "plain": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=4), **_IO),
    "step": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=3, step_rows=9),
                         **_IO),
    "shuffled": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=5),
                             strategy="shuffled", seed=3, **_IO),
    "chain": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=4),
                          strategy="shuffled", stateful_n_windows=-1,
                          cross_protocol_state_carry="chain", **_IO),
    "aligned": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=3),
                            window_by_protocol={"hppc": WindowConfig(batch_size=2, seq_len=6)},
                            align_by="alignment_key", **_IO),
}


def _world(seed: int) -> tuple[Streams, dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    protos, pieces, chunks = [], [], {}
    for i in range(9):
        for protocol in ("cycling", "hppc"):
            mine = []
            for k in range(int(rng.integers(1, 4))):
                rows = int(rng.integers(1, 30))
                path = f"{protocol}/{i}/{k}"
                cuts = sorted(rng.choice(np.arange(rows + 1), size=3).tolist())
                chunks[path] = [b - a for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
                mine.append((path, 100 * i + k, rows))
            protos.append(protocol)
            pieces.append(mine)
    streams = Streams.from_pieces(
        protocols=("cycling", "hppc"), stream_protocols=protos,
        group_keys=[("s", f"c{j // 2}", 0, p) for j, p in enumerate(protos)],
        alignment_keys=[("s", f"c{j // 2}", 0) for j in range(len(protos))], pieces=pieces)
    return streams, chunks


def _loop(streams: Streams, chunks: dict[str, list[int]], schedule: Any,
          row_bytes: np.ndarray) -> list[int]:
    out = []
    for g in range(schedule.n_batches):
        read: dict[tuple[str, int], int] = {}
        t = int(schedule.batch_seq_len[g])
        for lane in range(int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])):
            s, o = int(schedule.lane_stream[lane]), int(schedule.lane_offset[lane])
            if o < 0:
                continue
            lo, hi = o, min(o + t + 1, int(streams.n_rows[s]))
            piece_lo = 0
            for p in range(int(streams.piece_ptr[s]), int(streams.piece_ptr[s + 1])):
                path = streams.piece_path[p]
                edge = piece_lo
                for k, rows in enumerate(chunks[path]):
                    if rows and edge < hi and lo < edge + rows:
                        read[(path, k)] = rows * int(row_bytes[int(streams.protocol[s])])
                    edge += rows
                piece_lo += int(streams.piece_rows[p])
        out.append(sum(read.values()))
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_chunk_bytes_equal_a_plain_loop(name: str, seed: int) -> None:
    streams, chunks = _world(seed)
    config = CONFIGS[name]
    layout = PieceLayout.from_records(
        streams.piece_path, {p: PieceRecord("parquet", "f", c) for p, c in chunks.items()})
    row_bytes = protocol_row_bytes(config, streams.protocols)
    table = ChunkTable.of(streams, chunk_ptr=layout.chunk_ptr, chunk_rows=layout.chunk_rows,
                          row_bytes=row_bytes)
    assert any(0 in c for c in chunks.values())  # empty chunks are listed, never read
    for epoch in (0, 1):
        schedule = epoch_schedule(streams, config, epoch)
        want = _loop(streams, chunks, schedule, row_bytes)
        assert batch_chunk_bytes(streams, table, schedule).tolist() == want
        some = np.arange(schedule.n_batches)[::-3]
        assert batch_chunk_bytes(streams, table, schedule, batches=some).tolist() == [
            want[g] for g in some.tolist()]
