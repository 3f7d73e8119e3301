"""The aligned schedule (SEMANTICS section 9) equals the plain-loop reference: keys, lanes,
steps, has_data, across strategies, window options, epochs, ranks and resumption."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.reference.aligned_ref import AlignedBatch, reference_aligned_rank
from tests.reference.schedule_ref import ref_streams
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.planning.aligned import aligned_rank_batches, aligned_schedule
from windpipe.services.planning.artifact import (
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams

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


def _aligned(name: str) -> LoaderConfig:
    return LoaderConfig.model_validate({**_config(name).model_dump(), "align_by": "alignment_key"})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_plan_schedule_is_one_part_batch_per_protocol(name: str) -> None:
    config, streams = _aligned(name), _streams()
    core = aligned_schedule(streams, config, 1)
    sched = epoch_schedule(streams, config, 1)
    n_p = len(PROTOCOLS)
    assert sched.parts == n_p
    assert sched.n_batches == core.n_batches * n_p == sched.n_consumer_batches * n_p
    assert (sched.unit_batch_ptr == core.unit_batch_ptr * n_p).all()
    assert sched.lane_key is not None
    for g in range(sched.n_batches):
        i, code = divmod(g, n_p)
        assert sched.batch_protocol[g] == code
        assert sched.batch_seq_len[g] == config.window_for(PROTOCOLS[code]).seq_len
        assert (sched.batch_step[g], sched.batch_steps[g]) == (core.batch_step[i],
                                                                core.batch_steps[i])
        lo, hi = sched.batch_lane_ptr[g], sched.batch_lane_ptr[g + 1]
        c_lo, c_hi = core.batch_lane_ptr[i], core.batch_lane_ptr[i + 1]
        has = core.has_data(i)[code]
        assert (sched.lane_key[lo:hi] == core.lane_key[c_lo:c_hi]).all()
        assert (sched.lane_offset[lo:hi] == core.lane_offset[code, c_lo:c_hi]).all()
        want = np.where(has, core.lane_stream[code, c_lo:c_hi], -1)
        assert (sched.lane_stream[lo:hi] == want).all()
        assert (sched.lane_protocol[lo:hi] == code).all()
    # a rank's pass and its trimming never cut an aligned batch
    for world in (2, 3):
        for rank in range(world):
            mine = rank_batches(sched, rank=rank, world_size=world,
                                drop_incomplete_distributed=config.drop_incomplete_distributed)
            assert mine.shape[0] % n_p == 0
            assert (mine[::n_p] % n_p == 0).all()


def test_the_stored_plan_keeps_the_aligned_layout() -> None:
    streams = _streams()
    for name, stored in (("sequential", True), ("shuffled-drop", False)):
        config = _aligned(name)
        layout = PieceLayout.from_records(streams.piece_path, {
            p: PieceRecord("parquet", "f", (int(n),))
            for p, n in zip(streams.piece_path, streams.piece_rows.tolist(), strict=True)})
        artifact = make_artifact(plan_id="p", split_id="s", version_id="v", root_uri="file:///x",
                                 spec=config, streams=streams, pieces=layout)
        assert (artifact.schedule is not None) is stored
        again = PlanArtifact.from_ipc(artifact.to_ipc())
        for epoch in (0, 2):
            a, b = artifact.epoch_schedule(epoch), again.epoch_schedule(epoch)
            assert a.parts == b.parts == len(PROTOCOLS)
            assert a.lane_key is not None
            assert b.lane_key is not None
            assert (a.lane_key == b.lane_key).all()
            for field, values in a.arrays().items():
                assert (values == b.arrays()[field]).all(), field
        report = again.report(world_size=2)
        sched = again.epoch_schedule(0)
        assert report.batches == sched.n_consumer_batches
        assert report.aligned is not None
        assert report.aligned.parts_per_batch == len(PROTOCOLS)
        assert sum(report.batches_per_rank_untrimmed) == report.batches
        for p in PROTOCOLS:
            assert report.protocols[p].batches == report.batches
