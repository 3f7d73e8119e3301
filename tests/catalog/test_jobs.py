"""``catalog.jobs.Jobs`` on its own: a job that ends before ``start`` returns, and one
whose work raises, are recorded and forgotten (no lock held across them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from catalog.jobs import Jobs, request_key
from migrations import upgrade_engine
from services.contract.errors import ErrorType, WindpipeError
from services.database import create_engine


def _at_once(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``fn`` in the caller's thread: the future is done before ``submit`` returns."""
    future: Future[Any] = Future()
    try:
        future.set_result(fn(*args))
    except Exception as exc:
        future.set_exception(exc)
    return future


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    engine = create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    upgrade_engine(engine)
    runner = Jobs(sessionmaker(engine, expire_on_commit=False), _at_once, stale_after_s=30)
    yield runner
    runner.close()
    engine.dispose()


def test_a_job_done_inside_start_is_recorded_and_forgotten(jobs: Jobs) -> None:
    def work(progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        progress("checking", 3, 3)
        return {"id": "v-x"}, True

    job_id, future = jobs.start(dataset="d", key=request_key("d", {}), principal="p",
                                work=work)
    assert future is not None
    assert future.result() == ({"id": "v-x"}, True)
    view = jobs.view(job_id)
    assert view is not None
    assert (view.state, view.phase, view.checked, view.total) == ("succeeded", "done", 3, 3)
    # a finished job is not "live": the same request starts a new one
    again, _ = jobs.start(dataset="d", key=request_key("d", {}), principal="p", work=work)
    assert again != job_id


def test_a_failed_job_keeps_its_error_envelope(jobs: Jobs) -> None:
    def work(_progress: Callable[[str, int, int], None]) -> tuple[dict[str, Any], bool]:
        raise WindpipeError(ErrorType.INVALID_MANIFEST, "row 3: missing", {"problems": []})

    job_id, future = jobs.start(dataset="d", key="k", principal="p", work=work)
    assert future is not None
    with pytest.raises(WindpipeError):
        future.result()
    view = jobs.view(job_id)
    assert view is not None
    assert view.state == "failed"
    assert view.error == {"type": "invalid_manifest", "message": "row 3: missing",
                          "details": {"problems": []}}
