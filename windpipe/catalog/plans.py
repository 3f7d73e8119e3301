"""Window plans: validate a ``PlanSpec`` against a version, plan once, store, load back.

A plan is a :class:`PlanSpec` applied to one split; its id digests both, so the same
request twice returns the stored plan. What the data decides is checked here
(``invalid_config``, 422, naming the problem): protocols the version lacks, unknown
or non-numeric input/target columns, columns no stream of the split has, unknown split
names and splits with no rows of the plan's protocols. Everything decidable from the
spec alone (scaling bounds and columns, chain constraints) is checked by
``windpipe.services.contract.configs`` when it is made.

Creating a plan is the only place streams are built from the index
(``windpipe.services.planning.build_streams``): the result, a
:class:`windpipe.services.planning.artifact.PlanArtifact`, is stored with the plan row in one
transaction. The report, the schedule route and every Flight server load that artifact
(:func:`load_artifact`, :func:`plan_artifact_bytes`); only a shuffled plan's epochs are
computed when read.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from sqlalchemy.exc import IntegrityError

from windpipe.catalog.context import CatalogContext
from windpipe.catalog.limits import check_cache_fit, check_plan_spec, check_plan_windows
from windpipe.catalog.models import PlanRow
from windpipe.catalog.repository import Repository
from windpipe.catalog.retire import check_plan_live, check_split_live
from windpipe.catalog.service import (
    Created,
    content_id,
    fetch,
    get_split,
    get_version,
    split_index,
    version_segments,
)
from windpipe.catalog.splits import SPLITS
from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import InvalidConfig, WindpipeError
from windpipe.services.contract.limits import check_world_size
from windpipe.services.contract.ranks import check_rank
from windpipe.services.contract.reports import PlanReportData, ScheduleBatch, ScheduleLane
from windpipe.services.database import session_scope
from windpipe.services.planning.artifact import (
    ARTIFACT_VERSION,
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.channels import (
    absent_channel_problems,
    missing_by_column,
    stream_channels,
)
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.streams import build_streams

__all__ = [
    "create_plan",
    "get_plan",
    "load_artifact",
    "plan_artifact_bytes",
    "plan_report_for",
    "plan_schedule",
    "rank_schedule_page",
    "validate_plan",
]


def _invalid(message: str, **details: Any) -> WindpipeError:
    return InvalidConfig(message, details=details)


def validate_plan(
    spec: PlanSpec, *, schema: dict[str, Any], index: pl.DataFrame, split_id: str
) -> None:
    """Check ``spec`` against a version's schema and a split's index, or raise 422."""
    protocols = spec.ordered_protocols()
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
        for role, table in (("inputs", spec.inputs), ("targets", spec.targets)):
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
    if spec.split not in SPLITS:
        raise _invalid(
            f"unknown split {spec.split!r}; a split has {list(SPLITS)}",
            split=spec.split, splits=list(SPLITS),
        )
    rows = index.filter(
        (pl.col("split") == spec.split) & pl.col("protocol").is_in(list(protocols))
    ).height
    if rows == 0:
        raise _invalid(
            f"split {spec.split!r} of {split_id} has no manifest rows of protocols "
            f"{list(protocols)}: nothing to plan",
            split=spec.split, split_id=split_id, protocols=list(protocols),
        )


def get_plan(ctx: CatalogContext, plan_id: str) -> PlanRow:
    """The plan ``plan_id`` or ``not_found``."""
    return fetch(ctx, "plan", plan_id, Repository.get_plan)


def create_plan(ctx: CatalogContext, split_id: str, spec: PlanSpec) -> Created[PlanRow]:
    """Validate, plan once and store the plan with its artifact (one transaction); a retired
    split (or version) is ``conflict``, even for a plan it already has."""
    spec = spec.plan_spec()
    check_plan_spec(spec, ctx.limits)
    split = get_split(ctx, split_id)
    check_split_live(ctx.sessions, split_id)
    plan_id = content_id("p", split_id, spec.planning_dict())
    with session_scope(ctx.sessions) as session:
        existing = Repository(session).get_plan(plan_id)
    if existing is not None:
        check_plan_live(ctx.sessions, plan_id)
        return Created(existing, created=False)
    version = get_version(ctx, split.version_id)
    index = split_index(ctx, split_id)
    validate_plan(spec, schema=version.schema, index=index, split_id=split_id)
    segments = version_segments(ctx, version.id)
    streams = build_streams(
        index, segments, split=spec.split, protocols=spec.ordered_protocols(),
        group_key=spec.group_key, alignment_key=spec.alignment_key,
    )
    channels = stream_channels(streams, spec, missing_by_column(version.schema))
    if absent := absent_channel_problems(streams, spec, channels):
        first = absent[0]
        raise _invalid(
            f"{first['role']} of {first['protocol']!r}: column {first['column']!r}: "
            f"{first['problem']}",
            problems=absent,
        )
    records = {
        str(path): PieceRecord(str(fmt), str(fp), rows)
        for path, fmt, fp, rows in segments.select(
            "path", "format", "fingerprint", "chunk_rows").iter_rows()
    }
    artifact = make_artifact(
        plan_id=plan_id, split_id=split_id, version_id=version.id, root_uri=version.root_uri,
        spec=spec, streams=streams,
        pieces=PieceLayout.from_records(streams.piece_path, records), channels=channels,
    )
    schedule = artifact.epoch_schedule(0)
    check_plan_windows(int(schedule.lane_offset.shape[0]), ctx.limits)
    report = artifact.report(schedule=schedule)
    check_cache_fit(report.cache_working_set_bytes, ctx.limits)
    data = artifact.to_ipc()
    try:
        with session_scope(ctx.sessions) as session:
            repo = Repository(session)
            plan = PlanRow(
                id=plan_id, split_id=split_id, config=spec.planning_dict(),
                report=report.model_dump(mode="json"),
                n_streams=streams.count, n_units=schedule.n_units,
                n_batches=schedule.n_consumer_batches,
            )
            repo.add_plan(plan)
            repo.add_plan_artifact(plan_id, data, format_version=ARTIFACT_VERSION)
            session.flush()
            session.refresh(plan)
    except IntegrityError:
        return Created(get_plan(ctx, plan_id), created=False)
    ctx.cache.put(("artifact", plan_id), artifact)
    ctx.cache.put(("schedule", plan_id, 0), schedule)
    return Created(plan, created=True)


def plan_artifact_bytes(ctx: CatalogContext, plan_id: str) -> bytes:
    """The stored artifact of ``plan_id`` (Arrow IPC), or ``not_found``."""
    return fetch(ctx, "plan", plan_id, Repository.load_plan_artifact)


def load_artifact(ctx: CatalogContext, plan_id: str) -> PlanArtifact:
    """The stored plan, decoded (cached: plans never change)."""
    return ctx.cache.get(
        ("artifact", plan_id), lambda: PlanArtifact.from_ipc(plan_artifact_bytes(ctx, plan_id))
    )


def plan_schedule(ctx: CatalogContext, plan_id: str, epoch: int) -> Schedule:
    """The global schedule of ``epoch`` (cached; a pure function of the plan and epoch)."""
    artifact = load_artifact(ctx, plan_id)
    return ctx.cache.get(("schedule", plan_id, epoch), lambda: artifact.epoch_schedule(epoch))


def plan_report_for(ctx: CatalogContext, plan_id: str, *, world_size: int) -> PlanReportData:
    """The plan's report for ``world_size`` ranks (the stored one for 1, validated from
    its JSON row)."""
    check_rank(0, world_size)
    check_world_size(world_size, ctx.limits)
    if world_size == 1:
        return PlanReportData.model_validate(get_plan(ctx, plan_id).report)
    artifact = load_artifact(ctx, plan_id)
    return artifact.report(world_size=world_size, schedule=plan_schedule(ctx, plan_id, 0))


def rank_schedule_page(
    ctx: CatalogContext, plan_id: str, *, epoch: int, rank: int, world_size: int,
    start: int, page_size: int,
) -> tuple[list[ScheduleBatch], int]:
    """Batches ``start .. start+page_size`` of one rank's pass, and the pass's length.

    An aligned plan's pass is listed by part (one per protocol, ``part`` set): its
    ``batch_idx`` is the aligned batch the part belongs to."""
    check_rank(rank, world_size)
    check_world_size(world_size, ctx.limits)
    artifact = load_artifact(ctx, plan_id)
    schedule = plan_schedule(ctx, plan_id, epoch)
    batches = rank_batches(
        schedule, rank=rank, world_size=world_size,
        drop_incomplete_distributed=artifact.spec.drop_incomplete_distributed,
    )
    names = artifact.streams.protocols
    items: list[ScheduleBatch] = []
    for pos in range(start, min(start + page_size, int(batches.shape[0]))):
        g = int(batches[pos])
        lo, hi = int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])
        step = int(schedule.batch_step[g])
        items.append(ScheduleBatch(
            batch_idx=pos // schedule.parts,
            part=pos % schedule.parts if schedule.parts > 1 else None,
            global_batch_idx=g,
            unit_idx=int(schedule.batch_unit[g]),
            protocol=names[int(schedule.batch_protocol[g])],
            seq_len=int(schedule.batch_seq_len[g]),
            lanes=[
                ScheduleLane(
                    stream_idx=int(schedule.lane_stream[i]),
                    offset=int(schedule.lane_offset[i]),
                    protocol=names[int(schedule.lane_protocol[i])],
                )
                for i in range(lo, hi)
            ],
            stateful_group_idx=int(schedule.batch_group[g]) if step >= 0 else None,
            stateful_step_idx=step if step >= 0 else None,
            stateful_steps=int(schedule.batch_steps[g]) if step >= 0 else None,
        ))
    return items, int(batches.shape[0])
