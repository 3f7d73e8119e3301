"""Request and response bodies of the REST API.

Config bodies reuse ``windpipe.services.contract.configs`` directly (``ValidationConfig`` for
splits,
``PlanSpec`` for plans: only what identifies a plan, so a runtime option is a 422), and
so do the answers that hold them (``SplitOut.config``, ``PlanOut.config``, validated from
the stored JSON). Responses are built from ORM rows by the ``from_row``
constructors. The plan report, schedule items and Flight cache counters are the wire
contract's models (``windpipe.services.contract.reports``). Every string a request body stores is
:data:`~services.contract.text.StoredText`, every manifest row a
:data:`~services.contract.text.StoredObject` (the configs check theirs in ``Frozen``), so
text a database would refuse (a NUL, a lone surrogate) is a 422 naming its field on
every database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from windpipe.catalog.bad_files import MAX_SKIPPED_LISTED, OnBadFile, SkippedFiles
from windpipe.catalog.jobs import JobView
from windpipe.catalog.models import (
    ApiToken,
    AuditEvent,
    Dataset,
    PlanRow,
    Segment,
    SplitRow,
    Version,
    as_utc,
)
from windpipe.catalog.pattern_syntax import MAX_EXCLUDE_GLOBS, MAX_GLOB_CHARS, exclude_problem
from windpipe.catalog.principals import MAX_TOKEN_LIFETIME_S, MIN_TOKEN_LIFETIME_S
from windpipe.services.contract.configs import PlanSpec, ValidationConfig
from windpipe.services.contract.leakage import SplitLeakage
from windpipe.services.contract.principals import Role
from windpipe.services.contract.reports import CacheCounters
from windpipe.services.contract.stats import VersionProfile
from windpipe.services.contract.text import StoredObject, StoredText

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "AuditEventOut",
    "ConfigOut",
    "DatasetOut",
    "FlightErrorOut",
    "FlightServerStatsOut",
    "FlightStatsOut",
    "HealthOut",
    "JobOut",
    "PageOut",
    "PlanOut",
    "RegisterVersionIn",
    "SegmentOut",
    "SkippedFileOut",
    "SplitOut",
    "TokenCreatedOut",
    "TokenIn",
    "TokenOut",
    "VersionOut",
]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

ItemT = TypeVar("ItemT")


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)

    @field_validator("created_at", "retired_at", "revoked_at", "expires_at", "at",
                     mode="after", check_fields=False)
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """SQLite drops the time zone of stored timestamps; they are all UTC."""
        return as_utc(value)


class PageOut(_Out, Generic[ItemT]):
    """One page of a list; ``next_page_token`` is null on the last page."""

    items: list[ItemT]
    next_page_token: str | None = None


class HealthOut(_Out):
    """``/healthz`` and ``/readyz``."""

    status: Literal["ok"] = "ok"


class ConfigOut(_Out):
    """``GET /v1/config``: what this server supports and where its Flight servers are."""

    server_version: str
    api_version: Literal["v1"] = "v1"
    limits: dict[str, int]
    flight_locations: list[str]
    storage_schemes: list[str]
    auth: Literal["none", "bearer"]


class DatasetOut(_Out):
    """A dataset."""

    name: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Dataset) -> DatasetOut:
        """From the ORM row."""
        return cls(name=row.name, created_at=row.created_at)


class RegisterVersionIn(BaseModel):
    """``POST /v1/datasets/{name}/versions``: a manifest path under ``root``, its rows, or
    a path pattern the catalog matches the files under ``root`` against (docs/data.md)."""

    model_config = ConfigDict(extra="forbid")

    root: StoredText = Field(min_length=1, description="file:///abs/dir or s3://bucket/prefix")
    manifest: StoredText | None = Field(default=None, description="manifest path under root")
    rows: list[StoredObject] | None = Field(
        default=None, description="manifest rows")
    pattern: StoredText | None = Field(
        default=None, description="path pattern under root, one segment per matching file, "
                                  "e.g. '{cell_id}/{protocol}/cycle_{cidx}.parquet'")
    set_id: StoredText | None = Field(
        default=None, description="pattern only: the set_id of every row when the pattern "
                                  "has no {set_id} (default: the dataset name)")
    protocol: StoredText | None = Field(
        default=None, description="pattern only: the protocol of every row when the pattern "
                                  "has no {protocol} (default cycling)")
    metadata: StoredText | None = Field(
        default=None, description="pattern only: a .csv or .parquet side table under root "
                                  "keyed by cell_id (and set_id)")
    metadata_rows: list[StoredObject] | None = Field(
        default=None, description="pattern only: the side table's rows")
    exclude: list[Annotated[StoredText, Field(max_length=MAX_GLOB_CHARS)]] | None = Field(
        default=None, max_length=MAX_EXCLUDE_GLOBS,
        description="pattern only: globs of paths to leave out, each matched against a "
                    "whole path relative to root with fnmatch rules ('*' also matches "
                    "'/'), e.g. 'c07/*' or '*/cycle_3.parquet'; a matching folder is not "
                    f"listed. At most {MAX_EXCLUDE_GLOBS} globs of {MAX_GLOB_CHARS} "
                    "characters; one with a '..' component or an absolute one is refused")
    on_bad_file: OnBadFile = Field(
        default="stop",
        description="pattern only: what a file that cannot be read as a segment (corrupt, "
                    "not parquet, columns unlike the other files of its identity) does: "
                    "'stop' refuses the registration naming it; 'skip' leaves it out, with "
                    "the other files of its identity, and the answer's 'skipped' lists it")
    description: StoredText | None = None

    @field_validator("exclude", mode="after")
    @classmethod
    def _globs_under_root(cls, globs: list[str] | None) -> list[str] | None:
        for glob in globs or ():
            why = exclude_problem(glob)
            if why is not None:
                msg = f"exclude glob {glob!r} {why}"
                raise ValueError(msg)
        return globs

    @model_validator(mode="after")
    def _one_source(self) -> RegisterVersionIn:
        if sum(x is not None for x in (self.manifest, self.rows, self.pattern)) != 1:
            msg = "give exactly one of 'manifest' (a path under root), 'rows' and 'pattern'"
            raise ValueError(msg)
        extras = [name for name in ("set_id", "protocol", "metadata", "metadata_rows",
                                    "exclude") if getattr(self, name) is not None]
        if self.on_bad_file != "stop":
            extras.append("on_bad_file")
        if self.pattern is None and extras:
            msg = f"{extras} apply to a registration by 'pattern' only"
            raise ValueError(msg)
        if self.metadata is not None and self.metadata_rows is not None:
            msg = "give at most one of 'metadata' (a path under root) and 'metadata_rows'"
            raise ValueError(msg)
        return self


class SkippedFileOut(_Out):
    """A file a registration left out (``on_bad_file="skip"``): its path under the root
    and why."""

    path: str
    reason: str


class VersionOut(_Out):
    """A registered dataset version."""

    id: str
    dataset: str
    root_uri: str
    description: str | None
    n_manifest_rows: int
    n_segments: int
    n_rows: int
    schema_: dict[str, Any] = Field(alias="schema", serialization_alias="schema")
    metadata_columns: list[dict[str, Any]]
    created_at: datetime
    retired_at: datetime | None = None
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="registration only: protocol names new to the catalog or close to a "
                    "known one, and the profile's findings (nulls, infinities, irregular "
                    "sampling) ({type, protocol, message, ...}); empty elsewhere",
    )
    profile: VersionProfile | None = Field(
        default=None,
        description="what registration learned about the values: null and non-finite "
                    "counts per protocol and column, irregularly sampled segments (null "
                    "for versions registered before profiles existed)",
    )
    skipped: list[SkippedFileOut] = Field(
        default_factory=list,
        description="registration by pattern with on_bad_file 'skip' only: the files left "
                    f"out, each with its reason, the first {MAX_SKIPPED_LISTED} in "
                    "manifest order; empty elsewhere",
    )
    skipped_count: int = Field(
        default=0, description="registration only: how many files were left out (all of "
                               "them; 'skipped' lists the first)")

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    @classmethod
    def from_row(
        cls, row: Version, *, warnings: Sequence[dict[str, Any]] = (),
        skipped: SkippedFiles | None = None,
    ) -> VersionOut:
        """From the ORM row (its dataset loaded); a registration's ``warnings`` and the
        files it ``skipped``."""
        return cls(
            id=row.id, dataset=row.dataset.name, root_uri=row.root_uri,
            description=row.description, n_manifest_rows=row.n_manifest_rows,
            n_segments=row.n_segments, n_rows=row.n_rows, schema=row.schema,
            metadata_columns=row.metadata_columns, created_at=row.created_at,
            retired_at=row.retired_at,
            warnings=list(warnings),
            profile=None if row.profile is None else VersionProfile.model_validate(row.profile),
            skipped=[SkippedFileOut(path=f.path, reason=f.reason)
                     for f in (skipped.files if skipped is not None else ())],
            skipped_count=skipped.count if skipped is not None else 0,
        )



class JobOut(JobView[VersionOut]):  # the fields are the job's own (windpipe.catalog.jobs.JobView)
    """A registration run as a job (``windpipe/catalog/jobs.py``): while ``running``, its
    ``phase`` and the segments ``checked`` and ``profiled`` of ``total`` (null until the
    manifest is read), then
    ``version`` (``succeeded``; ``created``: whether it was new) or ``error`` (the error
    envelope's object; ``failed``, or ``interrupted`` when its server stopped: nothing was
    stored, post the same registration again)."""

    @classmethod
    def from_view(cls, job: JobView[dict[str, Any]]) -> JobOut:
        """From the job as :meth:`windpipe.catalog.jobs.Jobs.view` reads it (its ``version`` is
        the stored ``VersionOut`` JSON, validated here)."""
        return cls.model_validate(job.model_dump())


class SegmentOut(_Out):
    """A normalized segment of a version."""

    manifest_row_id: int
    ordinal: int
    path: str
    format: str
    row_count: int
    chunk_rows: list[int]
    fingerprint: str

    @classmethod
    def from_row(cls, row: Segment) -> SegmentOut:
        """From the ORM row."""
        return cls(
            manifest_row_id=row.manifest_row_id, ordinal=row.ordinal, path=row.path,
            format=row.format, row_count=row.row_count, chunk_rows=list(row.chunk_rows),
            fingerprint=row.fingerprint,
        )


class SplitOut(_Out):
    """A split of a version, with per-split counts (groups, manifest rows, rows) and the
    cells it puts on both sides (``leakage``; null: stored before the catalog counted)."""

    id: str
    version_id: str
    config: ValidationConfig
    counts: dict[str, dict[str, int]]
    leakage: SplitLeakage | None = None
    created_at: datetime
    retired_at: datetime | None = None  # the split's or its version's retirement

    @classmethod
    def from_row(cls, row: SplitRow, *, retired_at: datetime | None = None) -> SplitOut:
        """From the ORM row (``retired_at``: its effective retirement, when known)."""
        return cls(
            id=row.id, version_id=row.version_id,
            config=ValidationConfig.model_validate(row.config), counts=row.counts,
            leakage=None if row.leakage is None else SplitLeakage.model_validate(row.leakage),
            created_at=row.created_at, retired_at=retired_at or row.retired_at,
        )


class PlanOut(_Out):
    """A window plan; planning is synchronous, so a plan that exists is ``completed``."""

    id: str
    split_id: str
    version_id: str
    status: Literal["completed"] = "completed"
    config: PlanSpec
    n_streams: int
    n_units: int
    n_batches: int
    created_at: datetime
    retired_at: datetime | None = None  # the plan's, its split's or its version's retirement

    @classmethod
    def from_row(cls, row: PlanRow, *, retired_at: datetime | None = None) -> PlanOut:
        """From the ORM row (its split loaded; ``retired_at``: its effective retirement)."""
        return cls(
            id=row.id, split_id=row.split_id, version_id=row.split.version_id,
            config=PlanSpec.model_validate(row.config), n_streams=row.n_streams,
            n_units=row.n_units, n_batches=row.n_batches, created_at=row.created_at,
            retired_at=retired_at or row.retired_at,
        )


class FlightErrorOut(_Out):
    """Why a Flight location's statistics could not be read (an error type and message)."""

    type: str
    message: str


