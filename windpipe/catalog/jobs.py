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
- A shared job answers each of its requests for that request's caller: the work runs
  seeing every dataset, and a conflict naming another dataset is written again for each
  caller (:func:`windpipe.catalog.registration.error_seen_by`), in place, on ``Prefer: wait``
  and on ``GET /v1/jobs/{id}``. Only the request that started a job answers 201 for the
  version it created (:attr:`Started.joined`); the requests that found it answer 200.
- A job's row is kept :attr:`Jobs.retention_s` after the job ended (its last
  ``updated_at``; an interrupted job's after its heartbeat stopped, and never before it
  reads as interrupted), then deleted by the heartbeat thread, at most
  :data:`PRUNE_BATCH` rows at a time, every :data:`PRUNE_EVERY_S` or sooner while rows
  are due: ``GET /v1/jobs/{id}`` of a pruned job is ``not_found``.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session, sessionmaker

from windpipe.catalog.models import RegistrationJob, as_utc, utcnow
from windpipe.catalog.registration import error_seen_by
from windpipe.services.contract.errors import (
    InternalError,
    Unavailable,
    WindpipeError,
    error_from_envelope,
)
from windpipe.services.contract.identity import canonical_json
from windpipe.services.database import is_database_locked, session_scope
from windpipe.services.logging import get_logger

__all__ = [
    "HEARTBEAT_S",
    "PRUNE_BATCH",
    "PRUNE_EVERY_S",
    "JobPhase",
    "JobState",
    "JobView",
    "Jobs",
    "RegistrationWork",
    "Started",
    "Submit",
    "request_key",
]

HEARTBEAT_S = 0.5
PRUNE_BATCH = 500
"""Most job rows one prune deletes: a backlog (a server that was down for days) is
deleted a batch per heartbeat, never in one long transaction."""
PRUNE_EVERY_S = 60.0
"""How often the heartbeat thread looks for job rows past their retention (sooner when
the retention is shorter)."""
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


_KEY_SLICE = 2048


def request_key(dataset: str, body: dict[str, Any]) -> str:
    """The digest that makes a repeated registration find its running job: SHA-256 of
    ``canonical_json([dataset, body])``, encoded a slice of each list in ``body`` at a
    time (thousands of inline rows in one ``json.dumps`` would hold the GIL, and the
    catalog's event loop with it, for as long)."""
    digest = hashlib.sha256(b"[" + canonical_json(dataset) + b",{")
    plain = {str(k): v for k, v in body.items()}
    for i, name in enumerate(sorted(plain)):
        value = plain[name]
        digest.update((b"," if i else b"") + canonical_json(name) + b":")
        if isinstance(value, list | tuple):
            digest.update(b"[")
            for at in range(0, len(value), _KEY_SLICE):
                items = canonical_json(value[at:at + _KEY_SLICE])[1:-1]
                digest.update(b"," + items if at else items)
            digest.update(b"]")
        else:
            digest.update(canonical_json(value))
    digest.update(b"}]")
    return digest.hexdigest()


def _utc(at: datetime) -> datetime:
    aware = as_utc(at)
    assert aware is not None
    return aware


VersionT = TypeVar("VersionT")


class Started(NamedTuple):
    """What :meth:`Jobs.start` gave a request: its job's ``id``; the job's ``future``
    when it runs in this process; ``joined`` when the request found a running job of the
    same request instead of starting one (it then answers 200, never 201: the request
    that started the job answers 201 for a version that job created)."""

    id: str
    future: Future[tuple[dict[str, Any], bool]] | None
    joined: bool


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
                 stale_after_s: float, retention_s: float) -> None:
        """``submit(fn, *args)``: where jobs run (the catalog's storage pool, which
        refuses with ``unavailable`` when full); ``retention_s``: how long a job's row
        is kept after the job ended."""
        self._sessions = sessions
        self._submit = submit
        self.stale_after_s = stale_after_s
        self.retention_s = retention_s
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
              work: RegistrationWork) -> Started:
        """The job of this request (:class:`Started`): the running job of the same
        ``key`` if there is a live one, else a new job (refused with ``unavailable``
        when the storage pool and its queue are full). ``work`` runs for every request
        that finds the job, so it must see every dataset: answers are written for
        their caller by :meth:`view` and :func:`windpipe.catalog.registration.error_seen_by`."""
        with self._lock:
            live = self._live_job(key)
            if live is not None:
                return Started(live, self._futures.get(live), joined=True)
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
            return Started(job_id, future, joined=False)

    def view(self, job_id: str, *, visible: Callable[[str], bool] | None = None,
             ) -> JobView[dict[str, Any]] | None:
        """The job ``job_id`` as the caller that ``visible`` describes (a scoped
        caller's test of a dataset name; None: one that sees every dataset) may see it,
        or None when there is none (never was, or pruned)."""
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
            elif error is not None and error.get("type") == "conflict" \
                    and visible is not None:
                error = error_seen_by(error_from_envelope({"error": error}),
                                      dataset=row.dataset,
                                      visible=visible).envelope()["error"]
            return JobView[dict[str, Any]](
                id=row.id, dataset=row.dataset, state=state,
                phase=row.phase,  # type: ignore[arg-type]
                checked=int(row.checked), profiled=int(row.profiled),
                total=None if row.total is None else int(row.total),
                created_at=_utc(row.created_at), updated_at=_utc(row.updated_at),
                version=row.result, created=row.created, error=error)

    def prune(self) -> int:
        """Delete up to :data:`PRUNE_BATCH` rows of jobs that ended more than
        :attr:`retention_s` ago (an interrupted one: whose heartbeat is older than both
        the retention and ``stale_after_s``), never one running here; how many went."""
        now = utcnow()
        ended = now - timedelta(seconds=self.retention_s)
        lost = now - timedelta(seconds=max(self.retention_s, self.stale_after_s))
        with self._lock:
            here = list(self._running)
        job = RegistrationJob
        with session_scope(self._sessions) as session:
            due = session.scalars(
                sa.select(job.id).where(
                    sa.or_(sa.and_(job.state != "running", job.updated_at < ended),
                           sa.and_(job.state == "running", job.updated_at < lost)),
                    job.id.not_in(here))
                .limit(PRUNE_BATCH)).all()
            if due:
                session.execute(sa.delete(job).where(job.id.in_(due)))
        return len(due)

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
        next_prune = time.monotonic()  # the first beat prunes what a stopped server left
        while not self._stop.wait(HEARTBEAT_S):
            self._record_progress()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self._prune_quietly()

    def _prune_quietly(self) -> float:
        """Prune once; the seconds until the next prune (none while rows are due)."""
        try:
            if self.prune() == PRUNE_BATCH:
                return 0.0
        except Exception:  # a database outage: a later beat tries again
            _log.warning("could not delete the rows of old registration jobs",
                         exc_info=True)
        return min(PRUNE_EVERY_S, self.retention_s)

    def _record_progress(self) -> None:
        with self._lock:
            beats = {k: r.values() for k, r in self._running.items()}
        if not beats:
            return
        try:
            with session_scope(self._sessions) as session:
                for job_id, values in beats.items():
                    session.execute(
                        sa.update(RegistrationJob)
                        .where(RegistrationJob.id == job_id,
                               RegistrationJob.state == "running")
                        .values(**values, updated_at=utcnow()))
        except Exception as exc:  # a database outage: the next beat tries again
            if is_database_locked(exc):  # SQLite's one writer busy (a job storing its rows)
                _log.debug("jobs.progress_deferred", reason="database is locked")
                return
            _log.warning("could not record the progress of registration jobs",
                         exc_info=True)
