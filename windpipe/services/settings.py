"""Service settings, read from ``WINDPIPE_*`` environment variables.

CLI flags override the environment; the environment overrides the defaults. The
embedded defaults (SQLite and local storage under ``data_dir``) need no setup.

Each field is the one place a setting is written: its default, its ``description``
(the CLI's help text and the README's table) and, in ``json_schema_extra``, its CLI
``flag`` and the ``default_text`` shown where the default is not a plain value. The
request bounds (``max_*``, and ``cache_bytes``, which the catalog checks plans against)
take their defaults from :class:`windpipe.services.contract.limits.Limits`, which the catalog
also uses without settings.
:func:`setting_infos` reads them back for ``windpipe/cli.py`` (which builds the server
flags from them) and for the README table (:func:`settings_table`;
``tests/services/test_settings.py`` holds the two together).
"""

from __future__ import annotations

import ipaddress
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from windpipe.services.contract.limits import Limits

__all__ = [
    "DEV_TICKET_SECRET",
    "SettingInfo",
    "Settings",
    "is_loopback",
    "setting_infos",
    "settings_table",
]

DEV_TICKET_SECRET = "windpipe-dev-secret-change-me"
_LIMITS = Limits()  # the request bounds' defaults are written once, in Limits
_ENV_PREFIX = "WINDPIPE_"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (``localhost``, 127/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Settings(BaseSettings):
    """Everything a catalog or Flight server process needs to know."""

    # extra="ignore" for the environment (WINDPIPE_URL, WINDPIPE_TOKEN are the SDK's);
    # a keyword given in code must name a field (__init__), so a typo is not ignored
    model_config = SettingsConfigDict(env_prefix=_ENV_PREFIX, extra="ignore")

    def __init__(self, **values: Any) -> None:
        unknown = sorted(k for k in values if not k.startswith("_")
                         and k not in type(self).model_fields)
        if unknown:
            msg = f"Settings has no field {', '.join(map(repr, unknown))}"
            raise TypeError(msg)
        super().__init__(**values)

    data_dir: Path = Field(
        default=Path(".windpipe"),
        description="embedded state: the SQLite catalog, the tier, a storage root",
        json_schema_extra={"flag": "--data-dir"},
    )
    database_url: str | None = Field(
        default=None, description="any SQLAlchemy URL of the catalog database",
        json_schema_extra={"flag": "--database-url", "default_text": "SQLite in the data dir"},
    )
    sqlite_busy_timeout_s: float = Field(
        default=2.0, gt=0,
        description="how long a SQLite statement waits for another writer's lock before "
                    "the call answers 503 unavailable",
        json_schema_extra={"flag": "--sqlite-busy-timeout-s"},
    )
    host: str = Field(
        default="127.0.0.1",
        description="bind address of the catalog (and of the Flight server unless "
                    "WINDPIPE_FLIGHT_HOST is set)",
        json_schema_extra={"flag": "--host"},
    )
    port: int = Field(
        default=8000, description="the catalog's REST port (0: any free port)",
        json_schema_extra={"flag": "--port"},
    )
    flight_host: str | None = Field(
        default=None, description="bind address of the Flight server",
        json_schema_extra={"default_text": "the host setting"},
    )
    flight_port: int = Field(
        default=8815, description="the Flight server's port (0: any free port)",
        json_schema_extra={"flag": "--flight-port"},
    )
    flight_metrics_port: int | None = Field(
        default=None, ge=0, le=65535,
        description="HTTP port of the Flight server's Prometheus /metrics, on the Flight "
                    "host, without a token (0: any free port)",
        json_schema_extra={"flag": "--flight-metrics-port", "default_text": "none: not served"},
    )
    flight_public_location: str | None = Field(
        default=None,
        description="grpc://host:port clients reach this Flight server at (what it advertises)",
        json_schema_extra={"default_text": "grpc://flight-host:flight-port"},
    )
    catalog_url: str | None = Field(
        default=None, description="Flight only: read plans and check tokens over REST here",
        json_schema_extra={"flag": "--catalog-url",
                           "default_text": "none: plans come from the database"},
    )
    flight_locations: tuple[str, ...] = Field(
        default=(),
        description="grpc://host:port of every Flight server of the deployment, for "
                    "endpoint routing",
        json_schema_extra={"flag": "--flight-location", "default_text": "this server only"},
    )
    flight_discovery: str | None = Field(
        default=None,
        description="where more Flight servers are found, re-read every "
                    "WINDPIPE_FLIGHT_DISCOVERY_S: dns://name:port (every address of a name, "
                    "e.g. a headless Service) or file:///path (a grpc://host:port a line)",
        json_schema_extra={"flag": "--flight-discovery",
                           "default_text": "none: the Flight locations only"},
    )
    flight_discovery_s: float = Field(
        default=10.0, gt=0,
        description="how often the catalog and each Flight server re-read "
                    "WINDPIPE_FLIGHT_DISCOVERY",
        json_schema_extra={"flag": "--flight-discovery-s"},
    )
    host_id: str | None = Field(
        default=None,
        description="this node's name in the Flight server's tier-info; an SDK with "
                    "WINDPIPE_HOST_ID reads in process only the tier of a server naming the "
                    "same node (Kubernetes: spec.nodeName in both pods)",
        json_schema_extra={"flag": "--host-id", "default_text": "the hostname"},
    )
    cache_bytes: int = Field(
        default=_LIMITS.cache_bytes, ge=1 << 20,
        description="each Flight server's chunk cache budget",
        json_schema_extra={"flag": "--cache-bytes"},
    )
    cache_wait_s: float = Field(
        default=30.0, gt=0,
        description="how long a batch waits for cache room pinned by other streams",
        json_schema_extra={"flag": "--cache-wait-s"},
    )
    readahead_batches: int = Field(
        default=2, ge=0, description="batches whose chunks a stream loads ahead (0: none)",
        json_schema_extra={"flag": "--readahead-batches"},
    )
    endpoint_batches: int = Field(
        default=64, ge=1, description="fewest batches per endpoint when several servers serve",
        json_schema_extra={"flag": "--endpoint-batches"},
    )
    on_bad_segment: Literal["raise", "skip"] = Field(
        default="raise",
        description="a segment that cannot be read fails the stream (raise), or its lanes "
                    "become padding (skip)",
        json_schema_extra={"flag": "--on-bad-segment"},
    )
    tier_dir: Path | None = Field(
        default=None,
        description="directory of the host's shared tier of decoded blocks (/dev/shm/... "
                    "keeps it in memory)",
        json_schema_extra={"flag": "--tier-dir", "default_text": "tier/ in the data dir"},
    )
    tier_bytes: int | None = Field(
        default=None, ge=0,
        description="byte budget of the tier, the level that holds what the cache cannot "
                    "(least recently used blocks go; 0: no tier); unset: half the free "
                    "space of its disk at server start, at most 1 TiB, no tier under 64 MiB",
        json_schema_extra={"flag": "--tier-bytes", "default_text": "auto"},
    )
    pack_dir: Path | None = Field(
        default=None,
        description="directory of packs: the rows of small local parquet segments, written "
                    "once by registration and read by block fills instead of each file "
                    "(catalog and Flight servers of a host share it)",
        json_schema_extra={"flag": "--pack-dir", "default_text": "packs/ in the data dir"},
    )
    pack_rows: int = Field(
        default=8192, ge=0,
        description="segments of at most this many rows go in their version's pack "
                    "(0: no packs written)",
        json_schema_extra={"flag": "--pack-rows"},
    )
    auto_blocks: bool = Field(
        default=True,
        description="hold a plan's split whole as blocks (one gather per batch) when it fits "
                    "in the cache budget with an eighth to spare, without waiting for "
                    "full_in_mem",
        json_schema_extra={"flag": "--auto-blocks"},
    )
    build_ahead_bytes: int = Field(
        default=0, ge=0,
        description="bytes of batches a stream builds ahead in a second thread (0: none)",
        json_schema_extra={"flag": "--build-ahead-bytes"},
    )
    flight_max_streams: int = Field(
        default=256, ge=1,
        description="streams a Flight server serves at once (each holds a thread and a few "
                    "MiB of gRPC buffers); one more is refused with unavailable (retryable)",
    )
    flight_stream_stall_s: float = Field(
        default=600.0, gt=0,
        description="a Flight stream whose client takes no batch for this long is ended "
                    "(its connection closed; the SDK resumes the pass at its next batch)",
    )
    ticket_ttl_s: float = Field(
        default=86400.0, gt=0, description="how long a Flight ticket stays valid",
        json_schema_extra={"flag": "--ticket-ttl-s"},
    )
    ticket_secret: SecretStr = Field(
        default=SecretStr(DEV_TICKET_SECRET),
        description="the key Flight tickets are signed with (every Flight server of a "
                    "deployment shares it)",
        json_schema_extra={"default_text": "a development secret: set it in production"},
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="the servers' bootstrap admin bearer token (a client's own token is "
                    "WINDPIPE_TOKEN); with it (or a stored token: windpipe token create) "
                    "every call but the health checks needs a token",
    )
    auth_cache_s: float = Field(
        default=30.0, ge=0,
        description="how long a Flight server trusts a token it checked (the bound on "
                    "noticing a revocation)",
    )
    insecure: bool = Field(
        default=False,
        description="serve a non-loopback host without tokens or with the development "
                    "ticket secret (a warning at every start; off: such a server refuses "
                    "to start)",
        json_schema_extra={"flag": "--insecure"},
    )
    allowed_roots: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="storage roots besides the data dir that the catalog registers "
                    "datasets from and every Flight server reads from (give each Flight "
                    "server the catalog's list): /abs/dir or s3://bucket/prefix "
                    "(comma-separated in the variable)",
        json_schema_extra={"flag": "--allow-root", "default_text": "the data dir only"},
    )
    root_scopes: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="bind an allowed root to dataset names: glob=/abs/dir or "
                    "glob=s3://bucket/prefix; a root inside or around a bound one registers "
                    "only datasets a glob bound to it matches (comma-separated in the variable)",
        json_schema_extra={"flag": "--root-scope",
                           "default_text": "none: any dataset from any allowed root"},
    )
    s3_endpoint: str | None = Field(
        default=None, description="S3-compatible endpoint URL (MinIO, ...)",
        json_schema_extra={"default_text": "AWS"},
    )
    s3_region: str = Field(default="us-east-1", description="S3 region")
    s3_allow_http: bool = Field(
        default=False, description="allow plain http to the S3 endpoint"
    )
    s3_access_key_id: str | None = Field(default=None, description="S3 access key id")
    s3_secret_access_key: SecretStr | None = Field(
        default=None, description="S3 secret access key"
    )
    s3_instance_credentials: bool = Field(
        default=False,
        description="let S3 fall back to ambient credentials (instance metadata, web identity)",
    )
    s3_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="how long an object-store connection may take to open"
    )
    s3_timeout_s: float = Field(
        default=30.0, gt=0, description="how long one object-store request may take in all"
    )
    s3_max_retries: int = Field(
        default=2, ge=0, description="retries of a failed object-store request (with backoff)"
    )
    s3_readahead_bytes: int = Field(
        default=64 << 20, ge=0,
        description="most bytes a Flight server's read-ahead from an object store holds "
                    "fetched or in flight per block fill (0: no read-ahead); within it the "
                    "window follows the measured bandwidth x latency",
    )
    s3_coalesce_bytes: int = Field(
        default=1 << 20, ge=0,
        description="object-store byte ranges closer than this are fetched in one request",
    )
    storage_workers: int = Field(
        default=8, ge=1,
        description="threads the catalog runs registrations on (their manifest and segment "
                    "reads), apart from the threads serving other calls",
        json_schema_extra={"flag": "--storage-workers"},
    )
    storage_queue: int = Field(
        default=32, ge=0,
        description="registrations waiting for a storage thread; past it a registration "
                    "answers 503 unavailable at once",
        json_schema_extra={"flag": "--storage-queue"},
    )
    job_stale_s: float = Field(
        default=30.0, gt=0,
        description="seconds without a heartbeat after which a running registration job "
                    "reads as interrupted (its server stopped; nothing of it was stored)",
    )
    job_retention_s: float = Field(
        default=86400.0, gt=0,
        description="seconds a registration job is kept after it ended (its answer read "
                    "with GET /v1/jobs/{id}); then it is deleted and reads as not found",
    )
    max_batch_size: int = Field(
        default=_LIMITS.max_batch_size, ge=1, description="largest batch_size of a plan"
    )
    max_seq_len: int = Field(
        default=_LIMITS.max_seq_len, ge=1, description="largest seq_len of a plan"
    )
    max_world_size: int = Field(
        default=_LIMITS.max_world_size, ge=1,
        description="most ranks a report, schedule or Flight pass is for"
    )
    max_plan_windows: int = Field(
        default=_LIMITS.max_plan_windows, ge=1,
        description="most lanes (windows) in one epoch of a plan"
    )
    max_batch_bytes: int = Field(
        default=_LIMITS.max_batch_bytes, ge=1,
        description="largest batch of a plan (bytes on the wire)"
    )
    max_body_bytes: int = Field(
        default=_LIMITS.max_body_bytes, ge=1024, description="largest REST request body"
    )
    max_config_body_bytes: int = Field(
        default=_LIMITS.max_config_body_bytes, ge=1024,
        description="largest REST request body of a call other than a registration or "
                    "split statistics (configs, tokens)"
    )
    max_description_chars: int = Field(
        default=_LIMITS.max_description_chars, ge=0,
        description="longest dataset/version/split description"
    )
    max_manifest_rows: int = Field(
        default=_LIMITS.max_manifest_rows, ge=1, description="most rows in one manifest"
    )
    max_manifest_bytes: int = Field(
        default=_LIMITS.max_manifest_bytes, ge=1024, description="largest manifest file"
    )
    max_stats_bytes: int = Field(
        default=_LIMITS.max_stats_bytes, ge=1024,
        description="memory one split-statistics request may hold: the finite values of "
                    "its columns (4 or 8 bytes each) for exact quantiles",
    )
    schedule_cache_bytes: int = Field(
        default=512 << 20, ge=0,
        description="decoded plans and epoch schedules the catalog keeps in memory",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_json: bool = Field(default=False, description="one JSON object per log line")
    shutdown_grace_s: float = Field(
        default=10.0, description="how long open streams and requests get at shutdown"
    )
    allocator_trim_s: float = Field(
        default=30.0, ge=0,
        description="a server (windpipe serve) hands the memory its allocators hold free "
                    "back to the kernel this often (glibc malloc_trim, Arrow's pool); "
                    "0: never",
    )

    @field_validator("allowed_roots", "root_scopes", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value

    @field_validator("flight_discovery")
    @classmethod
    def _check_discovery(cls, value: str | None) -> str | None:
        if value and not value.startswith(("dns://", "file://")):
            msg = (f"flight discovery {value!r}: expected dns://NAME:PORT or "
                   "file:///PATH (windpipe/services/discovery.py)")
            raise ValueError(msg)
        return value or None

    @field_validator("root_scopes")
    @classmethod
    def _check_root_scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            glob, sep, root = entry.partition("=")
            if not sep or not glob.strip() or not root.strip():
                msg = f"root scope {entry!r}: write glob=/abs/dir or glob=s3://bucket/prefix"
                raise ValueError(msg)
            scheme = root.strip().partition("://")[0] if "://" in root else ""
            if scheme not in ("s3", "s3a", "file") and not Path(root.strip()).is_absolute():
                msg = f"root scope {entry!r}: the root must be absolute or s3://bucket/prefix"
                raise ValueError(msg)
        return value

    @field_validator("allowed_roots")
    @classmethod
    def _absolute_roots(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """A relative directory (``--allow-root demo-data``) is resolved against the
        working directory, as the data dir is; URIs (``s3://``, ``file://``) stay."""
        return tuple(entry if "://" in entry or entry.startswith("file:")
                     or Path(entry).is_absolute() else str(Path(entry).absolute())
                     for entry in value)

    def resolved_allowed_roots(self) -> tuple[str, ...]:
        """``allowed_roots`` and the data directory (absolute)."""
        return (*self.allowed_roots, str(self.data_dir.resolve()))

    def limits(self) -> Limits:
        """The request bounds (the ``max_*`` fields)."""
        return Limits.from_settings(self)

    def resolved_database_url(self) -> str:
        """The database URL, defaulting to ``sqlite:///<data_dir>/catalog.db``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'catalog.db').resolve()}"

    def resolved_tier_dir(self) -> Path | None:
        """Where the tier lives, or None when it is off (``tier_bytes == 0``)."""
        if self.tier_bytes == 0:
            return None
        return self.tier_dir if self.tier_dir is not None else self.data_dir / "tier"

    def resolved_pack_dir(self) -> Path:
        """Where packs live (``pack_dir``, else ``packs/`` in the data dir)."""
        return self.pack_dir if self.pack_dir is not None else self.data_dir / "packs"

    def admin_token_text(self) -> str | None:
        """The bootstrap admin token's text, or None when none is set."""
        return self.admin_token.get_secret_value() if self.admin_token is not None else None

    def resolved_flight_host(self) -> str:
        """Where the Flight server binds (``host`` unless set)."""
        return self.flight_host or self.host


@dataclass(frozen=True, kw_only=True)
class SettingInfo:
    """One field of :class:`Settings` as the CLI and the docs show it.

    ``kind`` is the value type a flag parses (``int``, ``float``, ``str``, ``Path``),
    ``bool`` for a switch (``--[no-]name`` when on by default) or ``tuple`` for a
    repeatable flag; ``choices`` are the values of a ``Literal`` field.
    """

    name: str
    variable: str
    flag: str | None
    description: str
    default: str
    kind: type
    choices: tuple[str, ...] = ()
    negatable: bool = False

    def flag_text(self) -> str:
        """The flag as the README writes it (empty when the setting has none)."""
        if self.flag is None:
            return ""
        if self.negatable:
            return f"`--[no-]{self.flag.removeprefix('--')}`"
        return f"`{self.flag}`" + (" (repeat)" if self.kind is tuple else "")

    def row(self) -> str:
        """The setting's row of the README table."""
        return f"| `{self.variable}` | {self.flag_text()} | {self.default} | {self.description} |"


_GIB, _MIB = 1 << 30, 1 << 20


def _default_text(name: str, info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    text = extra.get("default_text")
    if isinstance(text, str):
        return text
    value = info.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == ():
        return "none"
    if isinstance(value, int) and name.endswith("_bytes"):
        for unit, size in (("GiB", _GIB), ("MiB", _MIB)):
            if value and value % size == 0:
                return f"{value // size} {unit}"
    if isinstance(value, float):
        number = f"{value:g}" if value != int(value) else str(int(value))
        return f"{number} s" if name.endswith("_s") else number
    return str(value)


def _kind(annotation: Any) -> tuple[type, tuple[str, ...]]:
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return _kind(next(a for a in args if a is not type(None)))
    if get_origin(annotation) is Literal:
        return str, tuple(str(a) for a in args)
    if get_origin(annotation) is tuple:
        return tuple, ()
    if annotation is SecretStr:
        return str, ()
    return annotation, ()


def setting_infos() -> tuple[SettingInfo, ...]:
    """Every field of :class:`Settings`, in declaration order."""
    out = []
    for name, info in Settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        flag = extra.get("flag")
        kind, choices = _kind(info.annotation)
        out.append(SettingInfo(
            name=name, variable=f"{_ENV_PREFIX}{name.upper()}",
            flag=flag if isinstance(flag, str) else None,
            description=info.description or "", default=_default_text(name, info),
            kind=kind, choices=choices, negatable=kind is bool and info.default is True,
        ))
    return tuple(out)


def settings_table(*, exclude_prefix: str = "max_") -> str:
    """The README's settings table: every setting but the request limits (``max_*``,
    in ``docs/operations.md``)."""
    rows = [info.row() for info in setting_infos()
            if not info.name.startswith(exclude_prefix)]
    return "\n".join(["| setting | flag | default | what |", "|---|---|---|---|", *rows])
