"""Storage roots bound to dataset scopes, and conflicts that name no hidden dataset.

A writer scoped to ``lab-*`` must not read another dataset's files by registering
their root (or a directory around or inside it) under a ``lab-`` name, and
registering content already held by a dataset it cannot see must not tell it that
dataset's name or version id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.services.settings import Settings

BOOT = "boot-secret-token"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _register(client: httpx.Client, token: str, name: str, root: Path,
              **body: Any) -> httpx.Response:
    body = body or {"manifest": "manifest.parquet"}
    return client.post(f"/v1/datasets/{name}/versions", headers=_auth(token),
                       json={"root": root.as_uri(), **body})


@pytest.fixture
def bound(database_url: str, tmp_path: Path):
    data = tmp_path / "data"
    for sub in ("lab", "ml", "shared"):
        (data / sub).mkdir(parents=True)
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), log_level="WARNING",
                        allowed_roots=(str(data),),
                        root_scopes=(f"lab-*={data / 'lab'}", f"ml-*={data / 'ml'}",
                                     f"team-*={data / 'ml'}"))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        made = client.post("/v1/tokens", headers=_auth(BOOT),
                           json={"name": "lab-writer", "role": "writer", "datasets": "lab-*"})
        assert made.status_code == 201, made.text
        yield client, data, made.json()["token"]


def test_a_root_bound_to_other_datasets_is_refused_before_it_is_read(
    bound, database_url: str,
) -> None:
    client, data, lab = bound
    write_small_dataset(data / "ml" / "run")
    taken = _register(client, BOOT, "ml-run", data / "ml" / "run")
    assert taken.status_code == 201, taken.text
    rows = [{"set_id": "s0", "cell_id": "cell0", "cidx": 0, "protocol": "cycling",
             "segment_path": "seg/c0/0/cycling.parquet"}]
    before = table_counts(database_url)
    answers = []
    attempts: list[tuple[Path, dict[str, Any]]] = [
        (data / "ml" / "run", {"manifest": "manifest.parquet"}),  # the root itself
        (data / "ml" / "run", {"rows": rows}),  # a part of it (minus rows)
        (data / "ml" / "run" / "seg", {"rows": [{**rows[0], "segment_path":
                                                 "c0/0/cycling.parquet"}]}),  # inside
        (data, {"rows": [{**rows[0], "segment_path": "ml/run/seg/c0/0/cycling.parquet"}]}),
        (data / "ml" / "missing", {"manifest": "manifest.parquet"}),  # exists or not
    ]
    for root, body in attempts:
        resp = _register(client, lab, "lab-loot", root, **body)
        error = assert_error(resp, 403, "forbidden")
        assert "ml-run" not in resp.text
        assert "ml-*" not in resp.text
        assert "voltage" not in resp.text
        answers.append(error["message"].replace(root.as_uri(), "ROOT"))
    assert len(set(answers)) == 1
    assert table_counts(database_url) == before
    # the binding holds for every principal, and several globs may share a root
    assert_error(_register(client, BOOT, "lab-x", data / "ml" / "run"), 403, "forbidden")
    assert _register(client, BOOT, "team-run", data / "ml" / "run").status_code == 409
    # the bound root still takes its own datasets, and unbound roots any name
    write_small_dataset(data / "lab" / "a")
    assert _register(client, lab, "lab-a", data / "lab" / "a").status_code == 201
    write_small_dataset(data / "shared" / "s")
    assert _register(client, lab, "lab-shared", data / "shared" / "s").status_code == 201


def test_a_conflict_names_no_dataset_the_caller_cannot_see(bound) -> None:
    client, data, lab = bound
    write_small_dataset(data / "shared" / "x")
    held = _register(client, BOOT, "other-secret", data / "shared" / "x")
    assert held.status_code == 201, held.text
    version_id = held.json()["id"]
    resp = _register(client, lab, "lab-copy", data / "shared" / "x")
    error = assert_error(resp, 409, "conflict")
    assert "other-secret" not in resp.text
    assert version_id not in resp.text
    assert "outside your scope" in error["message"]
    # whoever sees the holder is told who holds it
    seen = assert_error(_register(client, BOOT, "copy", data / "shared" / "x"), 409,
                        "conflict")
    assert seen["details"] == {"version_id": version_id, "dataset": "other-secret"}
    write_small_dataset(data / "shared" / "y", n_cells=1)
    first = _register(client, lab, "lab-first", data / "shared" / "y")
    assert first.status_code == 201, first.text
    again = assert_error(_register(client, lab, "lab-second", data / "shared" / "y"), 409,
                         "conflict")
    assert again["details"] == {"version_id": first.json()["id"], "dataset": "lab-first"}


def test_root_scopes_are_read_from_the_environment_and_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WINDPIPE_ROOT_SCOPES", "lab-*=/data/lab, ml-*=s3://bucket/ml")
    settings = Settings()
    assert settings.root_scopes == ("lab-*=/data/lab", "ml-*=s3://bucket/ml")
    for bad in ("lab-*", "=/data", "lab-*=relative/dir"):
        with pytest.raises(ValueError, match="root scope"):
            Settings(root_scopes=(bad,))