class FlightServerStatsOut(_Out):
    """One Flight location: its ``cache-stats`` counters, or ``error`` (never both)."""

    location: str
    stats: CacheCounters | None = None
    error: FlightErrorOut | None = None


class FlightStatsOut(_Out):
    """``GET /v1/flight/stats``: every configured Flight location, in configured order."""

    servers: list[FlightServerStatsOut]


class TokenIn(BaseModel):
    """A token to create: its name, role, optional dataset glob and lifetime."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
    role: Role
    datasets: StoredText | None = Field(default=None,
                                       description="glob of dataset names, e.g. lab-*")
    expires_in_s: int | None = Field(
        default=None, ge=MIN_TOKEN_LIFETIME_S, le=MAX_TOKEN_LIFETIME_S,
        description="seconds until the token is refused (default: it never expires)")


class TokenOut(_Out):
    """A stored token (never its text)."""

    name: str
    role: str
    datasets: str | None
    created_by: str
    created_at: datetime
    revoked_at: datetime | None
    expires_at: datetime | None = None

    @classmethod
    def from_row(cls, row: ApiToken) -> TokenOut:
        """From the ORM row."""
        return cls(name=row.name, role=row.role, datasets=row.datasets,
                   created_by=row.created_by, created_at=row.created_at,
                   revoked_at=row.revoked_at, expires_at=row.expires_at)


class TokenCreatedOut(TokenOut):
    """A new token with its text: the only time the text is shown."""

    token: str


class AuditEventOut(_Out):
    """One audit event."""

    id: int
    at: datetime
    principal: str
    action: str
    target: str | None
    status: int
    outcome: str
    request_id: str

    @classmethod
    def from_row(cls, row: AuditEvent) -> AuditEventOut:
        """From the ORM row."""
        return cls(id=row.id, at=row.at, principal=row.principal, action=row.action,
                   target=row.target, status=row.status, outcome=row.outcome,
                   request_id=row.request_id)
