"""How an epoch's units are dealt to the ranks of a distributed job (SEMANTICS section 7).

Rank ``r`` of ``W`` takes units ``r, r+W, ...`` of the epoch's global order; a unit is
a single batch or a whole stateful group, so a group never spans two ranks.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.contract.errors import InvalidRequest
from windpipe.services.contract.ranks import check_rank
from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.schedule import Schedule

__all__ = [
    "min_rank_batches", "pass_start", "rank_batch_counts", "rank_batches", "trimmed_batches",
]

_I64 = np.int64


def rank_batch_counts(schedule: Schedule, world_size: int) -> np.ndarray:
    """Untrimmed batch count of each rank (int64 [W])."""
    check_rank(0, world_size)
    sizes = np.diff(schedule.unit_batch_ptr)
    owner = np.arange(sizes.shape[0], dtype=_I64) % world_size
    return np.bincount(owner, weights=sizes, minlength=world_size).astype(_I64)


def min_rank_batches(schedule: Schedule, world_size: int) -> int:
    """The smallest batch count of any rank, in O(units) whatever ``world_size`` is."""
    check_rank(0, world_size)
    if schedule.n_units < world_size:
        return 0  # some rank has no unit at all
    return int(rank_batch_counts(schedule, world_size).min())


def rank_batches(
    schedule: Schedule, *, rank: int, world_size: int, drop_incomplete_distributed: bool
) -> np.ndarray:
    """Global batch indices of rank ``rank``'s pass, in order (units r, r+W, ...).

    With ``drop_incomplete_distributed`` every rank stops at the smallest count of
    any rank, so all ranks yield the same number of batches; a group cut this way
    keeps its first batches.
    """
    check_rank(rank, world_size)
    units = np.arange(rank, schedule.n_units, world_size, dtype=_I64)
    sizes = np.diff(schedule.unit_batch_ptr)[units]
    owner, pos = expand_counts(sizes)
    out = schedule.unit_batch_ptr[units][owner] + pos
    if drop_incomplete_distributed:
        out = out[: min_rank_batches(schedule, world_size)]
    return out


def trimmed_batches(schedule: Schedule, world_size: int) -> int:
    """Batches that ``drop_incomplete_distributed`` trims over all ranks."""
    return schedule.n_batches - min_rank_batches(schedule, world_size) * world_size


def pass_start(schedule: Schedule, batches: np.ndarray, *, start_batch: int, rank: int,
               world_size: int) -> int:
    """Where a pass resumed at ``start_batch`` begins in ``batches`` (rank ``rank``'s pass:
    :func:`rank_batches`), counted in part batches (an aligned batch is ``parts`` of them).

    ``start_batch`` runs from 0 to the pass's batch count ``n``: ``n`` is the position
    after the last batch (a pass resumed there yields nothing, as a cursor saved after the
    last batch expects). Past it is ``invalid_request`` naming ``n`` (``details.problem``
    ``"out_of_range"``), before anything is read.
    """
    n = int(batches.shape[0]) // schedule.parts
    if start_batch > n:
        total = schedule.n_consumer_batches
        whose = (f"rank {rank} of {world_size} has {n} of the epoch's {total} batches"
                 if world_size > 1 else f"it has {n} batches")
        raise InvalidRequest(
            f"start_batch {start_batch} is past the end of the pass of epoch "
            f"{schedule.epoch}: {whose} (start_batch may be 0 to {n})",
            details={"problem": "out_of_range", "start_batch": start_batch, "n_batches": n,
                     "plan_batches": total, "epoch": schedule.epoch, "rank": rank,
                     "world_size": world_size},
        )
    return start_batch * schedule.parts
