"""``lane_segment_refs`` against a row-by-row loop."""

from __future__ import annotations

import numpy as np

from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.planning.segment_refs import lane_segment_refs
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams


def random_streams(rng: np.random.Generator, n_streams: int) -> Streams:
    pieces = [
        [(f"s{i}/p{j}", 100 + i, int(r))
         for j, r in enumerate(rng.integers(0, 7, rng.integers(1, 5)))]
        for i in range(n_streams)
    ]
    return Streams.from_pieces(
        protocols=("cycling",), stream_protocols=["cycling"] * n_streams,
        group_keys=[("s", "c", i, "cycling") for i in range(n_streams)],
        alignment_keys=[("s", "c", i) for i in range(n_streams)], pieces=pieces,
    )


def loop_refs(streams: Streams, stream: np.ndarray, offset: np.ndarray, t: int) -> list[tuple]:
    out = []
    for lane, (s, o) in enumerate(zip(stream.tolist(), offset.tolist(), strict=True)):
        if o < 0:
            continue
        end = min(o + t + 1, int(streams.n_rows[s]))
        for p in range(int(streams.piece_ptr[s]), int(streams.piece_ptr[s + 1])):
            lo, n = int(streams.piece_start[p]), int(streams.piece_rows[p])
            a, b = max(o, lo), min(end, lo + n)
            if b > a:
                out.append((lane, p, a - lo, b - a, a - o))
    return out


def test_refs_match_loop() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        streams = random_streams(rng, int(rng.integers(1, 6)))
        t = int(rng.integers(1, 6))
        real = np.flatnonzero(streams.n_rows >= 1)
        if real.shape[0] == 0:
            continue
        stream = rng.choice(real, 12)
        offset = np.asarray([rng.integers(0, streams.n_rows[s]) for s in stream], dtype=np.int64)
        offset[rng.random(12) < 0.2] = -1
        refs = lane_segment_refs(streams, stream, offset, t)
        got = list(zip(refs.lane.tolist(), refs.piece.tolist(), refs.row_start.tolist(),
                       refs.row_count.tolist(), refs.window_row_start.tolist(), strict=True))
        assert got == loop_refs(streams, stream, offset, t)
        assert np.array_equal(refs.window_row_count, refs.row_count)


def test_refs_of_a_schedule_cover_each_lane() -> None:
    streams = Streams.from_pieces(
        protocols=("cycling",), stream_protocols=["cycling", "cycling"],
        group_keys=[("s", "c", 0, "cycling"), ("s", "c", 1, "cycling")],
        alignment_keys=[("s", "c", 0), ("s", "c", 1)],
        pieces=[[("a", 1, 5), ("b", 1, 0), ("c", 1, 6)], [("d", 2, 9)]],
    )
    cfg = LoaderConfig(inputs={"cycling": ("v",)}, targets={"cycling": ("v",)},
                       default_window=WindowConfig(batch_size=2, seq_len=4),
                       strategy="shuffled", stateful_n_windows=-1)
    sched = epoch_schedule(streams, cfg, 0)
    refs = lane_segment_refs(streams, sched.lane_stream, sched.lane_offset, 4)
    for lane in np.flatnonzero(sched.lane_offset >= 0):
        mine = refs.lane == lane
        s, o = int(sched.lane_stream[lane]), int(sched.lane_offset[lane])
        assert refs.row_count[mine].sum() == min(o + 5, int(streams.n_rows[s])) - o
        assert refs.window_row_start[mine][0] == 0
        assert "b" not in {streams.piece_path[p] for p in refs.piece[mine]}
    assert not np.isin(np.flatnonzero(sched.lane_offset < 0), refs.lane).any()
