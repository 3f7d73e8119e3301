"""What each page shows, gathered through the catalog's service layer (the same functions
the REST routes call, so a page and the API agree), as plain values for its template.

Every function here assumes the caller's scope was checked (:mod:`windpipe.catalog.ui.access`)
and bounds its own cost: lists are pages, an index is filtered and sliced as one polars
frame, a plan's preview is the first few batches of one rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from windpipe.catalog import plans, retire, service, stats
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import PlanRow, Version, as_utc
from windpipe.catalog.ui.plan_plot import draw_plan
from windpipe.catalog.ui.queries import dataset_jobs, plans_of, splits_of
from windpipe.catalog.ui.split_plot import draw_histogram, draw_split
from windpipe.services.contract.configs import DEFAULT_GROUP_BY
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.reports import PlanReportData
from windpipe.services.contract.scaling import ScalingSpec
from windpipe.services.contract.stats import SIDES, StatsRequest

__all__ = [
    "MAX_PREVIEW_BATCHES",
    "VersionLine",
    "index_page",
    "plan_page",
    "split_page",
    "version_line",
    "version_page",
]

MAX_PREVIEW_BATCHES = 32
_INDEX_COLUMNS = ("manifest_row_id", "set_id", "cell_id", "cidx", "protocol", "row_count",
                  "n_segments")


@dataclass(frozen=True)
class VersionLine:
    """A version as the dataset page lists it. ``numeric_bytes``: its numeric values as
    float32, from registration's profile (rows x columns x 4; None without a profile)."""

    id: str
    created_at: Any
    segments: int
    manifest_rows: int
    rows: int
    protocols: tuple[str, ...]
    numeric_bytes: int | None
    retired_at: Any
    description: str | None


def version_line(v: Version) -> VersionLine:
    """The line of one version."""
    profile = v.profile or {}
    columns = profile.get("columns")
    numeric = (sum(int(c.get("rows", 0)) for c in columns) * 4
               if isinstance(columns, list) else None)
    return VersionLine(
        id=v.id, created_at=as_utc(v.created_at), segments=v.n_segments,
        manifest_rows=v.n_manifest_rows, rows=v.n_rows, protocols=tuple(sorted(v.schema)),
        numeric_bytes=numeric, retired_at=as_utc(v.retired_at), description=v.description)


def index_page(ctx: CatalogContext, version_id: str, *, cell: str, protocol: str,
               limit: int, offset: int) -> dict[str, Any]:
    """A page of the version's ML index, filtered by cell id (substring) and protocol
    (exact), with each row's segments."""
    frame = service.version_index(ctx, version_id)
    protocols = sorted(frame["protocol"].cast(pl.String).unique().to_list())
    if cell:
        frame = frame.filter(pl.col("cell_id").cast(pl.String).str.contains(cell, literal=True))
    if protocol:
        frame = frame.filter(pl.col("protocol").cast(pl.String) == protocol)
    page = frame.slice(offset, limit)
    rows = page.select([c for c in _INDEX_COLUMNS if c in page.columns]).to_dicts()
    for row, paths in zip(rows, page["segment_paths"].to_list(), strict=True):
        row["segments"] = list(range(len(paths or [])))
    return {"rows": rows, "total": frame.height, "protocols": protocols,
            "more": offset + limit < frame.height}


def version_page(ctx: CatalogContext, version: Version, *,
                 stale_after_s: float | None = None) -> dict[str, Any]:
    """The version's summary, splits, plans and registration jobs (its own and the
    dataset's running ones: ``refresh`` while one runs)."""
    splits = splits_of(ctx, version.id)
    jobs = dataset_jobs(ctx, version.dataset.name, version_id=version.id,
                        stale_after_s=stale_after_s)
    return {
        "line": version_line(version),
        "dataset": version.dataset.name,
        "schema": {p: list(cols) for p, cols in sorted(version.schema.items())},
        "metadata_columns": version.metadata_columns,
        "splits": [{"id": s.id, "strategy": s.config.get("strategy"), "counts": s.counts,
                    "created_at": as_utc(s.created_at),
                    "retired_at": retire.split_retired_at(ctx.sessions, s.id)}
                   for s in splits],
        "plans": [_plan_line(p) for p in plans_of(ctx, version_id=version.id)],
        "jobs": jobs,
        "refresh": any(j.running for j in jobs),
    }


def _plan_line(p: PlanRow) -> dict[str, Any]:
    return {"id": p.id, "split_id": p.split_id, "strategy": p.report.get("strategy"),
            "batches": p.n_batches, "streams": p.n_streams,
            "created_at": as_utc(p.created_at)}


def _side_stats(ctx: CatalogContext, split_id: str) -> list[dict[str, Any]]:
    """Per side: its stored statistics (None: not computed) and each column's histogram,
    train and val side by side per protocol and column."""
    out = []
    for side in SIDES:
        found = stats.stored_split_stats(ctx, split_id, StatsRequest(side=side))
        rows = [] if found is None else [{"stats": c, "histogram": draw_histogram(c)}
                                         for c in found.stats]
        out.append({"side": side, "data": found, "rows": rows})
    return out


