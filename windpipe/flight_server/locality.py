"""Cache locality across Flight servers: which server should stream which batches.

With several configured locations, a rank's pass is cut into endpoints at unit
boundaries (a stateful group is never split); each endpoint's home is the server
that owns the segment of its first unit's first lane, by rendezvous
(highest-random-weight) hashing of the segment's URI. The same segments thus go to
the same server's cache, whichever rank or epoch asks, and adding a server moves
only the segments it wins.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.contract.identity import hash64
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.schedule import Schedule

__all__ = ["batch_homes", "endpoint_ranges", "rendezvous"]

_I64 = np.int64


def rendezvous(key: str, locations: tuple[str, ...]) -> tuple[str, ...]:
    """``locations`` ordered by highest-random-weight hashing of ``key``."""
    return tuple(sorted(locations, key=lambda loc: hash64("loc", loc, key), reverse=True))


def batch_homes(plan: PlanContext, schedule: Schedule, batches: np.ndarray,
                locations: tuple[str, ...]) -> np.ndarray:
    """Index into ``locations`` of the server owning each batch's first lane."""
    streams = plan.streams
    lane = schedule.batch_lane_ptr[batches]
    s = np.maximum(schedule.lane_stream[lane], 0)  # -1: an aligned key without data
    row = streams.stream_base[s] + np.maximum(schedule.lane_offset[lane], 0)
    p_start = streams.stream_base[streams.piece_stream] + streams.piece_start
    piece = np.clip(np.searchsorted(p_start, row, side="right") - 1, 0, None)
    uniq, inverse = np.unique(piece, return_inverse=True)
    home = np.asarray([
        locations.index(rendezvous(f"{plan.root_uri}/{streams.piece_path[int(p)]}",
                                   locations)[0])
        for p in uniq.tolist()
    ], dtype=_I64)
    return home[inverse] if home.size else np.zeros(0, dtype=_I64)


def endpoint_ranges(
    plan: PlanContext, schedule: Schedule, batches: np.ndarray, *, start: int,
    locations: tuple[str, ...], min_batches: int,
) -> list[tuple[int, int, int]]:
    """``(start, end, home)`` ranges of the rank-local pass ``batches[start:]``.

    Cuts only at unit boundaries; neighbouring units with the same home are merged,
    and no endpoint but a lone one is shorter than ``min_batches`` (short runs join
    the endpoint before them), so a pass is a handful of endpoints, not one per unit.
    ``home`` indexes ``locations`` (0 with fewer than two locations).
    """
    n = int(batches.shape[0])
    if len(locations) <= 1 or n - start <= 0:
        return [(start, n, 0)]
    units = schedule.batch_unit[batches[start:]]
    cuts = np.flatnonzero(np.diff(units) != 0) + 1
    unit_starts = np.concatenate([[0], cuts]).astype(_I64) + start
    homes = batch_homes(plan, schedule, batches[unit_starts], locations)
    ranges: list[list[int]] = []
    ends = np.concatenate([unit_starts[1:], [n]]).tolist()
    for u0, u1, h in zip(unit_starts.tolist(), ends, homes.tolist(), strict=True):
        if ranges and (ranges[-1][2] == h or ranges[-1][1] - ranges[-1][0] < min_batches):
            ranges[-1][1] = u1
        else:
            ranges.append([u0, u1, h])
    if len(ranges) > 1 and ranges[-1][1] - ranges[-1][0] < min_batches:
        last = ranges.pop()
        ranges[-1][1] = last[1]
    return [(a, b, h) for a, b, h in ranges]
