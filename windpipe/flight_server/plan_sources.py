"""Where a Flight server gets its plans: :class:`PlanSource`, the stored artifact.

:class:`RestPlanSource` reads it over REST; ``windpipe.catalog.flight_adapters.DatabasePlanSource``
reads it from the catalog database (the CLI wires it in; this package never imports the
catalog). Both fetch the bytes the catalog stored when it made the plan and decode
them with the one loader, :meth:`windpipe.services.planning.artifact.PlanArtifact.from_ipc`; neither
reads the index or rebuilds streams. :class:`PlanCache` keeps a few loaded plans
(:class:`windpipe.services.materialize.plan.PlanContext`) and loads each at most once at a time; an
id that fails to load leaves nothing behind. A client never sends a path or a
config.

A plan's bytes never change, but it can be retired (``windpipe/catalog/retire.py``):
:meth:`PlanCache.live` asks the source afresh, once per stream or ticket request,
and raises ``conflict`` for a retired plan; streams already running are not asked.
A ticket issued before the retirement (``issued_at``) is part of a pass already
running, whose later endpoints are streams of their own: it is still honoured, so a
pass that was streaming when its plan was retired finishes, as the SDK promises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

import httpx

from windpipe.services.contract.auth import http_headers
from windpipe.services.contract.errors import Conflict, NotFound, Unavailable, retired_error
from windpipe.services.contract.shapes import check_plan_id
from windpipe.services.logging import get_logger
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.memo import Memo, deep_nbytes
from windpipe.services.planning.artifact import ARTIFACT_MEDIA_TYPE, PlanArtifact
from windpipe.services.storage.packs import PackStore
from windpipe.services.tracing import trace_headers

__all__ = ["PlanCache", "PlanSource", "RestPlanSource"]

_log = get_logger("windpipe.flight.plans")


class PlanSource(Protocol):
    """Where plans come from."""

    def load(self, plan_id: str) -> PlanArtifact:
        """The stored plan ``plan_id``; ``not_found`` if the catalog has none."""
        ...

    def check_live(self, plan_id: str) -> None:
        """``conflict`` when the plan (or its split or version) is retired."""
        ...


class RestPlanSource:
    """Plans read with one call, ``GET /v1/plans/{id}/artifact`` (no database access)."""

    def __init__(self, base_url: str, *, token: str | None = None,
                 timeout_s: float = 60.0) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {**http_headers(token),
                         "accept": f"{ARTIFACT_MEDIA_TYPE}, application/json"}
        self._timeout = timeout_s

    def load(self, plan_id: str) -> PlanArtifact:
        """Fetch and decode the artifact; ``unavailable`` when the catalog cannot be reached
        (a connection error, not a server bug)."""
        path = f"/v1/plans/{check_plan_id(plan_id)}/artifact"  # never x/../p-1, p-1%2F
        return PlanArtifact.from_ipc(self._get(plan_id, path))

    def check_live(self, plan_id: str) -> None:
        """``GET /v1/plans/{id}``: ``conflict`` when its ``retired_at`` is set."""
        body = json.loads(self._get(plan_id, f"/v1/plans/{check_plan_id(plan_id)}"))
        if body.get("retired_at"):
            when = datetime.fromisoformat(str(body["retired_at"]).replace("Z", "+00:00"))
            raise retired_error("plan", plan_id, when)

    def _get(self, plan_id: str, path: str) -> bytes:
        try:
            resp = httpx.get(f"{self._base}{path}",  # in the stream's trace, if traced
                             headers={**self._headers, **trace_headers()},
                             timeout=self._timeout)
        except httpx.TransportError as exc:
            _log.error("flight.catalog_unreachable", path=path, error=str(exc))
            raise Unavailable(
                "this Flight server cannot reach its catalog",
                details={"plan_id": plan_id},
            ) from None
        if resp.status_code == 404:
            raise NotFound(f"plan {plan_id!r} does not exist",
                           details={"plan": plan_id})
        if resp.status_code != 200:
            _log.error("flight.catalog_refused", path=path, status=resp.status_code,
                       body=resp.text[:300])
            raise Unavailable(
                f"the catalog answered {resp.status_code} to this Flight server's plan request",
                details={"plan_id": plan_id, "status": resp.status_code},
            )
        return resp.content


class PlanCache:
    """Loaded plans by id (a few kept; each plan is loaded once at a time), each with its
    version's pack when ``packs`` holds one (:mod:`windpipe.services.storage.packs`)."""

    def __init__(self, source: PlanSource | Callable[[str], PlanArtifact], *,
                 max_plans: int = 16, max_bytes: int = 1 << 30,
                 packs: PackStore | None = None) -> None:
        self._load = source.load if hasattr(source, "load") else source
        self._packs = packs
        self._check: Callable[[str], None] | None = getattr(source, "check_live", None)
        self._plans: Memo[str, PlanContext] = Memo(
            max_plans, max_bytes=max_bytes, weigh=lambda p: deep_nbytes(p.artifact))

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def pending(self) -> int:
        """Plans being loaded now (an unknown id leaves nothing once its load fails)."""
        return self._plans.pending

    def live(self, plan_id: str, *, issued_at: float | None = None) -> PlanContext:
        """The plan ``plan_id``, after asking its source whether it was retired (``conflict``).

        What a new stream or ticket request calls; a source without ``check_live`` (a
        test's function) has no retirement. ``issued_at`` (a stream's ticket: when it was
        issued, epoch seconds): a plan retired after it is still served, the ticket being
        one endpoint of a pass that was running then."""
        if self._check is not None:
            try:
                self._check(plan_id)
            except Conflict as exc:
                if issued_at is None or not _retired_after(exc, issued_at):
                    raise
        return self.get(plan_id)

    def get(self, plan_id: str) -> PlanContext:
        """The plan ``plan_id`` (loaded on first use)."""
        return self._plans.get(plan_id, lambda: PlanContext.from_artifact(
            self._load(plan_id), packs=self._packs))


def _retired_after(exc: Conflict, issued_at: float) -> bool:
    """Whether the retirement ``exc`` reports came after ``issued_at`` (a ``retired_at``
    without a zone is UTC, as the catalog stores it on SQLite)."""
    text = exc.details.get("retired_at")
    if not isinstance(text, str):
        return False
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() > issued_at
