"""``stateful``: the user's ``sequential`` with segments (``stateful_n_windows != 0``;
SEMANTICS 3b and 4).

Phase 0; segments keep stream (or chained sequence) order and are taken B at a time
within one sequence, so a group never spans two streams. The same in every epoch.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.planning.groups import Segments, segmented_schedule
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.streams import Streams

__all__ = ["schedule"]

_I64 = np.int64


def _groups(segments: Segments) -> tuple[np.ndarray, np.ndarray]:
    """Segment order kept; a group starts every B segments of one sequence."""
    seq = segments.seq
    first = np.searchsorted(seq, seq, side="left")
    j = np.arange(seq.shape[0], dtype=_I64) - first
    return np.arange(seq.shape[0], dtype=_I64), np.flatnonzero(j % segments.batch_size == 0)


def schedule(streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int) -> Schedule:
    """Segments in order, groups of B per sequence; ``epoch`` only labels it."""
    return segmented_schedule(
        streams, windows, rules, epoch=epoch, phase=np.zeros(streams.count, dtype=_I64),
        form_groups=_groups,
    )
