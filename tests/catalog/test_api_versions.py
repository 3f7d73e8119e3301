"""Registration and version reads over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pyarrow as pa
import pytest

from tests.catalog.api_support import assert_error, get_all, table_counts, write_small_dataset
from tests.fixtures.data import write_manifest
from windpipe.catalog import repository
from windpipe.catalog.index import build_index
from windpipe.catalog.manifest import load_manifest
from windpipe.catalog.registration import prepare_version
from windpipe.services.storage.store import Storage
from windpipe.services.synth import SynthResult


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


def _register(client: httpx.Client, name: str, body: dict) -> httpx.Response:
    return client.post(f"/v1/datasets/{name}/versions", json=body)


def test_register_read_and_idempotency(
    client: httpx.Client, synth_dataset: SynthResult, database_url: str
) -> None:
    root = synth_dataset.path.as_uri()
    first = _register(client, "synth", {"root": root, "manifest": "manifest.parquet",
                                        "description": "synthetic"})
    assert first.status_code == 201, first.text
    version = first.json()
    assert version["id"].startswith("v-")
    assert version["dataset"] == "synth"
    assert version["created_at"].endswith(("Z", "+00:00"))
    assert version["n_segments"] == synth_dataset.n_segments
    assert version["n_rows"] == synth_dataset.n_rows
    assert set(version["schema"]) == {"cycling", "hppc", "eis"}
    assert {c["name"] for c in version["metadata_columns"]} == {
        "chemistry", "nominal_capacity_ah", "ambient_temp_c"
    }

    again = _register(client, "synth", {"root": root, "manifest": "manifest.parquet"})
    assert again.status_code == 200
    assert again.json()["id"] == version["id"]
    counts = table_counts(database_url)
    assert counts["versions"] == 1
    assert counts["segments"] == synth_dataset.n_segments

    # The same content under another dataset is a conflict, not a second copy.
    assert_error(_register(client, "other", {"root": root, "manifest": "manifest.parquet"}),
                 409, "conflict")

    got = client.get(f"/v1/versions/{version['id']}")
    assert got.status_code == 200
    assert got.json() == {**version, "warnings": []}  # warnings: the registration's answer
    assert version["profile"] is not None
    assert client.get("/v1/datasets/synth").json()["name"] == "synth"

    # The stored index equals the one built straight from the data.
    storage = Storage.from_uri(root)
    prepared = prepare_version(storage, load_manifest(storage, "manifest.parquet"))
    expected = build_index(prepared.manifest_rows, prepared.segments)
    arrow = client.get(f"/v1/versions/{version['id']}/index", params={"format": "arrow"})
    assert arrow.status_code == 200
    assert arrow.headers["content-type"] == "application/vnd.apache.arrow.stream"
    frame = pl.from_arrow(pa.ipc.open_stream(io.BytesIO(arrow.content)).read_all())
    assert isinstance(frame, pl.DataFrame)
    assert frame.equals(expected)
    rows = get_all(client, f"/v1/versions/{version['id']}/index", page_size=7)
    assert rows == expected.to_dicts()

    segments = get_all(client, f"/v1/versions/{version['id']}/segments", page_size=10)
    assert len(segments) == synth_dataset.n_segments
    keys = [(s["manifest_row_id"], s["ordinal"]) for s in segments]
    assert keys == sorted(keys)
    stored = {(s["manifest_row_id"], s["ordinal"]): s for s in segments}
    for seg in prepared.segments.iter_rows(named=True):
        s = stored[(seg["manifest_row_id"], seg["ordinal"])]
        assert (s["path"], s["row_count"], s["chunk_rows"], s["fingerprint"]) == (
            seg["path"], seg["row_count"], seg["chunk_rows"], seg["fingerprint"]
        )


def test_list_pagination(client: httpx.Client, tmp_path: Path) -> None:
    manifest = pl.read_parquet(write_small_dataset(tmp_path))
    ids = []
    for k in range(1, 6):  # five different contents: the first k manifest rows
        body = {"root": tmp_path.as_uri(), "rows": manifest.head(k).to_dicts()}
        response = _register(client, "small", body)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    assert len(set(ids)) == 5
    first = client.get("/v1/datasets/small/versions", params={"page_size": 2}).json()
    assert [v["id"] for v in first["items"]] == ids[:2]
    assert first["next_page_token"]
    listed = get_all(client, "/v1/datasets/small/versions", page_size=2)
    assert [v["id"] for v in listed] == ids
    last = client.get("/v1/datasets/small/versions", params={"page_size": 5}).json()
    assert last["next_page_token"] is None

    for offset, name in enumerate(("b-set", "a-set", "c-set"), start=5):
        body = {"root": tmp_path.as_uri(), "rows": manifest.slice(offset, 1).to_dicts()}
        assert _register(client, name, body).status_code == 201
    names = [d["name"] for d in get_all(client, "/v1/datasets", page_size=1)]
    assert names == ["a-set", "b-set", "c-set", "small"]
    assert_error(client.get("/v1/datasets", params={"page_token": "!!not-a-token"}),
                 422, "invalid_request")
    assert_error(client.get("/v1/datasets", params={"page_size": 0}), 422, "invalid_request")


def _bad_roots(tmp_path: Path) -> list[tuple[str, dict, int]]:
    """(case, register body, manifest row the error must name)."""
    root = tmp_path / "data"
    manifest = pl.read_parquet(write_small_dataset(root))
    rows = manifest.to_dicts()
    cases: list[tuple[str, dict, int]] = []

    missing = [dict(r) for r in rows]
    missing[3]["segment_path"] = "seg/nope.parquet"
    cases.append(("missing segment", {"rows": missing}, 3))

    escape = [dict(r) for r in rows]
    escape[2]["segment_path"] = "../outside.parquet"
    cases.append(("path escape", {"rows": escape}, 2))

    twice = [dict(r) for r in rows]
    twice[4]["segment_path"] = twice[1]["segment_path"]
    cases.append(("segment listed twice", {"rows": twice}, 4))

    wrong_count = [dict(r, row_count=None) for r in rows]
    wrong_count[5]["row_count"] = 999
    cases.append(("row count mismatch", {"rows": wrong_count}, 5))

    protocol = [dict(r) for r in rows]
    protocol[6]["protocol"] = "Cycling"
    cases.append(("bad protocol", {"rows": protocol}, 6))

    corrupt = root / "seg" / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet")
    broken = [dict(r) for r in rows]
    broken[1]["segment_path"] = "seg/corrupt.parquet"
    cases.append(("corrupt segment", {"rows": broken}, 1))

    write_manifest(root, missing, name="bad_manifest.parquet")
    cases.append(("manifest file", {"manifest": "bad_manifest.parquet"}, 3))
    return [(case, {"root": root.as_uri(), **body}, row) for case, body, row in cases]


def test_bad_manifests_are_422_and_store_nothing(
    client: httpx.Client, tmp_path: Path, database_url: str
) -> None:
    for case, body, row in _bad_roots(tmp_path):
        error = assert_error(_register(client, "bad", body), 422, "invalid_manifest")
        problems = error["details"]["problems"]
        assert any(p["row"] == row for p in problems), (case, problems)
        assert f"row {row}" in error["message"], (case, error["message"])
    assert set(table_counts(database_url).values()) == {0}
    assert_error(client.get("/v1/datasets/bad"), 404, "not_found")


def test_bad_requests(client: httpx.Client, tmp_path: Path, database_url: str) -> None:
    root = tmp_path.as_uri()
    write_small_dataset(tmp_path)
    assert_error(_register(client, "x", {"root": root}), 422, "invalid_request")
    assert_error(_register(client, "x", {"root": root, "manifest": "manifest.parquet",
                                         "rows": []}), 422, "invalid_request")
    assert_error(_register(client, "x", {"root": "ftp://host/x", "manifest": "m.parquet"}),
                 422, "invalid_request")
    assert_error(_register(client, "x", {"root": (tmp_path / "nope").as_uri(),
                                         "manifest": "m.parquet"}), 422, "invalid_request")
    assert_error(_register(client, "bad name!", {"root": root, "manifest": "manifest.parquet"}),
                 422, "invalid_request")
    assert_error(_register(client, "x", {"root": root, "manifest": "missing.parquet"}),
                 422, "invalid_manifest")
    malformed = client.post("/v1/datasets/x/versions", content=b"{not json",
                            headers={"content-type": "application/json"})
    assert_error(malformed, 422, "invalid_request")
    assert set(table_counts(database_url).values()) == {0}


def test_not_found_and_method_envelopes(client: httpx.Client) -> None:
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(client.get("/v1/versions/v-unknown"), 404, "not_found")
    assert_error(client.get("/v1/versions/v-unknown/index"), 404, "not_found")
    assert_error(client.get("/v1/versions/v-unknown/segments"), 404, "not_found")
    assert_error(client.get("/v1/datasets/unknown"), 404, "not_found")
    assert_error(client.get("/v1/datasets/unknown/versions"), 404, "not_found")
    assert_error(client.get("/v1/splits/s-unknown"), 404, "not_found")
    assert_error(client.get("/v1/plans/p-unknown"), 404, "not_found")
    assert_error(client.delete("/v1/datasets"), 405, "invalid_request")


def test_health_ready_and_config(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}
    config = client.get("/v1/config").json()
    assert config["api_version"] == "v1"
    assert config["limits"]["max_page_size"] >= config["limits"]["default_page_size"]
    assert set(config["storage_schemes"]) == {"file", "s3"}
    assert config["auth"] == "none"
    spec = client.get("/openapi.json").json()
    operations = {op["operationId"] for ops in spec["paths"].values() for op in ops.values()}
    assert {"register_version", "get_version_index", "create_split", "create_plan",
            "get_plan_schedule", "healthz", "readyz", "get_config"} <= operations


def test_copy_of_root_is_a_new_version(
    client: httpx.Client, synth_dataset: SynthResult, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(synth_dataset.path, copy)
    a = _register(client, "synth", {"root": synth_dataset.path.as_uri(),
                                    "manifest": "manifest.parquet"})
    b = _register(client, "synth", {"root": copy.as_uri(), "manifest": "manifest.parquet"})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_rows_are_stored_a_part_at_a_time_as_prepared(
    client: httpx.Client, synth_dataset: SynthResult, database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Segment and manifest rows go to the database in parts (SQLite: 7 rows of tuples at
    a time, PostgreSQL: 7 rows of CSV), and every part lands, as prepared."""
    monkeypatch.setattr(repository, "_SQLITE_CHUNK", 7)
    monkeypatch.setattr(repository, "_COPY_CHUNK", 7)
    storage = Storage.from_uri(synth_dataset.path.as_uri())
    prepared = prepare_version(storage, load_manifest(storage, "manifest.parquet"))
    answer = _register(client, "parts", {"root": synth_dataset.path.as_uri(),
                                         "manifest": "manifest.parquet"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["id"] == prepared.version_id
    stored = get_all(client, f"/v1/versions/{prepared.version_id}/segments", page_size=50)
    assert prepared.segments.height > 7 * 3
    got = sorted((s["path"], s["row_count"], list(s["chunk_rows"]), s["fingerprint"])
                 for s in stored)
    want = sorted((p, n, list(c), f) for p, n, c, f in prepared.segments.select(
        "path", "row_count", "chunk_rows", "fingerprint").iter_rows())
    assert got == want
    assert table_counts(database_url)["manifest_rows"] == prepared.manifest_rows.height
