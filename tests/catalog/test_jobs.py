"""``windpipe.catalog.jobs.Jobs`` on its own: a job's work waits for its row, a job that ends at
once and one whose work raises are recorded and forgotten, a full pool refuses
before anything is written, and the rows of jobs that ended are pruned after their
retention, a bounded batch at a time."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker
from structlog.testing import capture_logs

import windpipe.catalog.jobs
from windpipe.catalog.jobs import PRUNE_BATCH, Jobs, request_key
from windpipe.catalog.models import RegistrationJob, utcnow
from windpipe.migrations import upgrade_engine
from windpipe.services.contract.errors import InvalidManifest, Unavailable, WindpipeError
from windpipe.services.database import create_engine


def _refuse(_fn: Callable[..., Any], *_args: Any) -> Future[Any]:
    raise Unavailable("busy", details={"retryable": True})


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    upgrade_engine(engine)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


@pytest.fixture
def jobs(sessions: sessionmaker[Session]) -> Iterator[Jobs]:
    with ThreadPoolExecutor(2) as pool:
        runner = Jobs(sessions, pool.submit, stale_after_s=30, retention_s=3600)
        yield runner
        runner.close()


def test_a_job_done_at_once_is_recorded_and_forgotten(
    jobs: Jobs, sessions: sessionmaker[Session],
) -> None:
    rows_seen = []

    def work(progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        with sessions() as session:  # the work starts only once its row exists
            rows_seen.append(session.scalar(sa.select(sa.func.count()).select_from(
                RegistrationJob)))
        progress("checking", 3, 3)
        return {"id": "v-x"}, True

    job_id, future, joined = jobs.start(dataset="d", key=request_key("d", {}),
                                        principal="p", work=work)
    assert future is not None
    assert not joined
    assert future.result(timeout=10) == ({"id": "v-x"}, True)
    assert rows_seen == [1]
    view = jobs.view(job_id)
    assert view is not None
    assert (view.state, view.phase, view.checked, view.total) == ("succeeded", "done", 3, 3)
    # a finished job is not "live": the same request starts a new one
    again = jobs.start(dataset="d", key=request_key("d", {}), principal="p", work=work)
    assert again.id != job_id
    assert not again.joined


def test_a_failed_job_keeps_its_error_envelope(jobs: Jobs) -> None:
    def work(_progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        raise InvalidManifest("row 3: missing", details={"problems": []})

    job_id, future, _ = jobs.start(dataset="d", key="k", principal="p", work=work)
    assert future is not None
    with pytest.raises(WindpipeError):
        future.result(timeout=10)
    view = jobs.view(job_id)
    assert view is not None
    assert view.state == "failed"
    assert view.error == {"type": "invalid_manifest", "message": "row 3: missing",
                          "details": {"problems": []}}


def test_a_full_pool_refuses_before_writing_anything(sessions: sessionmaker[Session]) -> None:
    runner = Jobs(sessions, _refuse, stale_after_s=30, retention_s=3600)
    try:
        with pytest.raises(WindpipeError, match="busy"):
            runner.start(dataset="d", key="k", principal="p",
                         work=lambda _p: ({"id": "v"}, True))
        with sessions() as session:
            assert session.scalar(sa.select(sa.func.count()).select_from(
                RegistrationJob)) == 0
    finally:
        runner.close()


def test_the_same_request_while_its_job_runs_joins_it(jobs: Jobs) -> None:
    release = threading.Event()

    def work(_progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        release.wait()
        return {"id": "v-x"}, True

    first = jobs.start(dataset="d", key="k", principal="p", work=work)
    second = jobs.start(dataset="d", key="k", principal="q", work=work)
    release.set()
    assert (second.id, second.future, second.joined) == (first.id, first.future, True)
    assert not first.joined


@pytest.fixture
def no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """No heartbeat (nor the prune it runs) while a test prunes by hand."""
    monkeypatch.setattr(windpipe.catalog.jobs, "HEARTBEAT_S", 3600.0)


def _old_rows(sessions: sessionmaker[Session], n: int, *, state: str, age_s: float) -> None:
    at = utcnow() - timedelta(seconds=age_s)
    with sessions.begin() as session:
        session.add_all(RegistrationJob(
            id=f"j-{state[:3]}{k:029d}", dataset="d", request_key="k", principal="p",
            state=state, phase="done", checked=0, profiled=0, created_at=at, updated_at=at)
            for k in range(n))


def _job_ids(sessions: sessionmaker[Session]) -> set[str]:
    with sessions() as session:
        return set(session.scalars(sa.select(RegistrationJob.id)))


def test_rows_of_ended_jobs_are_pruned_after_their_retention_a_batch_at_a_time(
    no_timer: None, sessions: sessionmaker[Session],
) -> None:
    release = threading.Event()

    def work(_progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        release.wait()
        return {"id": "v-x"}, True

    with ThreadPoolExecutor(2) as pool:
        runner = Jobs(sessions, pool.submit, stale_after_s=30, retention_s=60)
        try:
            _old_rows(sessions, PRUNE_BATCH + 3, state="succeeded", age_s=61)
            _old_rows(sessions, 2, state="failed", age_s=59)  # not yet
            # a running row without a heartbeat for longer than the retention: interrupted
            _old_rows(sessions, 1, state="running", age_s=61)
            live = runner.start(dataset="d", key="live", principal="p", work=work)
            assert runner.prune() == PRUNE_BATCH  # bounded: the rest at the next prune
            assert runner.prune() == 4
            assert runner.prune() == 0
            assert _job_ids(sessions) == {live.id, *(f"j-fai{k:029d}" for k in range(2))}
            assert runner.view("j-suc" + "0" * 29) is None
            release.set()
            assert live.future is not None
            live.future.result(timeout=30)
        finally:
            release.set()
            runner.close()


def test_an_interrupted_job_is_kept_until_it_reads_as_interrupted(
    no_timer: None, sessions: sessionmaker[Session],
) -> None:
    """A retention shorter than ``stale_after_s`` never deletes a job whose server may
    still be running it."""
    runner = Jobs(sessions, _refuse, stale_after_s=30, retention_s=1)
    try:
        _old_rows(sessions, 1, state="running", age_s=10)
        _old_rows(sessions, 1, state="succeeded", age_s=10)
        assert runner.prune() == 1
        assert _job_ids(sessions) == {"j-run" + "0" * 29}
    finally:
        runner.close()


def test_progress_waits_quietly_while_another_writer_holds_sqlite(
    tmp_path: Path, no_timer: None,
) -> None:
    path = tmp_path / "locked.db"
    engine = create_engine(f"sqlite:///{path}", sqlite_busy_timeout_s=0.05)
    upgrade_engine(engine)
    sessions = sessionmaker(engine, expire_on_commit=False)
    release, reported = threading.Event(), threading.Event()

    def work(progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        progress("checking", 5, 9)
        reported.set()
        release.wait()
        return {"id": "v-x"}, True

    with ThreadPoolExecutor(1) as pool:
        jobs = Jobs(sessions, pool.submit, stale_after_s=30, retention_s=3600)
        try:
            job = jobs.start(dataset="d", key="k", principal="p", work=work)
            assert reported.wait(30)
            writer = sqlite3.connect(path, isolation_level=None)
            writer.execute("BEGIN IMMEDIATE")  # a long write: a job storing its rows
            with capture_logs() as logs:
                jobs._record_progress()
            writer.execute("ROLLBACK")
            writer.close()
            assert not [e for e in logs if e["log_level"] == "warning"], logs
            jobs._record_progress()  # the lock is free: this beat records it
            with sessions() as session:
                row = session.get(RegistrationJob, job.id)
                assert row is not None
                assert (row.phase, row.checked, row.total) == ("checking", 5, 9)
        finally:
            release.set()
            jobs.close()
    engine.dispose()
