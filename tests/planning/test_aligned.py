"""The aligned schedule (SEMANTICS section 9) equals the plain-loop reference: keys, lanes,
steps, has_data, across strategies, window options, epochs, ranks and resumption."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from contract.configs import LoaderConfig, WindowConfig
from contract.errors import WindpipeError
from planning.aligned import aligned_rank_batches, aligned_schedule
from planning.streams import Streams
from tests.reference.aligned_ref import AlignedBatch, reference_aligned_rank
from tests.reference.schedule_ref import ref_streams

# (cell, cidx, protocol, rows): hppc and eis for only some cycles, one key with eis only,
# one cycling stream too short for any window
STREAMS = [
    ("c1", 0, "cycling", 50), ("c1", 0, "hppc", 23), ("c1", 0, "eis", 9),
    ("c1", 1, "cycling", 31),
    ("c1", 2, "cycling", 64), ("c1", 2, "eis", 12),
    ("c2", 0, "cycling", 1), ("c2", 0, "hppc", 17),
    ("c2", 1, "cycling", 40), ("c2", 1, "hppc", 30), ("c2", 1, "eis", 7),
    ("c2", 2, "eis", 11),
    ("c3", 0, "cycling", 26),
]
PROTOCOLS = ("cycling", "hppc", "eis")
IO = dict.fromkeys(PROTOCOLS, ("x",))
CONFIGS: dict[str, dict[str, Any]] = {
    "sequential": {"default_window": WindowConfig(batch_size=3, seq_len=8),
                   "window_by_protocol": {"eis": WindowConfig(batch_size=3, seq_len=4)}},
    "shuffled-drop": {
        "strategy": "shuffled", "seed": 4, "drop_incomplete_batches": True,
        "default_window": WindowConfig(batch_size=2, seq_len=10, drop_incomplete=True),
        "window_by_protocol": {"hppc": WindowConfig(batch_size=2, seq_len=6)}},
    "shuffled-no-trim": {"strategy": "shuffled", "seed": 9, "drop_incomplete_distributed": False,
                         "default_window": WindowConfig(batch_size=4, seq_len=12)},
}


def _streams() -> Streams:
    return Streams.from_pieces(
        protocols=PROTOCOLS, stream_protocols=[p for _, _, p, _ in STREAMS],
        group_keys=[("s", c, i, p) for c, i, p, _ in STREAMS],
        alignment_keys=[("s", c, i) for c, i, _, _ in STREAMS],
        pieces=[[(f"{c}_{i}_{p}", k, n)] for k, (c, i, p, n) in enumerate(STREAMS)],
    )


def _config(name: str) -> LoaderConfig:
    return LoaderConfig(inputs=IO, targets=IO, protocol_order=PROTOCOLS, **CONFIGS[name])


def _got(schedule: Any, g: int) -> AlignedBatch:
    lo, hi = int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])
    has = schedule.has_data(g)
    return AlignedBatch(
        group=-1, step=int(schedule.batch_step[g]), steps=int(schedule.batch_steps[g]),
        keys=tuple(schedule.keys[k] for k in schedule.lane_key[lo:hi]),
        lanes={p: tuple(zip(schedule.lane_stream[c, lo:hi].tolist(),
                            schedule.lane_offset[c, lo:hi].tolist(), strict=True))
               for c, p in enumerate(schedule.protocols)},
        has_data={p: tuple(bool(x) for x in has[c]) for c, p in enumerate(schedule.protocols)},
    )


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize(("epoch", "world_size"), [(0, 1), (1, 1), (1, 2), (2, 3)])
def test_every_batch_equals_the_reference(name: str, epoch: int, world_size: int) -> None:
    config, streams = _config(name), _streams()
    schedule = aligned_schedule(streams, config, epoch)
    total = 0
    for rank in range(world_size):
        want = reference_aligned_rank(ref_streams(streams), config, epoch, rank=rank,
                                      world_size=world_size)
        got = aligned_rank_batches(schedule, rank=rank, world_size=world_size,
                                   drop_incomplete_distributed=config.drop_incomplete_distributed)
        assert len(got) == len(want)
        total += len(got)
        for g, ref in zip(got.tolist(), want, strict=True):
            mine = _got(schedule, g)
            assert mine.keys == ref.keys
            assert (mine.step, mine.steps) == (ref.step, ref.steps)
            assert mine.lanes == ref.lanes
            assert mine.has_data == ref.has_data
        start = len(got) // 2  # resumption: the pass from batch i on is the tail
        again = aligned_rank_batches(schedule, rank=rank, world_size=world_size,
                                     drop_incomplete_distributed=config.drop_incomplete_distributed)
        assert again[start:].tolist() == got[start:].tolist()
    assert total > 0


def test_keys_without_a_protocol_are_padding_and_flagged() -> None:
    schedule = aligned_schedule(_streams(), _config("sequential"), 0)
    assert schedule.keys[:3] == (("s", "c1", 0), ("s", "c1", 1), ("s", "c1", 2))
    has = schedule.has_data(0)
    assert has.tolist() == [[True, True, True], [True, False, False], [True, False, True]]
    assert (schedule.lane_offset[1, :3] == [0, -1, -1]).all()
    assert (schedule.lane_stream[1, :3][1:] == -1).all()
    short = schedule.keys.index(("s", "c2", 0))
    assert schedule.key_windows[short].tolist() == [0, 2, 0]  # 1 cycling row: no window
    shuffled = [aligned_schedule(_streams(), _config("shuffled-no-trim"), e) for e in (0, 1)]
    assert not np.array_equal(shuffled[0].lane_key, shuffled[1].lane_key)


def test_configs_that_cannot_align_are_refused() -> None:
    mixed = LoaderConfig(inputs=IO, targets=IO, default_window=WindowConfig(batch_size=2,
                                                                            seq_len=4),
                         window_by_protocol={"eis": WindowConfig(batch_size=3, seq_len=4)})
    with pytest.raises(WindpipeError, match="one batch_size"):
        aligned_schedule(_streams(), mixed, 0)
    twice = Streams.from_pieces(
        protocols=("cycling",), stream_protocols=["cycling", "cycling"],
        group_keys=[("a",), ("b",)], alignment_keys=[("k",), ("k",)],
        pieces=[[("a", 1, 5)], [("b", 2, 5)]])
    with pytest.raises(WindpipeError, match="one stream per alignment key"):
        aligned_schedule(twice, _config("sequential").model_copy(update={
            "inputs": {"cycling": ("x",)}, "targets": {"cycling": ("x",)},
            "protocol_order": None}), 0)
