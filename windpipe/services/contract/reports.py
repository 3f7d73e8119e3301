"""What the services report: a plan's report and schedule, a Flight server's state.

:class:`PlanReportData` is ``GET /v1/plans/{id}/report`` (SEMANTICS section 7): the
planner (``windpipe.services.planning.report``) builds it, the catalog stores it as JSON with
the plan and answers it, and the SDK reads it back (``windpipe.sdk.PlanReport``, the user's
class, wraps it; ``Data``: this is the report's data as the wire carries it). A
stored report validates from its JSON (:meth:`PlanReportData.model_validate`), and a key
this version does not know is kept (``extra="allow"``), so an older or newer peer's
report still loads and nothing it says is lost. :class:`ScheduleBatch` is one item of
``GET /v1/plans/{id}/schedule``.

The Flight actions' results (``docs/wire.md`` section 6): :class:`FlightHealth`
(``health``), :class:`CacheCounters` (``cache-stats``, also what
``GET /v1/flight/stats`` lists per server), :class:`FlightTierInfo` (``tier-info``) and
:class:`WarmProgress` (each ``warm`` result); :class:`TierStatus` is the host tier both
``tier-info`` and ``warm`` name.

Every model here dumps to exactly the JSON the wire carries (``model_dump(mode="json")``;
``aligned`` is left out for a plan that is not aligned, ``shuffle_blocks`` for one that is
not block shuffled, ``shuffle_quality`` where it is null, a warm step dumps
``exclude_unset=True``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AlignedReport",
    "CacheCounters",
    "DroppedReport",
    "FlightHealth",
    "FlightTierInfo",
    "HealthTier",
    "PlanReportData",
    "ProtocolReport",
    "ReportWarning",
    "ScheduleBatch",
    "ScheduleLane",
    "ShuffleBlocksReport",
    "TierStatus",
    "WarmProgress",
]


class _Wire(BaseModel):
    """An immutable wire value that keeps keys it does not know."""

    model_config = ConfigDict(frozen=True, extra="allow")


class DroppedReport(_Wire):
    """What an epoch leaves out (row counts are input rows with a real target)."""

    short_streams: int = Field(description="streams with N < 2 (no input has a target)")
    short_stream_rows: int = Field(description="rows of the short streams")
    phase_rows: int = Field(description="rows before a shuffled stream's phase, this epoch")
    incomplete_windows: int = Field(description="windows/lanes left out by drop_incomplete")
    incomplete_window_rows: int = Field(description="rows of those windows")
    incomplete_groups: int = Field(
        description="groups with fewer than B segments (aligned: keys) dropped by "
                    "drop_incomplete_batches (an aligned group without any window is not "
                    "a drop: it yields nothing)")
    incomplete_group_batches: int = Field(description="batches of those groups")
    tail_rows: int = Field(
        description="rows after the last row any kept lane reads (overlaps the above)")
    step_gap_rows: int = Field(
        default=0, description="rows between plain windows that no lane reads "
                               "(step_rows > batch_size x seq_len)")
    distributed_trimmed_batches: int = Field(
        description="batches cut so that every rank yields the same count")


class ProtocolReport(_Wire):
    """The report's numbers for one protocol, with its window and channel counts."""

    streams: int
    rows: int
    batch_size: int
    seq_len: int
    input_channels: int
    target_channels: int
    bytes_per_full_batch: int = Field(description="float32 inputs + targets + mask bytes")
    batches: int = Field(description="batches (an aligned plan's parts) of this protocol")
    lanes: int
    padding_lanes: int
    tokens: int
    real_tokens: int


class AlignedReport(_Wire):
    """An aligned plan's shape (SEMANTICS 9)."""

    parts_per_batch: int = Field(description="part batches per aligned batch (protocols)")
    keys: int = Field(description="alignment keys that yield batches")


class ShuffleBlocksReport(_Wire):
    """A ``block_shuffled`` plan's blocks (SEMANTICS 3c): the budget and what it holds."""

    budget_bytes: int = Field(description="shuffle_block_bytes: what one block may read")
    blocks: int = Field(description="blocks that yield batches this epoch")
    working_set_bytes: int = Field(
        description="the most decoded chunk bytes the batches of one block read (the "
                    "distinct chunks, each rows x (C_in + C_out) x 4); <= budget_bytes")


class ReportWarning(_Wire):
    """Something a plan does that is legal but probably not meant (``type``: what kind,
    ``padding`` for now; ``message`` says what and what to change)."""

    type: str = Field(description="the kind of warning: padding")
    message: str = Field(description="what the plan does, and what to change")
    protocol: str | None = Field(default=None, description="the protocol it concerns")
    share: float | None = Field(
        default=None, description="padding: the share of the batches' tokens without a "
                                  "real target (1 - real_tokens / tokens)")


