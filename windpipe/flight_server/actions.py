"""The ``DoAction`` actions of a windpipe Flight server (``docs/wire.md``), one small
function each, in one table: what ``list_actions`` lists and ``do_action`` dispatches.

* ``health``: liveness, the only call without a token; nothing about the host for an
  anonymous probe, the tier's budget and its source for an authenticated caller.
* ``cache-stats``: the chunk cache's counters.
* ``tier-info``: where the host's tier is, for same-host readers.
* ``warm``: a plan's blocks loaded into the cache (``windpipe.flight_server.warm``), progress
  results streamed as they load.

Every action but ``health`` needs an authenticated caller (checked before its handler
runs); an unknown one is ``invalid_request`` naming those served. A handler reads the
server through :class:`ActionHost`, the few things the actions need of it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow.flight as fl

from windpipe.flight_server.auth import caller
from windpipe.flight_server.calls import internal_error, warm_args
from windpipe.flight_server.config import FlightServerConfig
from windpipe.flight_server.plan_sources import PlanCache
from windpipe.flight_server.warm import warm_results
from windpipe.services.contract.errors import InvalidRequest
from windpipe.services.contract.principals import Principal
from windpipe.services.contract.reports import (
    CacheCounters,
    FlightHealth,
    FlightTierInfo,
    HealthTier,
    TierStatus,
    WarmProgress,
)
from windpipe.services.contract.wire import (
    ACTION_CACHE_STATS,
    ACTION_HEALTH,
    ACTION_TIER_INFO,
    ACTION_WARM,
    ACTIONS,
    WIRE_VERSION,
    to_flight_error,
)
from windpipe.services.logging import get_logger
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.tier import Tier, TierInfo
from windpipe.services.storage.store import Storage

__all__ = ["ACTION_TABLE", "ActionHost", "FlightAction", "list_actions", "run_action"]

_log = get_logger("windpipe.flight")


class ActionHost(Protocol):
    """What the actions read of the server."""

    cache: ChunkCache
    tier: Tier | None
    config: FlightServerConfig
    plans: PlanCache

    @property
    def active_streams(self) -> int:
        """Streams open now."""
        ...

    @property
    def streams_started(self) -> int:
        """Streams started since the server started."""
        ...

    def authorize(self, context: Any, plan_id: str) -> Principal:
        """The caller, if it may read ``plan_id``."""
        ...

    def storage_for(self, root_uri: str) -> Storage:
        """The storage of a plan's root."""
        ...


Handler = Callable[[ActionHost, Any, bytes], Iterator[bytes]]


@dataclass(frozen=True)
class FlightAction:
    """One action: its handler, what ``list_actions`` says of it, and whether it answers
    callers without a token."""

    handler: Handler
    description: str
    anonymous: bool = False


def _json(model: Any, **dump: Any) -> bytes:
    return json.dumps(model.model_dump(mode="json", **dump)).encode()


def _health(host: ActionHost, context: Any, body: bytes) -> Iterator[bytes]:
    """Liveness; an authenticated caller also sees the tier's budget and its source (its
    path and host: ``tier-info``)."""
    health = FlightHealth(version=WIRE_VERSION, active_streams=host.active_streams,
                          streams=host.streams_started, tier=_health_tier(host, context))
    return iter([_json(health)])


def _health_tier(host: ActionHost, context: Any) -> HealthTier | None:
    """The tier's budget and how it was chosen (half the free disk unless set; ``"off"``
    without a tier) for a caller who may call the authenticated actions, so an operator
    sees it where they check liveness; None for anyone else: health stays free of
    anything about the host for anonymous probes."""
    try:
        caller(context)
    except Exception:  # unauthenticated (or auth unavailable): liveness answers anyway
        return None
    if host.tier is None:
        return HealthTier(budget_bytes=0, budget_source="off", used_bytes=0)
    return HealthTier(budget_bytes=host.tier.budget_bytes,
                      budget_source=host.tier.budget_source,
                      used_bytes=host.tier.used_bytes())


def _tier_info(host: ActionHost, context: Any, body: bytes) -> Iterator[bytes]:
    tier = (TierStatus.model_validate(_advertised_tier(host, host.tier).as_dict())
            if host.tier is not None else None)
    return iter([_json(FlightTierInfo(tier=tier))])


def _advertised_tier(host: ActionHost, tier: Tier) -> TierInfo:
    """The tier as advertised: its ``host`` is the configured host id (the node's name,
    which a pod's hostname is not), else the hostname."""
    info = tier.info()
    host_id = host.config.settings.host_id
    return dataclasses.replace(info, host=host_id) if host_id else info


def _cache_stats(host: ActionHost, context: Any, body: bytes) -> Iterator[bytes]:
    return iter([_json(CacheCounters.model_validate(host.cache.stats().as_dict()))])


def _warm(host: ActionHost, context: Any, body: bytes) -> Iterator[bytes]:
    """Checked and started before the first result: a refusal is the call's error."""
    try:
        plan_id, input_valid = warm_args(body)
        host.authorize(context, plan_id)
        plan = host.plans.live(plan_id)
        if input_valid:  # the blocks a reader with input_valid maps (their own keys)
            plan = plan.with_input_valid()
        results = warm_results(plan, host.storage_for(plan.root_uri), host.cache, host.tier)
    except Exception as exc:
        raise internal_error(exc) from None
    return _warm_steps(results)


def _warm_steps(results: Iterator[WarmProgress]) -> Iterator[bytes]:
    last: WarmProgress | None = None
    try:
        for last in results:
            yield _json(last, exclude_unset=True)
    except Exception as exc:
        raise internal_error(exc) from None
    _log.info("flight.warm", chunks=last.loaded if last else None,
              bytes=last.bytes if last else None, seconds=last.seconds if last else None)


ACTION_TABLE: dict[str, FlightAction] = {
    ACTION_HEALTH: FlightAction(
        _health, "liveness, no token: {status, version, active_streams, streams}; "
                 "with a token also {tier: {budget_bytes, budget_source}}", anonymous=True),
    ACTION_CACHE_STATS: FlightAction(_cache_stats, "chunk cache counters"),
    ACTION_TIER_INFO: FlightAction(
        _tier_info, "where the host tier is, for same-host readers: {tier}"),
    ACTION_WARM: FlightAction(_warm, "load a plan's chunks into the cache: body {plan_id, "
                                     "input_valid?}"),
}


def list_actions() -> list[tuple[str, str]]:
    """``(type, description)`` of every action."""
    return [(kind, entry.description) for kind, entry in ACTION_TABLE.items()]


def run_action(host: ActionHost, context: Any, action: fl.Action) -> Iterator[bytes]:
    """The results of ``action``; its caller authenticated first unless it is anonymous."""
    kind = action.type
    body = action.body.to_pybytes() if action.body is not None else b""
    entry = ACTION_TABLE.get(kind)
    if entry is None or not entry.anonymous:
        try:
            caller(context)
        except fl.FlightError:
            raise
        except Exception as exc:
            raise internal_error(exc) from None
    if entry is None:
        raise to_flight_error(InvalidRequest(
            f"unknown action {kind!r}",
            details={"actions": list(ACTIONS)},
        ))
    return entry.handler(host, context, body)
