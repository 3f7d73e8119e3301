"""A Flight server backed by the catalog database: its access layer and plan source.

The Flight server does not import the catalog; it defines what it needs,
``windpipe.flight_server.access.FlightAccess`` (who a caller is, whether it may read a plan)
and ``windpipe.flight_server.plan_sources.PlanSource`` (a stored plan, and whether it was
retired), and is handed them by whoever starts it (``windpipe serve``, the demo,
tests; ``windpipe.flight_server.runner.start_flight_server(settings, backend=...)``). The
classes here implement those protocols over the catalog's own rules, so a Flight
server that reads the database decides exactly as the catalog does:

* :class:`DatabaseAccess`: stored tokens and plan ownership (:mod:`windpipe.catalog.principals`);
* :class:`DatabasePlanSource`: the ``plan_artifacts`` row (:func:`windpipe.catalog.plans.
  plan_artifact_bytes`) and retirement (:func:`windpipe.catalog.retire.check_plan_live`);
* :class:`DatabaseBackend`: both over one engine, what ``start_flight_server`` takes.

Every database error while the database is down leaves as ``unavailable``
(:func:`windpipe.services.database.translate_outage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from windpipe.catalog import principals
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.plans import plan_artifact_bytes
from windpipe.catalog.retire import check_plan_live
from windpipe.services.contract.principals import Principal, Role, authorize
from windpipe.services.database import create_engine, translate_outage
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.settings import Settings, is_loopback

__all__ = ["DatabaseAccess", "DatabaseBackend", "DatabasePlanSource"]

_WHO = "this Flight server's catalog"


class DatabaseAccess:
    """Tokens and plan owners read from the catalog database."""

    def __init__(self, ctx: CatalogContext, *, bootstrap: str | None, loopback: bool) -> None:
        self._ctx = ctx
        self._bootstrap = bootstrap
        self._loopback = loopback

    def authenticate(self, token: str | None) -> Principal:
        """:func:`windpipe.catalog.principals.authenticate` against the database (``unavailable``
        while it is down)."""
        with translate_outage(who=_WHO, checking="the caller's token"):
            return principals.authenticate(self._ctx, token, bootstrap=self._bootstrap,
                                           loopback=self._loopback)

    def authorize_plan(self, token: str | None, principal: Principal, plan_id: str) -> None:
        """A reader scoped to the plan's dataset (an unknown plan is left to not_found;
        ``unavailable`` while the database is down)."""
        with translate_outage(who=_WHO, plan_id=plan_id):
            dataset = (principals.dataset_of(self._ctx, "plan", plan_id)
                       if principal.datasets is not None else None)
        authorize(principal, Role.READER, dataset)


class DatabasePlanSource:
    """Plans read from the catalog database (the ``plan_artifacts`` table)."""

    def __init__(self, ctx: CatalogContext) -> None:
        self._ctx = ctx

    def load(self, plan_id: str) -> PlanArtifact:
        """Read and decode the stored artifact; ``unavailable`` while the database is down."""
        with translate_outage(who=_WHO, plan_id=plan_id):
            data = plan_artifact_bytes(self._ctx, plan_id)
        return PlanArtifact.from_ipc(data)

    def check_live(self, plan_id: str) -> None:
        """One query: is the plan, its split or its version retired? ``unavailable`` while
        the database is down (also for a plan this server holds: its retirement cannot be
        known)."""
        with translate_outage(who=_WHO, plan_id=plan_id):
            check_plan_live(self._ctx.sessions, plan_id)


@dataclass(frozen=True, kw_only=True)
class DatabaseBackend:
    """A Flight server's plans and access over the catalog database (the shape of
    ``windpipe.flight_server.runner.FlightBackend``).

    ``close`` disposes of the engine only when :meth:`from_settings` made it; an engine
    the caller passed stays the caller's.
    """

    plans: DatabasePlanSource
    access: DatabaseAccess
    ctx: CatalogContext = field(repr=False)
    catalog_decides: bool = False  # this process's WINDPIPE_ADMIN_TOKEN admits callers too
    owned_engine: Engine | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, *,
                      engine: Engine | None = None) -> DatabaseBackend:
        """Over ``engine``, else over a new engine on ``settings``' database. The open
        ``local`` principal is possible only for a Flight server bound to loopback (or
        ``--insecure``), as for the catalog."""
        owned = None
        if engine is None:
            engine = owned = create_engine(
                settings.resolved_database_url(),
                sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s)
        ctx = CatalogContext.from_engine(engine)
        token = settings.admin_token_text()
        loopback = is_loopback(settings.resolved_flight_host()) or settings.insecure
        return cls(plans=DatabasePlanSource(ctx),
                   access=DatabaseAccess(ctx, bootstrap=token, loopback=loopback),
                   ctx=ctx, owned_engine=owned)

    def tokens_configured(self) -> bool:
        """Whether the database holds an active token (the start-up exposure check)."""
        return principals.stored_tokens_exist(self.ctx)

    def close(self) -> None:
        """Dispose of the engine this backend made (idempotent)."""
        if self.owned_engine is not None:
            self.owned_engine.dispose()
