"""``catalog.jobs.Jobs`` on its own: a job's work waits for its row, a job that ends at
once and one whose work raises are recorded and forgotten, and a full pool refuses
before anything is written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from catalog.jobs import Jobs, request_key
from catalog.models import RegistrationJob
from migrations import upgrade_engine
from services.contract.errors import InvalidManifest, Unavailable, WindpipeError
from services.database import create_engine


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
        runner = Jobs(sessions, pool.submit, stale_after_s=30)
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

    job_id, future = jobs.start(dataset="d", key=request_key("d", {}), principal="p",
                                work=work)
    assert future is not None
    assert future.result(timeout=10) == ({"id": "v-x"}, True)
    assert rows_seen == [1]
    view = jobs.view(job_id)
    assert view is not None
    assert (view.state, view.phase, view.checked, view.total) == ("succeeded", "done", 3, 3)
    # a finished job is not "live": the same request starts a new one
    again, _ = jobs.start(dataset="d", key=request_key("d", {}), principal="p", work=work)
    assert again != job_id


def test_a_failed_job_keeps_its_error_envelope(jobs: Jobs) -> None:
    def work(_progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        raise InvalidManifest("row 3: missing", details={"problems": []})

    job_id, future = jobs.start(dataset="d", key="k", principal="p", work=work)
    assert future is not None
    with pytest.raises(WindpipeError):
        future.result(timeout=10)
    view = jobs.view(job_id)
    assert view is not None
    assert view.state == "failed"
    assert view.error == {"type": "invalid_manifest", "message": "row 3: missing",
                          "details": {"problems": []}}


def test_a_full_pool_refuses_before_writing_anything(sessions: sessionmaker[Session]) -> None:
    runner = Jobs(sessions, _refuse, stale_after_s=30)
    try:
        with pytest.raises(WindpipeError, match="busy"):
            runner.start(dataset="d", key="k", principal="p",
                         work=lambda _p: ({"id": "v"}, True))
        with sessions() as session:
            assert session.scalar(sa.select(sa.func.count()).select_from(
                RegistrationJob)) == 0
    finally:
        runner.close()
