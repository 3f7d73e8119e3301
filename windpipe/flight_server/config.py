"""What a Flight server is set to: :class:`FlightServerConfig`, made from
:class:`windpipe.services.settings.Settings` in one place
(:meth:`FlightServerConfig.from_settings`).

``windpipe.flight_server.server.WindpipeFlightServer`` and ``windpipe.flight_server.runner`` read
every
knob from it (bind address, cache, read-ahead, endpoints and their discovery, bad
segments, tickets, the host's tier and its host id, limits, storage); what the server
talks to (where plans come from, the access layer) is passed beside it.

A setting is declared once, as a field of :class:`Settings` (its default, bounds, help
text and CLI flag): the config keeps the settings themselves and the server reads each
plain knob by its ``Settings`` name (``config.settings.readahead_batches``), so a new
knob is one new field there and nothing here. The config's own fields are only what is
resolved from the settings when the server starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windpipe.services.contract.limits import Limits
from windpipe.services.materialize.tier import tier_budget
from windpipe.services.settings import Settings
from windpipe.services.storage.store import StorageOptions

__all__ = ["FlightServerConfig"]

_ANY_HOST = ("0.0.0.0", "::", "")  # the wildcard binds, reached on loopback here


@dataclass(frozen=True, kw_only=True)
class FlightServerConfig:
    """A Flight server's settings and what is resolved from them at start.

    ``tier_dir`` and ``tier_bytes``: an unset budget becomes half the free space of the
    tier's disk (:func:`windpipe.services.materialize.tier.tier_budget`, said in ``tier_source``),
    and ``tier_dir`` is None when the tier is off. ``ticket_secret`` is the secret's
    bytes, ``limits`` and ``storage`` the settings' (:meth:`Settings.limits`,
    :meth:`StorageOptions.from_settings`). ``settings``, ``ticket_secret`` and
    ``storage`` (which hold secrets) stay out of the repr.
    """

    settings: Settings = field(repr=False)
    ticket_secret: bytes = field(repr=False)
    tier_dir: Path | None
    tier_bytes: int
    tier_source: str
    limits: Limits
    storage: StorageOptions = field(repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, *, port: int | None = None,
                      cache_bytes: int | None = None) -> FlightServerConfig:
        """The Flight server part of ``settings``; ``port`` and ``cache_bytes`` override
        ``flight_port`` and ``cache_bytes`` (tests bind port 0 and use budgets below the
        settings' 1 MiB floor)."""
        overrides: dict[str, Any] = {}
        if port is not None:
            overrides["flight_port"] = port
        if cache_bytes is not None:
            overrides["cache_bytes"] = cache_bytes
        if overrides:  # no validation: an override may lie below a setting's floor
            settings = settings.model_copy(update=overrides)
        budget = tier_budget(settings.resolved_tier_dir(), settings.tier_bytes)
        return cls(
            settings=settings,
            ticket_secret=settings.ticket_secret.get_secret_value().encode(),
            tier_dir=settings.resolved_tier_dir() if budget.bytes else None,
            tier_bytes=budget.bytes,
            tier_source=budget.source,
            limits=settings.limits(),
            storage=StorageOptions.from_settings(settings),
        )

    @property
    def host(self) -> str:
        """The address the server binds (``Settings.resolved_flight_host``)."""
        return self.settings.resolved_flight_host()

    @property
    def bind_location(self) -> str:
        """``grpc://host:port`` the server binds (port 0: any free port)."""
        return f"grpc://{self.host}:{self.settings.flight_port}"

    def advertised_location(self, bound_port: int) -> str:
        """Where clients reach the server once bound on ``bound_port``: the public
        location when set, else the bind address (loopback for a wildcard bind)."""
        reachable = "127.0.0.1" if self.host in _ANY_HOST else self.host
        return self.settings.flight_public_location or f"grpc://{reachable}:{bound_port}"
