"""How many batches a rank's pass of a plan holds: what ``len()`` of a loader says.

The stored plan knows it exactly (``windpipe.services.planning.ranks.rank_batches`` on the
epoch's schedule, the function the Flight server and the same-host reader deal a pass
with), so ``len(plan.loader(...))``, ``len(plan.torch_dataset(...))`` and a progress
bar's total are the number of batches the pass then yields, shuffled epochs included.
The plan is fetched once per :class:`PassLengths` (``GET /v1/plans/{id}/artifact``),
on the first ``len()``, never before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from windpipe.services.contract.ranks import check_rank
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.ranks import rank_batches

__all__ = ["PassLengths"]

_KEPT = 64  # (epoch, rank, world_size) counts remembered per plan


class PassLengths:
    """Batch counts of one plan's passes; ``fetch()`` returns the stored plan's bytes."""

    def __init__(self, fetch: Callable[[], bytes]) -> None:
        self._fetch = fetch
        self._artifact: PlanArtifact | None = None
        self._counts: dict[tuple[int, int, int], int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PassLengths({len(self._counts)} counted)"

    def __call__(self, epoch: int = 0, *, rank: int = 0, world_size: int = 1,
                 start_batch: int = 0) -> int:
        """Batches rank ``rank`` of ``world_size`` yields in ``epoch`` from ``start_batch``
        on (0 when ``start_batch`` is past the end: such a pass is refused when read)."""
        key = (epoch, rank, world_size)
        with self._lock:
            n = self._counts.get(key)
            if n is None:
                check_rank(rank, world_size)
                if self._artifact is None:
                    self._artifact = PlanArtifact.from_ipc(self._fetch())
                n = self._count(self._artifact, epoch=epoch, rank=rank,
                                world_size=world_size)
                if len(self._counts) >= _KEPT:
                    self._counts.clear()
                self._counts[key] = n
        return max(n - start_batch, 0)

    @staticmethod
    def _count(artifact: PlanArtifact, *, epoch: int, rank: int, world_size: int) -> int:
        schedule = artifact.epoch_schedule(epoch)
        batches = rank_batches(
            schedule, rank=rank, world_size=world_size,
            drop_incomplete_distributed=artifact.spec.drop_incomplete_distributed)
        return int(batches.shape[0]) // schedule.parts
