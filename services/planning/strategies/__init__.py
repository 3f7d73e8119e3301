"""The schedule strategies, one small module each, chosen from :data:`STRATEGIES`.

Every strategy is ``schedule(streams, windows, rules, epoch) -> Schedule`` over the
narrow inputs of :mod:`services.planning.rules`:

| name | when | module | epoch-dependent |
|---|---|---|---|
| ``plain`` | ``sequential``, ``stateful_n_windows == 0`` (SEMANTICS 3a) | :mod:`.plain` | no |
| ``sequential`` | ``sequential`` with segments (3b, 4) | :mod:`.sequential` | no |
| ``shuffled`` | ``shuffled`` (3b, 4, 7) | :mod:`.shuffled` | yes |
| ``aligned`` | ``align_by``, ``sequential`` (9) | :mod:`.aligned` | no |
| ``aligned_shuffled`` | ``align_by``, ``shuffled`` (9) | :mod:`.aligned` | yes |

A plan stores the schedule of an epoch-independent strategy once; a shuffled plan's
epochs are computed by its strategy when read (:meth:`PlanArtifact.epoch_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.contract.configs import PlanSpec
from services.contract.errors import ErrorType, WindpipeError
from services.planning.rules import OrderRules, WindowTable
from services.planning.schedule import DropCounts, Schedule, empty_schedule
from services.planning.strategies import aligned, plain, sequential, shuffled
from services.planning.streams import Streams

__all__ = ["STRATEGIES", "Strategy", "epoch_schedule", "strategy_for"]

ScheduleFn = Callable[[Streams, WindowTable, OrderRules, int], Schedule]


@dataclass(frozen=True)
class Strategy:
    """A named way to order an epoch; ``epoch_dependent`` says whether epochs differ."""

    name: str
    epoch_dependent: bool
    schedule: ScheduleFn


STRATEGIES: dict[str, Strategy] = {
    "plain": Strategy("plain", epoch_dependent=False, schedule=plain.schedule),
    "sequential": Strategy("sequential", epoch_dependent=False, schedule=sequential.schedule),
    "shuffled": Strategy("shuffled", epoch_dependent=True, schedule=shuffled.schedule),
    "aligned": Strategy("aligned", epoch_dependent=False, schedule=aligned.schedule),
    "aligned_shuffled": Strategy("aligned_shuffled", epoch_dependent=True,
                                 schedule=aligned.schedule),
}


def strategy_for(spec: PlanSpec) -> Strategy:
    """The strategy of a plan: ``plain`` exactly when sequential, stateless, not aligned."""
    if spec.align_by is not None:
        return STRATEGIES["aligned_shuffled" if spec.strategy == "shuffled" else "aligned"]
    if spec.strategy == "shuffled":
        return STRATEGIES["shuffled"]
    return STRATEGIES["plain" if spec.stateful_n_windows == 0 else "sequential"]


def epoch_schedule(streams: Streams, spec: PlanSpec, epoch: int) -> Schedule:
    """All batches of ``epoch`` in global order (SEMANTICS sections 3a, 3b, 4, 7)."""
    if epoch < 0:
        raise WindpipeError(ErrorType.INVALID_REQUEST, f"epoch must be >= 0, got {epoch}",
                            details={"epoch": epoch})
    if streams.count == 0:
        return empty_schedule(epoch, DropCounts())
    strategy = strategy_for(spec)
    return strategy.schedule(streams, WindowTable.for_protocols(spec, streams.protocols),
                             OrderRules.from_spec(spec), epoch)
