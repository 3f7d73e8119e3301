"""Registration only from the operator's allowed roots: 403 before anything is read."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.catalog.api_support import assert_error, table_counts, write_small_dataset
from tests.fixtures.servers import free_port, run_catalog_server
from windpipe.services.settings import Settings


def _rows(path: str) -> list[dict]:
    return [{"set_id": "s", "cell_id": "c", "cidx": 0, "protocol": "cycling",
             "segment_path": path}]


@pytest.fixture
def confined(database_url: str, tmp_path: Path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    # A dead S3 endpoint: any attempt to read an s3 root would fail as unavailable.
    settings = Settings(
        database_url=database_url, data_dir=tmp_path / "state", log_level="WARNING",
        allowed_roots=(str(allowed), "s3://lab-bucket/lab"),
        s3_endpoint=f"http://127.0.0.1:{free_port()}", s3_allow_http=True,
    )
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client, allowed


def test_roots_outside_the_list_are_refused_alike(
    confined, tmp_path: Path, database_url: str
) -> None:
    client, allowed = confined
    secret = tmp_path / "private"
    secret.mkdir()
    (secret / "x.parquet").write_bytes(b"set_id,cell_id\nsecret-value,1\n")
    (allowed / "link").symlink_to(secret, target_is_directory=True)
    answers = []
    for root in ("file:///", secret.as_uri(), (tmp_path / "missing").as_uri(),
                 (allowed / "link").as_uri(), "/etc", "s3://other-bucket/x",
                 "s3://lab-bucket/lab-other", "s3://lab-bucket/lab/../x"):
        for body in ({"root": root, "rows": _rows("x.parquet")},
                     {"root": root, "manifest": "etc/shadow"}):
            resp = client.post("/v1/datasets/loot/versions", json=body)
            error = assert_error(resp, 403, "forbidden")
            assert "secret-value" not in resp.text
            assert str(allowed) not in resp.text.replace(root, "")
            assert error["details"] == {"root": root}
            answers.append(error["message"].replace(root, "ROOT"))
    assert len(set(answers)) == 1  # no hint of what exists
    counts = table_counts(database_url)
    assert counts["datasets"] == counts["versions"] == counts["segments"] == 0
    assert client.get("/v1/datasets").json()["items"] == []


def test_allowed_roots_still_register(confined) -> None:
    client, allowed = confined
    write_small_dataset(allowed / "ds")
    ok = client.post("/v1/datasets/lab/versions",
                     json={"root": (allowed / "ds").as_uri(), "manifest": "manifest.parquet"})
    assert ok.status_code == 201, ok.text


def test_segment_symlink_escaping_an_allowed_root(confined, tmp_path: Path) -> None:
    client, allowed = confined
    root = write_small_dataset(allowed / "ds").parent
    outside = tmp_path / "elsewhere-secret"
    outside.mkdir()
    (outside / "seg.parquet").write_bytes(b"x")
    (root / "esc.parquet").symlink_to(outside / "seg.parquet")
    resp = client.post("/v1/datasets/lab/versions",
                       json={"root": root.as_uri(), "rows": _rows("esc.parquet")})
    assert_error(resp, 422, "invalid_manifest")
    assert "elsewhere-secret" not in resp.text
