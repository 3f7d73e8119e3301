"""What a Flight stream is checked for before it starts and while it runs.

* :func:`check_cache_fit`: before the first batch, every batch of the ticket fits the
  server's chunk cache. The figure is the one of the plan report's
  ``cache_working_set_bytes`` and of the catalog's fit check (the distinct chunk bytes a
  batch pins, :mod:`windpipe.services.planning.working_set`), so a pass the catalog accepted is
  refused only by a server whose budget is smaller than the catalog's, and then at once,
  naming the batch and the bytes.
* :class:`StreamAuth`: between batches, the caller's token and its right to read the plan
  are checked again through the server's access layer (``windpipe.flight_server.access``, which
  trusts a positive answer ``auth_cache_s`` seconds), at most every
  :data:`STREAM_AUTH_CHECK_S` seconds per stream and never per batch: a token revoked
  (or a scope narrowed) while a stream runs ends that stream with ``unauthenticated``
  (``forbidden``) within ``auth_cache_s + STREAM_AUTH_CHECK_S`` seconds
  (``docs/security.md``). When the access layer cannot answer (its database or catalog
  is down) the stream goes on for at most ``auth_cache_s + STREAM_AUTH_CHECK_S``
  seconds after its last positive answer, then ends with ``unavailable`` (retryable).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from windpipe.flight_server.access import FlightAccess
from windpipe.services.contract.errors import ErrorType, Unavailable, WindpipeError, error_class
from windpipe.services.contract.principals import Principal
from windpipe.services.logging import get_logger
from windpipe.services.materialize.cache import working_set_error
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.schedule import Schedule

__all__ = ["STREAM_AUTH_CHECK_S", "StreamAuth", "check_cache_fit"]

STREAM_AUTH_CHECK_S = 2.0  # a running stream asks its access layer again this often

_log = get_logger("windpipe.flight.access")
_REFUSALS = (ErrorType.UNAUTHENTICATED, ErrorType.FORBIDDEN)


def check_cache_fit(plan: PlanContext, schedule: Schedule, batches: np.ndarray, *,
                    start: int, budget_bytes: int) -> None:
    """Refuse (``resource_exhausted``) a ticket whose batches ``batches`` (global indices;
    the first is position ``start`` of the pass, in part batches) do not all fit
    ``budget_bytes`` of chunk cache."""
    if not batches.shape[0]:
        return
    need = plan.chunk_bytes(schedule.epoch)[batches]
    worst = int(np.argmax(need))
    if int(need[worst]) > budget_bytes:
        raise working_set_error(int(need[worst]), budget_bytes,
                                batch_idx=(start + worst) // schedule.parts,
                                global_batch=int(batches[worst]))


class StreamAuth:
    """Re-checks one stream's caller between batches (see the module docstring).

    ``access`` None (a server without tokens) checks nothing. ``clock`` is for tests.
    """

    def __init__(self, access: FlightAccess | None, *, token: str | None,
                 principal: Principal, plan_id: str, trust_s: float,
                 every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._access = access
        self._token = token
        self._principal = principal
        self._plan_id = plan_id
        self._every = STREAM_AUTH_CHECK_S if every_s is None else every_s
        self._trust = trust_s
        self._clock = clock
        now = clock()
        self._due = now + self._every
        self._trusted_until = now + self._trust

    def check(self, *, next_batch: int) -> None:
        """Return when the caller may still read the plan (or no check is due); else raise
        the refusal, naming ``next_batch`` (where a pass may resume once allowed again)."""
        if self._access is None:
            return
        now = self._clock()
        if now < self._due:
            return
        self._due = now + self._every
        try:
            principal = self._access.authenticate(self._token)
            self._access.authorize_plan(self._token, principal, self._plan_id)
        except WindpipeError as exc:
            if exc.type in _REFUSALS:
                raise error_class(exc.type)(
                    f"{exc.message} (checked again while streaming; the stream "
                    f"ended before batch {next_batch})",
                    details={**exc.details, "next_batch": next_batch}) from None
            failure: BaseException = exc
        except Exception as exc:  # the database or the catalog is down: retried next time
            failure = exc
        else:
            self._trusted_until = now + self._trust
            return
        _log.warning("flight.stream.recheck_failed", plan=self._plan_id,
                     principal=self._principal.name, error=type(failure).__name__)
        if now >= self._trusted_until:
            raise Unavailable(
                "this Flight server cannot check the stream's token now (its catalog or "
                "database does not answer); resume the pass later",
                details={"next_batch": next_batch})
