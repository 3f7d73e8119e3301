"""Rank arithmetic whose cost must not grow with the world size."""

from __future__ import annotations

import numpy as np
import pytest

from windpipe.services.planning.ranks import (
    min_rank_batches,
    rank_batch_counts,
    rank_batches,
    trimmed_batches,
)
from windpipe.services.planning.schedule import DropCounts, Schedule, empty_schedule


def _schedule(unit_sizes: list[int]) -> Schedule:
    """A schedule whose units hold ``unit_sizes`` batches (one lane each)."""
    base = empty_schedule(0, DropCounts())
    n = int(sum(unit_sizes))
    i64 = np.arange(n, dtype=np.int64)
    return Schedule(
        epoch=0, batch_protocol=np.zeros(n, np.int16), batch_seq_len=np.full(n, 4, np.int32),
        batch_lane_ptr=np.arange(n + 1, dtype=np.int64),
        batch_unit=np.repeat(np.arange(len(unit_sizes)), unit_sizes).astype(np.int64),
        batch_group=np.full(n, -1, np.int64), batch_step=np.full(n, -1, np.int32),
        batch_steps=np.full(n, -1, np.int32), lane_stream=i64, lane_offset=i64,
        lane_protocol=np.zeros(n, np.int16),
        unit_batch_ptr=np.concatenate([[0], np.cumsum(unit_sizes)]).astype(np.int64),
        dropped=base.dropped,
    )


@pytest.mark.parametrize("world_size", [1, 2, 3, 5, 7, 8, 9, 50])
def test_min_rank_batches_matches_the_counts(world_size: int) -> None:
    schedule = _schedule([1, 3, 2, 2, 1, 4, 1, 1])
    counts = rank_batch_counts(schedule, world_size)
    assert min_rank_batches(schedule, world_size) == int(counts.min())
    assert trimmed_batches(schedule, world_size) == int(counts.sum() - counts.min() * world_size)
    kept = [rank_batches(schedule, rank=r, world_size=world_size,
                         drop_incomplete_distributed=True) for r in range(world_size)]
    assert {k.shape[0] for k in kept} == {int(counts.min())}


def test_a_huge_world_size_costs_nothing() -> None:
    schedule = _schedule([2] * 10)
    assert min_rank_batches(schedule, 10**12) == 0
    assert trimmed_batches(schedule, 10**12) == 20
    last = rank_batches(schedule, rank=10**12 - 1, world_size=10**12,
                        drop_incomplete_distributed=False)
    assert last.shape == (0,)
    first = rank_batches(schedule, rank=0, world_size=10**12, drop_incomplete_distributed=False)
    assert first.tolist() == [0, 1]
