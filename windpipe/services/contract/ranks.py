"""The ranks of a distributed job: the one check of ``(rank, world_size)``.

A consumer is rank ``r`` of ``W`` (SEMANTICS section 7). The Flight command, the
planner, the schedule and report routes all validate the pair with :func:`check_rank`,
so a bad pair gets the same ``invalid_request`` wherever it is sent.
"""

from __future__ import annotations

from windpipe.services.contract.errors import InvalidRequest

__all__ = ["check_rank"]


def check_rank(rank: int, world_size: int) -> None:
    """Raise ``invalid_request`` unless ``world_size >= 1`` and ``0 <= rank < world_size``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidRequest(
            f"rank {rank} is not in [0, world_size) for world_size {world_size}",
            details={"rank": rank, "world_size": world_size},
        )
