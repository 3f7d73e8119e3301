"""Window plans: validate a ``LoaderConfig`` against a version, plan, store, load back.

A plan is the planning fields of a ``LoaderConfig`` applied to one split; its id
digests both, so the same request twice returns the stored plan. What the data
decides is checked here (``invalid_config``, 422, naming the problem): protocols the
version lacks, unknown or non-numeric input/target columns, unknown split names and
splits with no rows of the plan's protocols. Everything decidable from the config
alone (scaling bounds and columns, chain constraints) is checked by
``contract.configs`` when the config is made.

Stored with a plan: its streams (``plan_streams``) and the units of epoch 0
(``plan_units``, one row per unit: protocol, batch range, lane count, and the stream
and source offset of its first lane). A ``sequential`` plan is the same in every
epoch; every epoch of a ``shuffled`` plan is the pure function
``epoch_schedule(streams, config, epoch)``, recomputed on demand and never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from sqlalchemy.exc import IntegrityError

from catalog.models import Plan
from catalog.ranks import rank_batches
from catalog.report import plan_report
from catalog.repository import Repository
from catalog.schedule import Schedule, epoch_schedule
from catalog.service import (
    CatalogContext,
    Created,
    content_id,
    fetch,
    get_split,
    get_version,
    split_index,
    version_segments,
)
from catalog.splits import SPLITS
from catalog.streams import Streams, build_streams
from contract.configs import LoaderConfig
from contract.errors import ErrorType, WindpipeError
from services.database import session_scope

__all__ = [
    "LoadedPlan",
    "chunk_geometry",
    "create_plan",
    "get_plan",
    "load_plan",
    "plan_report_for",
    "plan_schedule",
    "rank_schedule_page",
    "streams_frame",
    "units_frame",
    "validate_plan",
]


@dataclass(frozen=True, eq=False)
class LoadedPlan:
    """A stored plan with everything needed to materialize it (the Flight server's input).

    ``index`` is the split's index (with the ``split`` column), ``segments`` the
    version's segment table, ``streams`` rebuilt from them by the same pure function
    that made the plan.
    """

    plan_id: str
    split_id: str
    version_id: str
    root_uri: str
    config: LoaderConfig
    schema: dict[str, Any]
    index: pl.DataFrame
    segments: pl.DataFrame
    streams: Streams
    report: dict[str, Any]


def _invalid(message: str, **details: Any) -> WindpipeError:
    return WindpipeError(ErrorType.INVALID_CONFIG, message, details=details)


def validate_plan(
    config: LoaderConfig, *, schema: dict[str, Any], index: pl.DataFrame, split_id: str
) -> None:
    """Check ``config`` against a version's schema and a split's index, or raise 422."""
    protocols = config.ordered_protocols()
    missing = [p for p in protocols if p not in schema]
    if missing:
        raise _invalid(
            f"inputs name protocol(s) {missing} that the version does not have; "
            f"it has {sorted(schema)}",
            missing_protocols=missing, protocols=sorted(schema),
        )
    problems: list[dict[str, Any]] = []
    for protocol in protocols:
        columns = {c["name"]: c for c in schema[protocol]}
        for role, table in (("inputs", config.inputs), ("targets", config.targets)):
            for name in table[protocol]:
                info = columns.get(name)
                if info is None:
                    problems.append({
                        "protocol": protocol, "role": role, "column": name,
                        "problem": f"unknown column; {protocol!r} has {sorted(columns)}",
                    })
                elif not info.get("numeric", False):
                    problems.append({
                        "protocol": protocol, "role": role, "column": name,
                        "problem": f"not numeric (dtype {info.get('dtype')})",
                    })
    if problems:
        first = problems[0]
        raise _invalid(
            f"{first['role']} of {first['protocol']!r}: column {first['column']!r}: "
            f"{first['problem']}",
            problems=problems,
        )
    if config.split not in SPLITS:
        raise _invalid(
            f"unknown split {config.split!r}; a split has {list(SPLITS)}",
            split=config.split, splits=list(SPLITS),
        )
    rows = index.filter(
        (pl.col("split") == config.split) & pl.col("protocol").is_in(list(protocols))
    ).height
    if rows == 0:
        raise _invalid(
            f"split {config.split!r} of {split_id} has no manifest rows of protocols "
            f"{list(protocols)}: nothing to plan",
            split=config.split, split_id=split_id, protocols=list(protocols),
        )


def units_frame(schedule: Schedule, streams: Streams) -> pl.DataFrame:
    """One row per unit of ``schedule``: what ``plan_units`` stores (but the keys)."""
    ptr = schedule.unit_batch_ptr.astype(np.int64)
    first_batch = ptr[:-1]
    first_lane = schedule.batch_lane_ptr[first_batch]
    names = np.asarray(streams.protocols if streams.protocols else ("",), dtype=str)
    return pl.DataFrame({
        "unit_idx": np.arange(first_batch.shape[0], dtype=np.int64),
        "protocol": names[schedule.batch_protocol[first_batch].astype(np.int64)],
        "n_batches": np.diff(ptr),
        "n_lanes": np.diff(schedule.batch_lane_ptr)[first_batch].astype(np.int64),
        "batch_start": first_batch,
        "stream_idx": schedule.lane_stream[first_lane].astype(np.int64),
        "window_offset": schedule.lane_offset[first_lane].astype(np.int64),
    }, schema={
        "unit_idx": pl.Int64, "protocol": pl.String, "n_batches": pl.Int64,
        "n_lanes": pl.Int64, "batch_start": pl.Int64, "stream_idx": pl.Int64,
        "window_offset": pl.Int64,
    })


def streams_frame(streams: Streams) -> pl.DataFrame:
    """One row per stream: what ``plan_streams`` stores (JSON columns as text)."""
    pieces = pl.DataFrame({
        "stream_idx": streams.piece_stream,
        "manifest_row_id": streams.piece_manifest_row_id.astype(np.int64),
    }).unique(maintain_order=True)
    ids = pieces.group_by("stream_idx", maintain_order=True).agg(
        pl.col("manifest_row_id").alias("manifest_row_ids")
    )
    frame = pl.DataFrame({
        "stream_idx": np.arange(streams.count, dtype=np.int64),
        "protocol": [streams.protocols[int(c)] for c in streams.protocol],
        "group_key": [json.dumps(list(k), default=str) for k in streams.group_keys],
        "alignment_key": [json.dumps(list(k), default=str) for k in streams.alignment_keys],
        "n_rows": streams.n_rows.astype(np.int64),
    }, schema={
        "stream_idx": pl.Int64, "protocol": pl.String, "group_key": pl.String,
        "alignment_key": pl.String, "n_rows": pl.Int64,
    })
    return frame.join(ids, on="stream_idx", how="left", maintain_order="left").with_columns(
        pl.col("manifest_row_ids").fill_null(pl.lit([], dtype=pl.List(pl.Int64)))
    )


def get_plan(ctx: CatalogContext, plan_id: str) -> Plan:
    """The plan ``plan_id`` or ``not_found``."""
    return fetch(ctx, "plan", plan_id, Repository.get_plan)


def create_plan(ctx: CatalogContext, split_id: str, config: LoaderConfig) -> Created[Plan]:
    """Validate, plan epoch 0 and store the plan with its streams and units."""
    split = get_split(ctx, split_id)
    plan_id = content_id("p", split_id, config.planning_dict())
    with session_scope(ctx.sessions) as session:
        existing = Repository(session).get_plan(plan_id)
    if existing is not None:
        return Created(existing, created=False)
    version = get_version(ctx, split.version_id)
    index = split_index(ctx, split_id)
    validate_plan(config, schema=version.schema, index=index, split_id=split_id)
    segments = version_segments(ctx, version.id)
    streams = build_streams(index, segments, config)
    schedule = epoch_schedule(streams, config, 0)
    report = plan_report(
        streams, config, schedule, world_size=1, **chunk_geometry(config, index, segments)
    )
    units = units_frame(schedule, streams)
    try:
        with session_scope(ctx.sessions) as session:
            repo = Repository(session)
            plan = Plan(
                id=plan_id, split_id=split_id, config=config.planning_dict(),
                report=_json_ready(report), n_streams=streams.count, n_units=units.height,
                n_batches=schedule.n_batches,
            )
            repo.add_plan(plan)
            repo.insert_plan_streams(plan_id, streams_frame(streams))
            repo.insert_plan_units(plan_id, 0, units)
            session.flush()
            session.refresh(plan)
    except IntegrityError:
        return Created(get_plan(ctx, plan_id), created=False)
    ctx.cache.put(("schedule", plan_id, 0), schedule)
    return Created(plan, created=True)


def chunk_geometry(
    config: LoaderConfig, index: pl.DataFrame, segments: pl.DataFrame
) -> dict[str, dict[str, int]]:
    """Per protocol, the largest chunk (rows) and the bytes one cached row takes.

    The Flight server caches a chunk as float32 input and target matrices, so a row
    costs ``(C_in + C_out) * 4`` bytes; the report's working-set bound uses both.
    """
    protocols = index.select("manifest_row_id", "protocol").unique()
    joined = segments.select("manifest_row_id", "chunk_rows").join(
        protocols, on="manifest_row_id", how="inner"
    )
    chunk_rows: dict[str, int] = {}
    for protocol, rows in zip(
        joined["protocol"].to_list(), joined["chunk_rows"].to_list(), strict=True
    ):
        if protocol in config.inputs and rows:
            chunk_rows[protocol] = max(chunk_rows.get(protocol, 0), *rows)
    bytes_per_row = {
        p: 4 * (len(config.input_columns(p)) + len(config.target_columns(p)))
        for p in config.inputs
    }
    return {"chunk_bytes_per_row": bytes_per_row, "chunk_rows": chunk_rows}


def _json_ready(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return str(value)


def load_plan(ctx: CatalogContext, plan_id: str) -> LoadedPlan:
    """A stored plan with its config, split index, segments and streams (cached)."""

    def make() -> LoadedPlan:
        plan = get_plan(ctx, plan_id)
        version = get_version(ctx, plan.split.version_id)
        config = LoaderConfig.model_validate(plan.config)
        index = split_index(ctx, plan.split_id)
        segments = version_segments(ctx, version.id)
        streams = build_streams(index, segments, config)
        return LoadedPlan(
            plan_id=plan.id, split_id=plan.split_id, version_id=version.id,
            root_uri=version.root_uri, config=config, schema=version.schema, index=index,
            segments=segments, streams=streams, report=plan.report,
        )

    return ctx.cache.get(("plan", plan_id), make)


def plan_schedule(ctx: CatalogContext, plan_id: str, epoch: int) -> Schedule:
    """The global schedule of ``epoch`` (cached; a pure function of the plan and epoch)."""
    loaded = load_plan(ctx, plan_id)
    return ctx.cache.get(
        ("schedule", plan_id, epoch), lambda: epoch_schedule(loaded.streams, loaded.config, epoch)
    )


def plan_report_for(ctx: CatalogContext, plan_id: str, *, world_size: int) -> dict[str, Any]:
    """The plan's report for ``world_size`` ranks (the stored one for 1)."""
    if world_size < 1:
        raise WindpipeError(
            ErrorType.INVALID_REQUEST, f"world_size must be >= 1, got {world_size}",
            details={"world_size": world_size},
        )
    if world_size == 1:
        return get_plan(ctx, plan_id).report
    loaded = load_plan(ctx, plan_id)
    schedule = plan_schedule(ctx, plan_id, 0)
    geometry = chunk_geometry(loaded.config, loaded.index, loaded.segments)
    return _json_ready(
        plan_report(loaded.streams, loaded.config, schedule, world_size=world_size, **geometry)
    )


def rank_schedule_page(
    ctx: CatalogContext, plan_id: str, *, epoch: int, rank: int, world_size: int,
    start: int, page_size: int,
) -> tuple[list[dict[str, Any]], int]:
    """Batches ``start .. start+page_size`` of one rank's pass, and the pass's length."""
    loaded = load_plan(ctx, plan_id)
    schedule = plan_schedule(ctx, plan_id, epoch)
    batches = rank_batches(
        schedule, rank=rank, world_size=world_size,
        drop_incomplete_distributed=loaded.config.drop_incomplete_distributed,
    )
    names = loaded.streams.protocols
    items: list[dict[str, Any]] = []
    for pos in range(start, min(start + page_size, int(batches.shape[0]))):
        g = int(batches[pos])
        lo, hi = int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])
        step = int(schedule.batch_step[g])
        items.append({
            "batch_idx": pos,
            "global_batch_idx": g,
            "unit_idx": int(schedule.batch_unit[g]),
            "protocol": names[int(schedule.batch_protocol[g])],
            "seq_len": int(schedule.batch_seq_len[g]),
            "lanes": [
                {
                    "stream_idx": int(schedule.lane_stream[i]),
                    "offset": int(schedule.lane_offset[i]),
                    "protocol": names[int(schedule.lane_protocol[i])],
                }
                for i in range(lo, hi)
            ],
            "stateful_group_idx": int(schedule.batch_group[g]) if step >= 0 else None,
            "stateful_step_idx": step if step >= 0 else None,
            "stateful_steps": int(schedule.batch_steps[g]) if step >= 0 else None,
        })
    return items, int(batches.shape[0])
