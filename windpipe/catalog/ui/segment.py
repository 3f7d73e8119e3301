"""What the segment page shows: a segment's channels read from storage and a plan's
windows over it.

Only the channels drawn are read (the protocol's numeric columns, at most
:data:`MAX_CHANNELS`, and the time column), a few columns at a time (at most
:data:`READ_BYTES` at once), each downsampled on the server
(:mod:`windpipe.catalog.ui.plot`) and dropped before the next group is read. The
windows are epoch 0's lanes of the plan whose stream holds this segment, as input rows
``[o, o + T)`` cut to the segment (SEMANTICS section 3), found with numpy over the whole
schedule at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from windpipe.catalog import plans, service
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import Version
from windpipe.catalog.ui.plot import SegmentPlot, draw_segment
from windpipe.services.contract.errors import NotFound, WindpipeError
from windpipe.services.contract.stats import TIME_COLUMN
from windpipe.services.storage.segments import SegmentInfo, inspect_segment, read_all
from windpipe.services.storage.store import Storage, open_root

__all__ = ["MAX_CHANNELS", "SegmentView", "plan_windows", "segment_view"]

MAX_CHANNELS = 12
READ_BYTES = 64 << 20


@dataclass(frozen=True)
class SegmentView:
    """The segment page's data: which segment, its manifest row, the plot (None when the
    segment could not be read: ``problem`` says why, in the catalog's words)."""

    version_id: str
    manifest_row_id: int
    ordinal: int
    path: str
    format: str
    rows: int
    identity: dict[str, Any]
    plot: SegmentPlot | None
    problem: str | None
    plan_id: str | None


def _segment_row(ctx: CatalogContext, version_id: str, manifest_row_id: int,
                 ordinal: int) -> dict[str, Any]:
    segments = service.version_segments(ctx, version_id)
    found = segments.filter((pl.col("manifest_row_id") == manifest_row_id)
                            & (pl.col("ordinal") == ordinal))
    if found.height == 0:
        raise NotFound(f"version {version_id!r} has no segment {manifest_row_id}/{ordinal}",
                       details={"manifest_row_id": manifest_row_id, "ordinal": ordinal})
    return found.row(0, named=True)


def plan_windows(ctx: CatalogContext, plan_id: str, *, manifest_row_id: int,
                 path: str) -> np.ndarray:
    """Input row ranges ``[a, b)`` (int64 ``[K, 2]``, in the segment's rows, distinct,
    sorted) of the lanes of epoch 0 of ``plan_id`` that read the segment."""
    artifact = plans.load_artifact(ctx, plan_id)
    streams = artifact.streams
    pieces = np.flatnonzero((streams.piece_manifest_row_id == manifest_row_id)
                            & (np.asarray(streams.piece_path, dtype=object) == path))
    schedule = plans.plan_schedule(ctx, plan_id, 0)
    seq = np.repeat(schedule.batch_seq_len.astype(np.int64), np.diff(schedule.batch_lane_ptr))
    found = []
    for p in pieces.tolist():
        stream = int(streams.piece_stream[p])
        start, rows = int(streams.piece_start[p]), int(streams.piece_rows[p])
        lanes = (schedule.lane_stream == stream) & (schedule.lane_offset >= 0)
        a = schedule.lane_offset[lanes].astype(np.int64)
        b = a + seq[lanes]
        lo, hi = np.maximum(a, start), np.minimum(b, start + rows)
        keep = lo < hi
        found.append(np.stack([lo[keep] - start, hi[keep] - start], axis=1))
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.concatenate(found), axis=0).astype(np.int64)


def _channels(storage: Storage, info: SegmentInfo, names: list[str], has: set[str],
              ) -> Iterator[tuple[str, np.ndarray | None]]:
    """``(name, values)`` of every channel in ``names``' order (None: the segment lacks
    it), read a few columns at a time: at most :data:`READ_BYTES` of float64 at once (at
    least one column), so a group is one pass over the segment's chunks rather than one
    a column, and a long segment still holds only a group in memory."""
    per_read = max(1, READ_BYTES // max(8 * info.row_count, 1))
    present = [n for n in names if n in has]
    groups = iter([present[i:i + per_read] for i in range(0, len(present), per_read)])
    values: dict[str, np.ndarray] = {}
    for name in names:
        if name not in has:
            yield name, None
            continue
        if name not in values:
            values = read_all(storage, info, next(groups))
        yield name, values.pop(name)


def _hide_root(message: str, version: Version) -> str:
    """A storage error's message without the dataset root (a host path or bucket)."""
    root = version.root_uri
    for form in (root, root.removeprefix("file://")):
        if form:
            message = message.replace(form, "<root>")
    return message


def segment_view(ctx: CatalogContext, version: Version, *, manifest_row_id: int,
                 ordinal: int, plan_id: str | None) -> SegmentView:
    """The segment ``manifest_row_id``/``ordinal`` of ``version``, drawn, with
    ``plan_id``'s windows (a plan of this version; None: no overlay)."""
    seg = _segment_row(ctx, version.id, manifest_row_id, ordinal)
    index = service.version_index(ctx, version.id).filter(
        pl.col("manifest_row_id") == manifest_row_id)
    identity: dict[str, Any] = {k: index[k][0] for k in ("set_id", "cell_id", "cidx", "protocol")
                if k in index.columns and index.height}
    protocol = str(identity.get("protocol", ""))
    columns = [c for c in version.schema.get(protocol, []) if c.get("numeric")]
    names = [str(c["name"]) for c in columns if c["name"] != TIME_COLUMN][:MAX_CHANNELS]
    plot, problem = None, None
    try:
        storage = open_root(version.root_uri, ctx.storage)
        info = inspect_segment(storage, str(seg["path"]))
        has = {c.name for c in info.columns}
        time_in = TIME_COLUMN in has and any(c["name"] == TIME_COLUMN for c in columns)
        time = read_all(storage, info, [TIME_COLUMN])[TIME_COLUMN] if time_in else None
        windows = (plan_windows(ctx, plan_id, manifest_row_id=manifest_row_id,
                                path=str(seg["path"]))
                   if plan_id is not None else np.zeros((0, 2), dtype=np.int64))
        channels = _channels(storage, info, names, has)
        plot = draw_segment(channels, rows=info.row_count, time=time,
                            time_name=TIME_COLUMN, windows=windows)
    except WindpipeError as exc:
        problem = f"{exc.type}: {_hide_root(exc.message, version)}"
    return SegmentView(
        version_id=version.id, manifest_row_id=manifest_row_id, ordinal=ordinal,
        path=str(seg["path"]), format=str(seg["format"]), rows=int(seg["row_count"]),
        identity=identity, plot=plot, problem=problem, plan_id=plan_id)
