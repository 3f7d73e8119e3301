"""Registrations that outlast their request: jobs with progress, found again by a retry.

A registration of many segments, or on a slow store, takes longer than a client waits.
Every registration runs as a job (:meth:`Jobs.start`, on the catalog's storage pool);
the route waits for it as long as the client allows (``Prefer: wait=N``) and answers a
job done by then as a plain registration (201 / 200), otherwise 202 with the job, which
``GET /v1/jobs/{id}`` shows: segments checked of total while ``running``, then the
version it registered (``succeeded``) or the error envelope it ended with (``failed``).

- The same request (dataset and body digest) while its job runs finds that job instead
  of starting another one, on any replica: a client that timed out and posts again, or
  reconnects, follows the same work.
- Progress (the phase: reading the manifest, checking each segment, profiling each
  segment's values, storing; and segments done of each) is counted in memory and
  written with the job's heartbeat (``updated_at``) by one thread every
  :data:`HEARTBEAT_S` (half a second). A ``running`` job whose heartbeat is older
  than ``stale_after_s`` lost its server (stopped, killed): it reads as
  ``interrupted``, and since a registration writes its version in one transaction at its
  very end, nothing of it was stored; the same request again starts a fresh job and
  registers the same content-addressed version.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session, sessionmaker

from catalog.models import RegistrationJob, as_utc, utcnow
from services.contract.errors import InternalError, Unavailable, WindpipeError
from services.contract.identity import canonical_json
from services.database import session_scope
from services.logging import get_logger

__all__ = [
    "HEARTBEAT_S",
    "JobPhase",
    "JobState",
    "JobView",
    "Jobs",
    "RegistrationWork",
    "Submit",
    "request_key",
]

HEARTBEAT_S = 0.5
JobState = Literal["running", "succeeded", "failed", "interrupted"]
JobPhase = Literal["reading manifest", "checking", "profiling", "storing", "done"]
Progress = Callable[[str, int, int], None]
Submit = Callable[..., "Future[tuple[dict[str, Any], bool]]"]
RegistrationWork = Callable[[Progress], tuple[dict[str, Any], bool]]
"""The registration itself: called with a ``progress(phase, segments done, of)``
callback (phases ``checking``, ``profiling``, ``storing``), it returns the version's
answer (``VersionOut`` as JSON) and whether it was new."""

_log = get_logger("catalog.jobs")
_INTERRUPTED = ("the catalog server running this registration stopped before it finished; "
                "nothing of it was stored: post the same registration again")


def request_key(dataset: str, body: dict[str, Any]) -> str:
    """The digest that makes a repeated registration find its running job."""
    return hashlib.sha256(canonical_json([dataset, body])).hexdigest()


def _utc(at: datetime) -> datetime:
    aware = as_utc(at)
    assert aware is not None
    return aware


VersionT = TypeVar("VersionT")


class JobView(BaseModel, Generic[VersionT]):
    """A job as a reader sees it (``interrupted`` decided from the heartbeat): the one
    list of a job's fields. :meth:`Jobs.view` reads ``version`` as the stored JSON
    (``JobView[dict[str, Any]]``); the REST answer ``JobOut`` is this model with the
    version validated (``JobView[VersionOut]``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    dataset: str
    state: JobState
    phase: JobPhase
    checked: int
    profiled: int
    total: int | None
    created_at: datetime
    updated_at: datetime
    version: VersionT | None = None
    created: bool | None = None
    error: dict[str, Any] | None = None


@dataclass
class _Running:
    phase: str = "reading manifest"
    checked: int = 0
    profiled: int = 0
    total: int | None = None
    gate: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False

    def report(self, phase: str, done: int, total: int) -> None:
        self.phase, self.total = phase, total
        if phase == "checking":
            self.checked = done
        elif phase == "profiling":
            self.profiled = done

    def values(self) -> dict[str, Any]:
        return {"phase": self.phase, "checked": self.checked, "profiled": self.profiled,
                "total": self.total}


class Jobs:
    """The registration jobs of one catalog process (see the module docstring)."""

    def __init__(self, sessions: sessionmaker[Session], submit: Submit, *,
                 stale_after_s: float) -> None:
        """``submit(fn, *args)``: where jobs run (the catalog's storage pool, which
        refuses with ``unavailable`` when full)."""
        self._sessions = sessions
        self._submit = submit
        self.stale_after_s = stale_after_s
        self._lock = threading.RLock()  # a job done at once forgets itself in start()
        self._running: dict[str, _Running] = {}
        self._futures: dict[str, Future[tuple[dict[str, Any], bool]]] = {}
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="windpipe-jobs",
                                      daemon=True)
        self._beat.start()

    def close(self) -> None:
        """Stop the heartbeat (jobs still running read as interrupted once it is stale)."""
        self._stop.set()
        self._beat.join(timeout=5)

    def start(self, *, dataset: str, key: str, principal: str,
              work: RegistrationWork) -> tuple[str, Future[tuple[dict[str, Any], bool]] | None]:
        """The id of the job of this request, and its future when it runs here: the
        running job of the same ``key`` if there is a live one, else a new job (refused
        with ``unavailable`` when the storage pool and its queue are full)."""
        with self._lock:
            live = self._live_job(key)
            if live is not None:
                return live, self._futures.get(live)
            job_id = f"j-{uuid.uuid4().hex}"
            running = self._running[job_id] = _Running()
            # admitted (or refused at once, before any write) first; the work waits at
            # the gate until the job's row exists
            try:
                future = self._submit(self._run, job_id, work)
            except BaseException:
                del self._running[job_id]
                raise
            try:
                with session_scope(self._sessions) as session:
                    session.add(RegistrationJob(id=job_id, dataset=dataset, request_key=key,
                                                principal=principal, state="running",
                                                **running.values()))
            except BaseException:
                running.abandoned = True
                raise
            finally:
                running.gate.set()
            self._futures[job_id] = future
            future.add_done_callback(lambda _f: self._forget(job_id))
            return job_id, future

    def view(self, job_id: str) -> JobView[dict[str, Any]] | None:
        """The job ``job_id``, or None when there is none."""
        with session_scope(self._sessions) as session:
            row = session.get(RegistrationJob, job_id)
            if row is None:
                return None
            state: JobState = row.state  # type: ignore[assignment]
            error = row.error
            if state == "running" and row.id not in self._running \
                    and self._stale(row.updated_at):
                state = "interrupted"
                error = Unavailable(_INTERRUPTED, details={"job_id": row.id}).envelope()["error"]
            return JobView[dict[str, Any]](
                id=row.id, dataset=row.dataset, state=state,
                phase=row.phase,  # type: ignore[arg-type]
                checked=int(row.checked), profiled=int(row.profiled),
                total=None if row.total is None else int(row.total),
                created_at=_utc(row.created_at), updated_at=_utc(row.updated_at),
                version=row.result, created=row.created, error=error)

    # -- internals -------------------------------------------------------------------

    def _live_job(self, key: str) -> str | None:
        with session_scope(self._sessions) as session:
            rows = session.scalars(
                sa.select(RegistrationJob)
                .where(RegistrationJob.request_key == key, RegistrationJob.state == "running")
                .order_by(RegistrationJob.created_at.desc())).all()
            for row in rows:
                if row.id in self._running or not self._stale(row.updated_at):
                    return row.id
        return None

    def _stale(self, updated_at: datetime) -> bool:
        return utcnow() - _utc(updated_at) > timedelta(seconds=self.stale_after_s)

    def _run(self, job_id: str, work: RegistrationWork) -> tuple[dict[str, Any], bool]:
        running = self._running[job_id]
        running.gate.wait()
        if running.abandoned:  # its row could not be written: the caller got that error
            self._forget(job_id)
            raise Unavailable("the job could not be recorded")
        try:
            version, created = work(running.report)
        except WindpipeError as exc:
            self._finish(job_id, running, state="failed",
                         error=exc.envelope()["error"])
            raise
        except Exception:
            _log.exception("registration job %s failed", job_id)
            self._finish(job_id, running, state="failed", error=InternalError(
                "the registration failed unexpectedly (see the catalog's log)",
                details={"job_id": job_id}).envelope()["error"])
            raise
        running.phase = "done"
        self._finish(job_id, running, state="succeeded", result=version, created=created)
        return version, created

    def _finish(self, job_id: str, running: _Running, *, state: JobState,
                result: dict[str, Any] | None = None, created: bool | None = None,
                error: dict[str, Any] | None = None) -> None:
        with session_scope(self._sessions) as session:
            session.execute(sa.update(RegistrationJob).where(RegistrationJob.id == job_id)
                            .values(state=state, **running.values(), result=result,
                                    created=created, error=error, updated_at=utcnow()))

    def _forget(self, job_id: str) -> None:
        with self._lock:
            self._running.pop(job_id, None)
            self._futures.pop(job_id, None)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                beats = {k: r.values() for k, r in self._running.items()}
            if not beats:
                continue
            try:
                with session_scope(self._sessions) as session:
                    for job_id, values in beats.items():
                        session.execute(
                            sa.update(RegistrationJob)
                            .where(RegistrationJob.id == job_id,
                                   RegistrationJob.state == "running")
                            .values(**values, updated_at=utcnow()))
            except Exception:  # a database outage: the next beat tries again
                _log.warning("could not record the progress of registration jobs",
                             exc_info=True)
