"""One epoch's batches in global order (SEMANTICS sections 3, 4, 7): the :class:`Schedule`.

Batch ``i`` holds lanes ``batch_lane_ptr[i]:batch_lane_ptr[i+1]``; a lane is a lane
window ``(lane_stream, lane_offset)`` of ``batch_seq_len[i]`` input rows, or padding
(``lane_offset == -1``; ``lane_stream`` then still names the stream of the lane's
segment, for its keys). ``lane_protocol`` is the protocol code of each lane (differs
within a batch only under chain). Units (single batches, or whole stateful groups)
are ``unit_batch_ptr``; rank ``r`` of ``W`` takes units ``r, r+W, ...``
(:mod:`windpipe.services.planning.ranks`). An aligned plan (SEMANTICS 9) lays each of its batches
out
as ``parts`` consecutive part batches, one per protocol; ``lane_stream`` is -1 where
a lane's key has no data of the part's protocol, and ``lane_key`` names each lane's
key (:func:`windpipe.services.planning.aligned.aligned_keys` order). The strategies of
:mod:`windpipe.services.planning.strategies` make schedules; a stored plan holds the one of an
epoch-independent strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from windpipe.services.planning.streams import Streams

__all__ = ["SCHEDULE_ARRAYS", "DropCounts", "Schedule", "empty_schedule", "tail_rows"]

_I64 = np.int64

# every array of a schedule and its dtype (the stored plan keeps them in this form)
SCHEDULE_ARRAYS: dict[str, type[np.generic]] = {
    "batch_protocol": np.int16,
    "batch_seq_len": np.int32,
    "batch_lane_ptr": np.int64,
    "batch_unit": np.int64,
    "batch_group": np.int64,
    "batch_step": np.int32,
    "batch_steps": np.int32,
    "lane_stream": np.int64,
    "lane_offset": np.int64,
    "lane_protocol": np.int16,
    "unit_batch_ptr": np.int64,
}


@dataclass(frozen=True)
class DropCounts:
    """What an epoch leaves out, for the plan report (SEMANTICS section 7).

    Row counts are input rows with a real target. ``tail_rows`` is, per stream
    that yields something, the rows after the last row any kept lane reads
    (it overlaps the incomplete-window and incomplete-group counts).
    ``step_gap_rows`` (3a with ``step_rows > B*T``) is the rows between one window's
    last lane and the next window that no lane takes as input.
    """

    short_streams: int = 0
    short_stream_rows: int = 0
    phase_rows: int = 0
    incomplete_windows: int = 0
    incomplete_window_rows: int = 0
    incomplete_groups: int = 0
    incomplete_group_batches: int = 0
    tail_rows: int = 0
    step_gap_rows: int = 0


@dataclass(frozen=True, eq=False)
class Schedule:
    """One epoch's batches in global order."""

    epoch: int
    batch_protocol: np.ndarray  # int16 [NB] (under chain: protocol of lane 0)
    batch_seq_len: np.ndarray  # int32 [NB]
    batch_lane_ptr: np.ndarray  # int64 [NB+1]
    batch_unit: np.ndarray  # int64 [NB]
    batch_group: np.ndarray  # int64 [NB]; -1 unless stateful
    batch_step: np.ndarray  # int32 [NB]; -1 unless stateful
    batch_steps: np.ndarray  # int32 [NB]; -1 unless stateful
    lane_stream: np.ndarray  # int64 [NL]
    lane_offset: np.ndarray  # int64 [NL]; -1 = padding
    lane_protocol: np.ndarray  # int16 [NL]
    unit_batch_ptr: np.ndarray  # int64 [NU+1]
    dropped: DropCounts = field(default_factory=DropCounts)
    parts: int = 1  # part batches per batch a consumer sees (aligned: one per protocol)
    lane_key: np.ndarray | None = None  # int64 [NL], aligned plans only
    # int64 [NB]: the shuffle block each batch reads (SEMANTICS 3c), block_shuffled only
    batch_block: np.ndarray | None = None

    @property
    def n_batches(self) -> int:
        """Batches in the epoch (all ranks together)."""
        return int(self.batch_unit.shape[0])

    @property
    def n_consumer_batches(self) -> int:
        """Batches a consumer sees in the epoch (``n_batches`` over ``parts``)."""
        return self.n_batches // self.parts

    @property
    def n_units(self) -> int:
        """Schedulable units (batches in 3a, groups in 3b)."""
        return int(self.unit_batch_ptr.shape[0] - 1)

    @property
    def batch_lanes(self) -> np.ndarray:
        """Lanes per batch (int64 [NB])."""
        return np.diff(self.batch_lane_ptr)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name (:data:`SCHEDULE_ARRAYS`), in its stored dtype."""
        return {name: np.asarray(getattr(self, name), dtype=dtype)
                for name, dtype in SCHEDULE_ARRAYS.items()}


def empty_schedule(epoch: int, dropped: DropCounts) -> Schedule:
    """A schedule with no batches."""
    z = np.zeros(0, dtype=_I64)
    return Schedule(
        epoch=epoch, batch_protocol=z.astype(np.int16), batch_seq_len=z.astype(np.int32),
        batch_lane_ptr=np.zeros(1, _I64), batch_unit=z, batch_group=z,
        batch_step=z.astype(np.int32), batch_steps=z.astype(np.int32), lane_stream=z,
        lane_offset=z, lane_protocol=z.astype(np.int16), unit_batch_ptr=np.zeros(1, _I64),
        dropped=dropped,
    )


def tail_rows(
    streams: Streams, useful: np.ndarray, start: np.ndarray, lane_stream: np.ndarray,
    lane_end: np.ndarray,
) -> int:
    """Rows after the last row any kept lane reads, over the ``useful`` streams.

    ``start`` is where each stream's reading starts (its phase); ``lane_end`` the end
    row (exclusive) of each kept lane.
    """
    ends = start.astype(_I64, copy=True)
    np.maximum.at(ends, lane_stream, lane_end)
    return int((streams.n_rows - ends)[useful].sum())