class PlanReportData(_Wire):
    """What a plan yields per epoch (and per rank for ``world_size``), and what it drops.

    ``docs/api.md`` ("The report") explains each field. The user reads it as
    ``windpipe.sdk.PlanReport``, which wraps it with the plan id and a notebook view.
    """

    epoch: int = Field(description="the epoch the numbers describe")
    strategy: str = Field(description="the plan's strategy (sequential, shuffled)")
    epoch_dependent: bool = Field(description="true for shuffled plans: counts vary by epoch")
    streams: int = Field(description="streams planned")
    rows: int = Field(description="source rows of the streams")
    batches: int = Field(description="batches of one epoch over all ranks")
    units: int = Field(description="schedulable units (single batches or stateful groups)")
    world_size: int = Field(description="ranks the per-rank counts are for")
    batches_per_rank_untrimmed: list[int] = Field(
        description="batches each rank would get (units r, r+W, ...)")
    batches_per_rank: list[int] = Field(description="batches each rank yields")
    lanes: int = Field(description="lanes over all batches")
    padding_lanes: int = Field(description="padding lanes among them")
    tokens: int = Field(description="lane time steps (lanes x T)")
    real_tokens: int = Field(description="time steps with a real target: the mask's true "
                                         "count (a stream lacking a target column: none)")
    bytes: int = Field(description="float32 inputs + targets + mask bytes of all batches")
    max_batch_bytes: int = Field(description="bytes of the largest batch")
    dropped: DroppedReport
    protocols: dict[str, ProtocolReport] = Field(description="the same numbers per protocol")
    aligned: AlignedReport | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="only for aligned plans (absent otherwise)")
    cache_working_set_bytes: int = Field(
        description="the most chunk bytes one batch pins in a Flight server's cache (the "
                    "distinct chunks its lanes read; an aligned plan: the worst part)")
    shuffle_blocks: ShuffleBlocksReport | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="only for block_shuffled plans (absent otherwise)")
    shuffle_quality: float | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="0..1: mean source-rank gap of consecutive lanes over a random "
                    "order's, (n + 1) / 3 (1: globally shuffled, 0: in source order); "
                    "absent for aligned plans and epochs of fewer than two lanes")
    warnings: list[ReportWarning] = Field(
        default_factory=list, exclude_if=lambda value: not value,
        description="what the plan does that is probably not meant (more than half of a "
                    "protocol's tokens padding); absent when there is nothing to say")


class ScheduleLane(_Wire):
    """One lane: a lane window of a stream, or padding (``offset`` -1; ``stream_idx`` -1:
    an aligned lane whose key has no data of the part's protocol)."""

    stream_idx: int
    offset: int
    protocol: str


class ScheduleBatch(_Wire):
    """One batch of a rank's pass (``batch_idx`` = position in that pass); an aligned plan
    lists one entry per part (``part``: its protocol's position, SEMANTICS 9)."""

    batch_idx: int
    part: int | None = None
    global_batch_idx: int
    unit_idx: int
    protocol: str
    seq_len: int
    lanes: list[ScheduleLane]
    stateful_group_idx: int | None
    stateful_step_idx: int | None
    stateful_steps: int | None


class CacheCounters(_Wire):
    """A Flight server's chunk-cache counters (the ``cache-stats`` action)."""

    budget_bytes: int = Field(description="the cache's byte budget")
    resident_bytes: int = Field(description="bytes of loaded chunks")
    reserved_bytes: int = Field(description="bytes reserved by chunks being loaded")
    pinned_bytes: int = Field(description="bytes of chunks in use by readers")
    peak_bytes: int = Field(description="highest resident + reserved bytes")
    entries: int = Field(description="chunks in the cache")
    hits: int = Field(description="chunk lookups served from the cache")
    misses: int = Field(description="chunk lookups that loaded the chunk")
    evictions: int = Field(description="chunks evicted (least recently used)")
    loads_in_flight: int = Field(description="chunk loads in progress")
    prefetches: int = Field(description="read-ahead chunk loads")
    bytes_read: int = Field(description="bytes read from storage by chunk loads")


class TierStatus(_Wire):
    """Where a Flight server's host tier is: its directory, id, host and byte budget, and
    how the budget was chosen (``"set"``, or ``"auto: 50% of 123.0 GiB free"``)."""

    path: str
    id: str
    host: str
    budget_bytes: int
    budget_source: str = Field(default="set", description="how the budget was chosen")


class HealthTier(_Wire):
    """The host tier's budget in ``health``, for an authenticated caller only: its bytes and
    how they were chosen (``"set"``, ``"auto: 50% of 123.0 GiB free"``; ``"off"`` with
    ``budget_bytes`` 0: the server has no tier). Where it is: :class:`FlightTierInfo`."""

    budget_bytes: int
    budget_source: str
    used_bytes: int | None = None  # bytes of the blocks in the tier now (None: not told)


def _absent(value: object) -> bool:
    return value is None


class FlightHealth(_Wire):
    """The ``health`` action, the one call without a token: liveness, the wire version and
    stream counts. For an anonymous caller nothing about the host; an authenticated one
    also gets ``tier`` (:class:`HealthTier`), so an operator sees the tier's budget where
    they check liveness (its path and host: :class:`FlightTierInfo`)."""

    status: Literal["ok"] = "ok"
    version: int = Field(description="the wire version (docs/wire.md)")
    active_streams: int = Field(description="streams being served now")
    streams: int = Field(description="streams started since the server started")
    tier: HealthTier | None = Field(
        default=None, exclude_if=_absent,
        description="authenticated callers: the host tier's budget (absent for anonymous)")


class FlightTierInfo(_Wire):
    """The ``tier-info`` action (authenticated): where the server's host tier is, so a
    reader on the same host can map its blocks."""

    tier: TierStatus | None = Field(description="the server's host tier, or null")


class WarmProgress(_Wire):
    """One result of the ``warm`` action: ``loaded`` of ``total`` chunks, ``bytes`` of
    ``total_bytes``; only the last one sets ``blocks`` and ``tier``."""

    loaded: int
    total: int
    bytes: int
    total_bytes: int
    seconds: float = Field(description="seconds since the warm began")
    time: float = Field(description="when this step was sent (Unix time)")
    blocks: list[str] | None = Field(default=None, description="last result: the block keys")
    tier: TierStatus | None = Field(
        default=None, description="last result: the tier that holds the blocks, or null")
