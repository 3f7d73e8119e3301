"""What a Flight server is set to: :class:`FlightServerConfig`, built from
:class:`services.settings.Settings` in one place (:meth:`FlightServerConfig.from_settings`).

``flight_server.server.WindpipeFlightServer`` and ``flight_server.runner`` read every
knob from it (bind address, cache, read-ahead, endpoints and their discovery, bad
segments, tickets, the host's tier and its host id, limits, storage); what the server
talks to (where plans come from, the access layer) is passed beside it. The settings'
own fields hold the defaults, so this module writes none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from services.contract.limits import Limits
from services.materialize.builder import BadSegmentPolicy
from services.materialize.tier import tier_budget
from services.settings import Settings
from services.storage.store import StorageOptions

__all__ = ["FlightServerConfig"]

_ANY_HOST = ("0.0.0.0", "::", "")  # the wildcard binds, reached on loopback here


@dataclass(frozen=True, kw_only=True)
class FlightServerConfig:
    """A Flight server's knobs (each one a field of :class:`Settings`, see there).

    ``tier_dir`` and ``tier_bytes`` are resolved when the config is made (at server
    start): an unset budget becomes half the free space of the tier's disk
    (:func:`services.materialize.tier.tier_budget`, said in ``tier_source``), and
    ``tier_dir`` is None when the tier is off. ``ticket_secret`` and ``storage`` (which
    holds the S3 secret) stay out of the repr.
    """

    host: str
    port: int
    public_location: str | None
    locations: tuple[str, ...]
    discovery: str | None
    discovery_s: float
    host_id: str | None
    ticket_secret: bytes = field(repr=False)
    ticket_ttl_s: float
    cache_bytes: int
    cache_wait_s: float
    readahead_batches: int
    endpoint_batches: int
    on_bad_segment: BadSegmentPolicy
    tier_dir: Path | None
    tier_bytes: int
    tier_source: str
    auto_blocks: bool
    build_ahead_bytes: int
    auth_cache_s: float
    limits: Limits
    storage: StorageOptions = field(repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, *, port: int | None = None,
                      cache_bytes: int | None = None) -> FlightServerConfig:
        """The Flight server part of ``settings``; ``port`` and ``cache_bytes`` override
        theirs (tests bind port 0 and use budgets below the settings' 1 MiB floor)."""
        budget = tier_budget(settings.resolved_tier_dir(), settings.tier_bytes)
        return cls(
            host=settings.resolved_flight_host(),
            port=settings.flight_port if port is None else port,
            public_location=settings.flight_public_location,
            locations=tuple(settings.flight_locations),
            discovery=settings.flight_discovery,
            discovery_s=settings.flight_discovery_s,
            host_id=settings.host_id,
            ticket_secret=settings.ticket_secret.get_secret_value().encode(),
            ticket_ttl_s=settings.ticket_ttl_s,
            cache_bytes=settings.cache_bytes if cache_bytes is None else cache_bytes,
            cache_wait_s=settings.cache_wait_s,
            readahead_batches=settings.readahead_batches,
            endpoint_batches=settings.endpoint_batches,
            on_bad_segment=settings.on_bad_segment,
            tier_dir=settings.resolved_tier_dir() if budget.bytes else None,
            tier_bytes=budget.bytes,
            tier_source=budget.source,
            auto_blocks=settings.auto_blocks,
            build_ahead_bytes=settings.build_ahead_bytes,
            auth_cache_s=settings.auth_cache_s,
            limits=settings.limits(),
            storage=StorageOptions.from_settings(settings),
        )

    @property
    def bind_location(self) -> str:
        """``grpc://host:port`` the server binds (port 0: any free port)."""
        return f"grpc://{self.host}:{self.port}"

    def advertised_location(self, bound_port: int) -> str:
        """Where clients reach the server once bound on ``bound_port``: the public
        location when set, else the bind address (loopback for a wildcard bind)."""
        reachable = "127.0.0.1" if self.host in _ANY_HOST else self.host
        return self.public_location or f"grpc://{reachable}:{bound_port}"
