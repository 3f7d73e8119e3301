"""The planning core: streams, schedules, ranks, provenance ranges, the report, the stored plan.

Pure functions over numpy, polars and Arrow; no HTTP, no SQL, no gRPC, no storage I/O
(``pyproject.toml``'s import contracts hold it to that). The catalog calls
:func:`build_streams` and :func:`make_artifact` once per plan; every consumer loads
the :class:`PlanArtifact` and asks it for an epoch's :class:`Schedule`.
"""

from windpipe.services.planning.artifact import (
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.ranks import rank_batch_counts, rank_batches, trimmed_batches
from windpipe.services.planning.report import plan_report
from windpipe.services.planning.schedule import DropCounts, Schedule
from windpipe.services.planning.strategies import STRATEGIES, epoch_schedule, strategy_for
from windpipe.services.planning.streams import Streams, build_streams

__all__ = [
    "STRATEGIES",
    "DropCounts",
    "PieceLayout",
    "PieceRecord",
    "PlanArtifact",
    "Schedule",
    "Streams",
    "build_streams",
    "epoch_schedule",
    "make_artifact",
    "plan_report",
    "rank_batch_counts",
    "rank_batches",
    "strategy_for",
    "trimmed_batches",
]
