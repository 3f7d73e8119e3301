"""Service settings, read from ``WINDPIPE_*`` environment variables.

CLI flags override the environment; the environment overrides the defaults. The
embedded defaults (SQLite and local storage under ``data_dir``) need no setup.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.contract.limits import Limits

__all__ = ["DEV_TICKET_SECRET", "Settings", "is_loopback"]

DEV_TICKET_SECRET = "windpipe-dev-secret-change-me"


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

    model_config = SettingsConfigDict(env_prefix="WINDPIPE_", extra="ignore")

    data_dir: Path = Path(".windpipe")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite under data_dir"
    )
    host: str = "127.0.0.1"
    port: int = 8000
    flight_host: str | None = Field(default=None, description="default: host")
    flight_port: int = 8815
    flight_public_location: str | None = Field(
        default=None, description="grpc://host:port clients reach this Flight server at"
    )
    catalog_url: str | None = Field(
        default=None, description="REST URL a Flight server reads plans from (else the database)"
    )
    flight_locations: tuple[str, ...] = Field(
        default=(), description="grpc://host:port of every Flight server, for endpoint routing"
    )
    cache_bytes: int = Field(default=1 << 30, ge=1 << 20)
    cache_wait_s: float = Field(
        default=30.0, gt=0,
        description="how long a batch waits for cache room pinned by other streams",
    )
    readahead_batches: int = Field(
        default=2, ge=0, description="batches whose chunks a stream loads ahead (0: none)"
    )
    endpoint_batches: int = Field(
        default=64, ge=1, description="fewest batches per endpoint when several servers serve"
    )
    on_bad_segment: Literal["raise", "skip"] = Field(
        default="raise",
        description="a segment that cannot be read fails the stream, or its lanes are padding",
    )
    tier_dir: Path | None = Field(
        default=None,
        description="directory of the host's shared tier of decoded blocks (default: "
                    "data_dir/tier; /dev/shm/... keeps it in memory)",
    )
    tier_bytes: int = Field(
        default=4 << 30, ge=0,
        description="byte budget of the tier (least recently used blocks go); 0: no tier",
    )
    auto_blocks: bool = Field(
        default=True,
        description="hold a plan's split whole as blocks (one gather per batch) when it fits "
                    "in the cache budget with an eighth to spare, without waiting for full_in_mem",
    )
    build_ahead_bytes: int = Field(
        default=0, ge=0,
        description="bytes of batches a stream builds ahead in a second thread (0: none)",
    )
    ticket_ttl_s: float = Field(
        default=86400.0, gt=0, description="seconds a Flight ticket stays valid (default a day)"
    )
    ticket_secret: SecretStr = SecretStr(DEV_TICKET_SECRET)
    token: SecretStr | None = Field(
        default=None, description="bootstrap admin bearer token (stored tokens: windpipe token)"
    )
    auth_cache_s: float = Field(
        default=30.0, ge=0,
        description="seconds a Flight server trusts a token it checked (revocation bound)",
    )
    insecure: bool = Field(
        default=False,
        description="serve a non-loopback host without tokens or with the development secret",
    )
    allowed_roots: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="storage roots datasets may be registered from, besides data_dir "
                    "(comma-separated in WINDPIPE_ALLOWED_ROOTS: /abs/dir, s3://bucket/prefix)",
    )
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_allow_http: bool = False
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_instance_credentials: bool = Field(
        default=False,
        description="let S3 fall back to ambient credentials (instance metadata, web identity)",
    )
    s3_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="seconds an object-store connection may take to open"
    )
    s3_timeout_s: float = Field(
        default=30.0, gt=0, description="seconds one object-store request may take in all"
    )
    s3_max_retries: int = Field(
        default=2, ge=0, description="retries of a failed object-store request (with backoff)"
    )
    max_batch_size: int = Field(default=65_536, ge=1, description="largest batch_size of a plan")
    max_seq_len: int = Field(default=1 << 20, ge=1, description="largest seq_len of a plan")
    max_world_size: int = Field(
        default=65_536, ge=1, description="most ranks a report, schedule or Flight pass is for"
    )
    max_plan_windows: int = Field(
        default=20_000_000, ge=1, description="most lanes (windows) in one epoch of a plan"
    )
    max_batch_bytes: int = Field(
        default=1 << 30, ge=1, description="largest batch of a plan (bytes on the wire)"
    )
    max_body_bytes: int = Field(
        default=64 << 20, ge=1024, description="largest REST request body"
    )
    max_description_chars: int = Field(
        default=4096, ge=0, description="longest dataset/version/split description"
    )
    max_manifest_rows: int = Field(
        default=1_000_000, ge=1, description="most rows in one manifest"
    )
    max_manifest_bytes: int = Field(
        default=256 << 20, ge=1024, description="largest manifest file"
    )
    schedule_cache_bytes: int = Field(
        default=512 << 20, ge=0,
        description="bytes of decoded plans and epoch schedules the catalog keeps in memory",
    )
    log_level: str = "INFO"
    log_json: bool = False
    shutdown_grace_s: float = 10.0

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value

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

    def resolved_flight_host(self) -> str:
        """Where the Flight server binds (``host`` unless set)."""
        return self.flight_host or self.host
