"""What a served Flight server talks to: :class:`FlightBackend`, its plans and its access.

The Flight server depends on ``services`` alone; it never imports the catalog (nor
SQLAlchemy). It states here what it needs from a deployment, and its caller hands it
one of two shapes:

* :class:`RestBackend`: the Flight server knows only the catalog's URL
  (``settings.catalog_url``) and asks it for plans and for every caller's rights; this
  package builds it, as the runner's default;
* ``windpipe.catalog.flight_adapters.DatabaseBackend``: the Flight server reads the catalog
  database itself (plans, stored tokens, plan ownership); built by the caller that may
  import both packages (``windpipe serve``, the demo, tests, benchmarks).
"""

from __future__ import annotations

from typing import Protocol

from windpipe.flight_server.access import FlightAccess, RestAccess
from windpipe.flight_server.plan_sources import PlanSource, RestPlanSource
from windpipe.services.settings import Settings

__all__ = ["FlightBackend", "RestBackend"]


class FlightBackend(Protocol):
    """Where a Flight server's plans come from and who may read them."""

    @property
    def plans(self) -> PlanSource:
        """The stored plans and their retirement."""
        ...

    @property
    def access(self) -> FlightAccess:
        """Who a caller is and whether it may read a plan."""
        ...

    @property
    def catalog_decides(self) -> bool:
        """Whether only the catalog's tokens admit callers (this process's
        ``WINDPIPE_ADMIN_TOKEN`` does not count: ``windpipe.services.exposure.check_exposure``)."""
        ...

    def tokens_configured(self) -> bool:
        """Whether tokens exist, asked once at start for a server on a non-loopback host
        (``unavailable`` when it cannot be told)."""
        ...

    def close(self) -> None:
        """Release what the backend holds (its database engine), when the server stops."""
        ...


class RestBackend:
    """Plans and access from the catalog at ``catalog_url``, asked over REST."""

    catalog_decides = True

    def __init__(self, catalog_url: str, *, token: str | None = None) -> None:
        self.plans = RestPlanSource(catalog_url, token=token)
        self.access = RestAccess(catalog_url)

    @classmethod
    def from_settings(cls, settings: Settings) -> RestBackend:
        """Over ``settings.catalog_url``; plans are fetched with ``settings.admin_token``."""
        if not settings.catalog_url:
            msg = "a REST-backed Flight server needs settings.catalog_url"
            raise ValueError(msg)
        token = settings.admin_token_text()
        return cls(settings.catalog_url, token=token)

    def tokens_configured(self) -> bool:
        """Whether the catalog refuses an anonymous caller (:meth:`RestAccess.requires_tokens`)."""
        return self.access.requires_tokens()

    def close(self) -> None:
        """Nothing to release."""