def _scalings(split_plans: list[PlanRow]) -> list[dict[str, Any]]:
    """The scalings the split's plans store (each plan's config keeps its fitted numbers:
    they are part of its identity), one line per plan and column."""
    out = []
    for p in split_plans:
        for spec in p.config.get("scaling") or ():
            if not isinstance(spec, dict):
                continue
            try:
                scaling = ScalingSpec.model_validate(spec)
            except (WindpipeError, ValueError):  # a spec an older catalog stored
                continue
            out.append({"plan": p.id, "scaling": scaling})
    return out


def split_page(ctx: CatalogContext, split_id: str) -> dict[str, Any]:
    """The split's counts per side, its plot, leakage, stored statistics with their
    histograms, its plans and the scalings they store."""
    split = service.get_split(ctx, split_id)
    group_by = split.config.get("group_by") or DEFAULT_GROUP_BY
    plot = draw_split(service.split_index(ctx, split_id), group_by=tuple(group_by))
    split_plans = plans_of(ctx, split_id=split_id)
    return {
        "split": split,
        "retired_at": retire.split_retired_at(ctx.sessions, split_id),
        "config": split.config,
        "counts": split.counts,
        "leakage": split.leakage,
        "plot": plot,
        "stats": _side_stats(ctx, split_id),
        "plans": [_plan_line(p) for p in split_plans],
        "scalings": _scalings(split_plans),
    }


def _provenance(artifact: Any, ordinals: dict[tuple[int, str], int], stream: int,
                offset: int, seq_len: int) -> list[dict[str, Any]]:
    """The segments a lane's input rows ``[offset, offset + seq_len)`` come from: each
    one's manifest row, ordinal and rows within it."""
    streams = artifact.streams
    lo, hi = int(streams.piece_ptr[stream]), int(streams.piece_ptr[stream + 1])
    starts = streams.piece_start[lo:hi]
    ends = starts + streams.piece_rows[lo:hi]
    hit = np.flatnonzero((starts < offset + seq_len) & (ends > offset))
    out = []
    for k in hit.tolist():
        p = lo + k
        mrid, path = int(streams.piece_manifest_row_id[p]), str(streams.piece_path[p])
        first = max(offset, int(starts[k])) - int(starts[k])
        last = min(offset + seq_len, int(ends[k])) - int(starts[k])
        out.append({"manifest_row_id": mrid, "ordinal": ordinals.get((mrid, path)),
                    "first": first, "stop": last})
    return out


def _ordinals(ctx: CatalogContext, version_id: str, artifact: Any,
              streams: set[int]) -> dict[tuple[int, str], int]:
    """``(manifest_row_id, path) -> ordinal`` of the segments of ``streams`` (one filter
    of the version's cached segment table)."""
    pieces = artifact.streams
    rows = {int(pieces.piece_manifest_row_id[p]) for s in streams
            for p in range(int(pieces.piece_ptr[s]), int(pieces.piece_ptr[s + 1]))}
    found = service.version_segments(ctx, version_id).filter(
        pl.col("manifest_row_id").is_in(sorted(rows)))
    return {(int(m), str(path)): int(o) for m, path, o in
            found.select("manifest_row_id", "path", "ordinal").iter_rows()}


def plan_page(ctx: CatalogContext, plan_id: str, *, batches: int) -> dict[str, Any]:
    """The plan's report and its first ``batches`` batches (rank 0 of 1, epoch 0), each
    lane with the group it reads and the segment rows its inputs come from."""
    plan = plans.get_plan(ctx, plan_id)
    report = PlanReportData.model_validate(plan.report)
    artifact = plans.load_artifact(ctx, plan_id)
    items, total = plans.rank_schedule_page(ctx, plan_id, epoch=0, rank=0, world_size=1,
                                            start=0, page_size=min(batches, MAX_PREVIEW_BATCHES))
    ordinals = _ordinals(ctx, artifact.version_id, artifact,
                         {lane.stream_idx for b in items for lane in b.lanes
                          if lane.stream_idx >= 0 and lane.offset >= 0})
    names = list(artifact.spec.group_key)
    preview = []
    for batch in items:
        lanes: list[dict[str, Any]] = []
        for lane in batch.lanes:
            if lane.offset < 0 or lane.stream_idx < 0:
                lanes.append({"padding": True, "stream": lane.stream_idx})
                continue
            key = artifact.streams.group_keys[lane.stream_idx]
            lanes.append({
                "padding": False, "stream": lane.stream_idx, "offset": lane.offset,
                "group": dict(zip(names, key, strict=False)),
                "sources": _provenance(artifact, ordinals, lane.stream_idx, lane.offset,
                                       batch.seq_len),
            })
        preview.append({"batch": batch, "lanes": lanes})
    return {
        "plan": plan, "report": report, "version_id": artifact.version_id,
        "retired_at": retire.plan_retired_at(ctx.sessions, plan_id),
        "config": plan.config, "preview": preview, "schedule_batches": total,
        "plot": draw_plan(artifact, plans.plan_schedule(ctx, plan_id, 0)),
        "padding_share": (1 - report.real_tokens / report.tokens) if report.tokens else 0.0,
    }
