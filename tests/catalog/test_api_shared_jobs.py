"""One registration job shared by the identical requests of many callers: each caller is
answered for itself.

Identical registrations (dataset and body) while one runs are one job. A scoped writer
whose request found a job started by a caller who sees every dataset is told nothing of
a dataset it cannot read, in place, on ``Prefer: wait`` and on ``GET /v1/jobs/{id}``;
and of many identical requests at once only the one that started the job that created
the version answers 201. Real catalog servers over HTTP, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

BOOT = "boot-secret-token"
CONCURRENT = 30


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ended(client: httpx.Client, job_id: str, token: str) -> dict[str, Any]:
    """The job once it no longer runs, read with ``token`` (pytest-timeout bounds it)."""
    while True:
        answer = client.get(f"/v1/jobs/{job_id}", headers=_auth(token))
        assert answer.status_code == 200, answer.text
        if answer.json()["state"] != "running":
            return answer.json()  # type: ignore[no-any-return]
        time.sleep(0.05)


@pytest.fixture
def guarded(database_url: str, tmp_path: Path):
    """A catalog with a bootstrap admin and a writer scoped to ``lab-*``."""
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=120) as client:
        made = client.post("/v1/tokens", headers=_auth(BOOT),
                           json={"name": "lab-writer", "role": "writer", "datasets": "lab-*"})
        assert made.status_code == 201, made.text
        yield client, made.json()["token"]


def test_a_shared_job_names_no_dataset_its_caller_cannot_read(
    guarded: tuple[httpx.Client, str], tmp_path: Path,
) -> None:
    client, lab = guarded
    root = tmp_path / "data"
    write_small_dataset(root, n_cells=20, n_cycles=20)  # 800 segments: the job takes a while
    body = {"root": root.as_uri(), "manifest": "manifest.parquet"}
    held = client.post("/v1/datasets/team-shared/versions", json=body, headers=_auth(BOOT))
    assert held.status_code == 201, held.text
    version_id = held.json()["id"]
    # the admin's registration of the same content under a lab- name runs as a job ...
    started = client.post("/v1/datasets/lab-copy/versions", json=body,
                          headers={**_auth(BOOT), "Prefer": "respond-async"})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    # ... that the scoped writer's identical request finds, and waits for
    waited = client.post("/v1/datasets/lab-copy/versions", json=body,
                         headers={**_auth(lab), "Prefer": "wait=60"})
    error = assert_error(waited, 409, "conflict")
    assert "team-shared" not in waited.text
    assert version_id not in waited.text
    assert "outside your scope" in error["message"]
    assert error["details"] == {"dataset": "lab-copy"}
    # the job, read by the scoped writer: the same conflict, naming nothing
    seen = _ended(client, job_id, lab)
    assert seen["state"] == "failed"
    assert seen["error"] == error
    # the admin, who sees the holder, is told who holds it, on the job and in place
    named = {"version_id": version_id, "dataset": "team-shared"}
    assert _ended(client, job_id, BOOT)["error"]["details"] == named
    again = client.post("/v1/datasets/lab-copy/versions", json=body,
                        headers={**_auth(BOOT), "Prefer": "wait=60"})
    assert assert_error(again, 409, "conflict")["details"] == named
    # and the scoped writer's own job answers it the same, in place
    alone = client.post("/v1/datasets/lab-alone/versions", json=body, headers=_auth(lab))
    assert assert_error(alone, 409, "conflict")["details"] == {"dataset": "lab-alone"}
    assert "team-shared" not in alone.text


def test_identical_concurrent_registrations_answer_one_201(
    catalog_server: str, tmp_path: Path, database_url: str,
) -> None:
    root = tmp_path / "data"
    write_small_dataset(root, n_cells=10, n_cycles=10)
    body = {"root": root.as_uri(), "manifest": "manifest.parquet"}
    gate = threading.Barrier(CONCURRENT)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def register() -> None:
        with httpx.Client(base_url=catalog_server, timeout=180) as http:
            gate.wait()
            answer = http.post("/v1/datasets/same/versions", json=body,
                               headers={"Prefer": "wait=120"})
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=register) for _ in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == CONCURRENT
    assert Counter(a.status_code for a in answers) == {201: 1, 200: CONCURRENT - 1}, [
        a.text for a in answers if a.status_code not in (200, 201)]
    assert len({a.json()["id"] for a in answers}) == 1
    assert table_counts(database_url)["versions"] == 1
