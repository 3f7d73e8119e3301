"""The schedule strategies, one small module each, chosen from :data:`STRATEGIES`.

Every strategy is ``schedule(streams, windows, rules, epoch) -> Schedule`` over the
narrow inputs of :mod:`windpipe.services.planning.rules`:

| name | when | module | epoch-dependent |
|---|---|---|---|
| ``sequential`` | ``sequential``, ``stateful_n_windows == 0`` (3a) | :mod:`.sequential` | no |
| ``stateful`` | ``sequential`` with segments (3b, 4) | :mod:`.stateful` | no |
| ``shuffled`` | ``shuffled`` (3b, 4, 7) | :mod:`.shuffled` | yes |
| ``block_shuffled`` | ``block_shuffled`` (3c, 7) | :mod:`.block_shuffled` | yes |
| ``aligned`` | ``align_by``, ``sequential`` (9) | :mod:`.aligned` | no |
| ``aligned_shuffled`` | ``align_by``, ``shuffled`` (9) | :mod:`.aligned` | yes |

A user's strategy keeps its name here: ``sequential`` is the user's stateless
``sequential``, and its stateful form is ``stateful``. Plan artifacts written before
call these two ``plain`` and ``sequential``; no reader looks at the stored name (the
strategy follows from the spec, :func:`strategy_for`), so they load as they are.

A plan stores the schedule of an epoch-independent strategy once; a shuffled plan's
epochs are computed by its strategy when read (:meth:`PlanArtifact.epoch_schedule`).
A strategy that places windows by the plan's storage chunks (``reads_chunks``:
``block_shuffled``) is also handed the chunk table, which the others never need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import InternalError, InvalidRequest
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import DropCounts, Schedule, empty_schedule
from windpipe.services.planning.strategies import (
    aligned,
    block_shuffled,
    sequential,
    shuffled,
    stateful,
)
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import ChunkTable, protocol_row_bytes

__all__ = ["STRATEGIES", "ChunkedScheduleFn", "ScheduleFn", "Strategy", "epoch_schedule",
           "strategy_for"]

ScheduleFn = Callable[[Streams, WindowTable, OrderRules, int], Schedule]
ChunkedScheduleFn = Callable[..., Schedule]  # ScheduleFn with a keyword ``chunks``


@dataclass(frozen=True)
class Strategy:
    """A named way to order an epoch; ``epoch_dependent`` says whether epochs differ.

    ``chunked`` is set (instead of ``schedule``) for a strategy that needs the plan's chunk
    table: it is called with ``chunks=`` as well."""

    name: str
    epoch_dependent: bool
    schedule: ScheduleFn | None = None
    chunked: ChunkedScheduleFn | None = None

    def run(self, streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int, *,
            chunks: ChunkTable) -> Schedule:
        """The schedule of ``epoch`` (``chunks`` goes to a strategy that reads it)."""
        if self.chunked is not None:
            return self.chunked(streams, windows, rules, epoch, chunks=chunks)
        if self.schedule is None:
            raise InternalError(f"strategy {self.name!r} has no schedule")
        return self.schedule(streams, windows, rules, epoch)


STRATEGIES: dict[str, Strategy] = {
    "sequential": Strategy("sequential", epoch_dependent=False, schedule=sequential.schedule),
    "stateful": Strategy("stateful", epoch_dependent=False, schedule=stateful.schedule),
    "shuffled": Strategy("shuffled", epoch_dependent=True, schedule=shuffled.schedule),
    "block_shuffled": Strategy("block_shuffled", epoch_dependent=True,
                               chunked=block_shuffled.schedule),
    "aligned": Strategy("aligned", epoch_dependent=False, schedule=aligned.schedule),
    "aligned_shuffled": Strategy("aligned_shuffled", epoch_dependent=True,
                                 schedule=aligned.schedule),
}


_NO_CHUNKS = ChunkTable(gstart=np.zeros(0, np.int64), nbytes=np.zeros(0, np.int64))


def strategy_for(spec: PlanSpec) -> Strategy:
    """The strategy of a plan: ``sequential`` exactly when sequential, stateless, not
    aligned; ``stateful`` when sequential with state, not aligned."""
    if spec.align_by is not None:
        return STRATEGIES["aligned_shuffled" if spec.strategy == "shuffled" else "aligned"]
    if spec.strategy in ("shuffled", "block_shuffled"):
        return STRATEGIES[spec.strategy]
    return STRATEGIES["sequential" if spec.stateful_n_windows == 0 else "stateful"]


def epoch_schedule(streams: Streams, spec: PlanSpec, epoch: int, *,
                   chunks: ChunkTable | None = None) -> Schedule:
    """All batches of ``epoch`` in global order (SEMANTICS sections 3a, 3b, 3c, 4, 7).

    ``chunks``: the plan's chunk table (:attr:`PlanArtifact.chunk_table`); without it each
    piece counts as one chunk (only ``block_shuffled`` reads it)."""
    if epoch < 0:
        raise InvalidRequest(f"epoch must be >= 0, got {epoch}",
                             details={"epoch": epoch})
    if streams.count == 0:
        return empty_schedule(epoch, DropCounts())
    strategy = strategy_for(spec)
    if chunks is None and strategy.chunked is not None:
        chunks = ChunkTable.whole_pieces(
            streams, row_bytes=protocol_row_bytes(spec, streams.protocols))
    return strategy.run(streams, WindowTable.for_protocols(spec, streams.protocols),
                        OrderRules.from_spec(spec), epoch,
                        chunks=chunks if chunks is not None else _NO_CHUNKS)
