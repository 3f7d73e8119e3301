"""A registration by pattern that leaves files out: ``exclude`` globs (windpipe/catalog/pattern.py,
windpipe/catalog/pattern_syntax.py) and ``on_bad_file="skip"`` (windpipe/catalog/bad_files.py),
over a real
catalog server on SQLite and PostgreSQL, with real parquet files: one truncated, one
lacking a column its sibling part has. What is skipped is listed with its reason and
nothing of it is stored; the same files kept give the same version however they were
chosen; the profile is that of the files kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.pattern import PatternSource, manifest_from_pattern
from windpipe.catalog.pattern_syntax import MAX_EXCLUDE_GLOBS, MAX_GLOB_CHARS, compile_excludes
from windpipe.catalog.profile import profile_version
from windpipe.catalog.registration import prepare_version
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.settings import Settings
from windpipe.services.storage.store import Storage

PATTERN = "{cell_id}/{protocol}/cycle_{cidx}.parquet"
PARTS = "{cell_id}/cycle_{cidx}_part{_part:int}.parquet"
ROWS = 30
COLUMNS = ("time_s", "current_a", "voltage_v")


def _segment(path: Path, *, seed: int = 0, columns: tuple[str, ...] = COLUMNS) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {"time_s": np.arange(ROWS, dtype=np.float64),
              "current_a": rng.normal(0, 1, ROWS).astype(np.float32),
              "voltage_v": (3.7 + rng.normal(0, 0.01, ROWS)).astype(np.float32)}
    pl.DataFrame({c: values[c] for c in columns}).write_parquet(path)
    return path


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _plain(root: Path) -> str:
    """c1 and c2, cycles 0-2; c1's cycle 1 truncated (returned)."""
    for i, cell in enumerate(("c1", "c2")):
        for cidx in (0, 1, 2):
            _segment(root / cell / "cycling" / f"cycle_{cidx}.parquet", seed=10 * i + cidx)
    _truncate(root / "c1" / "cycling" / "cycle_1.parquet")
    return "c1/cycling/cycle_1.parquet"


def _parts(root: Path) -> None:
    """Two parts per identity: c1 cycle 1's part 1 lacks voltage_v, c2 cycle 0's part 0
    is truncated; c1 cycle 0 and c2 cycle 1 are whole."""
    for i, cell in enumerate(("c1", "c2")):
        for cidx in (0, 1):
            for part in (0, 1):
                lacking = (cell, cidx, part) == ("c1", 1, 1)
                _segment(root / cell / f"cycle_{cidx}_part{part}.parquet",
                         seed=100 * i + 10 * cidx + part,
                         columns=COLUMNS[:2] if lacking else COLUMNS)
    _truncate(root / "c2" / "cycle_0_part0.parquet")


def _register(client: httpx.Client, name: str, root: Path, **body: Any) -> httpx.Response:
    return client.post(f"/v1/datasets/{name}/versions",
                       json={"root": root.as_uri(), "pattern": PATTERN, **body})


def _paths(client: httpx.Client, version_id: str) -> list[str]:
    items = client.get(f"/v1/versions/{version_id}/segments").json()["items"]
    return sorted(s["path"] for s in items)


def _packed(state: Path, version_id: str) -> set[str] | None:
    index = state / "packs" / version_id / "index.arrow"
    if not index.exists():
        return None
    return set(pa.ipc.open_file(pa.memory_map(str(index))).read_all().column("path")
               .to_pylist())


def _profile_rows(answer: dict[str, Any], column: str) -> int:
    return sum(c["rows"] for c in answer["profile"]["columns"] if c["column"] == column)


def test_stop_refuses_skip_registers_the_rest_and_exclude_leaves_out(
        catalog_server: str, tmp_path: Path) -> None:
    root = tmp_path / "data"
    bad = _plain(root)
    with httpx.Client(base_url=catalog_server, timeout=120) as client:
        for body in ({}, {"on_bad_file": "stop"}):
            refused = _register(client, "lab", root, **body)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["type"] == "invalid_manifest"
            assert [p["segment_path"] for p in error["details"]["problems"]] == [bad]
            assert "is not a parquet file" in error["message"]
        assert client.get("/v1/datasets/lab").status_code == 404  # nothing stored

        answer = _register(client, "lab", root, on_bad_file="skip")
        assert answer.status_code == 201, answer.text
        version = answer.json()
        assert (version["n_segments"], version["skipped_count"]) == (5, 1)
        [skipped] = version["skipped"]
        assert skipped["path"] == bad
        assert "is not a parquet file" in skipped["reason"]
        [warning] = [w for w in version["warnings"] if w["type"] == "skipped_files"]
        assert warning["count"] == 1
        assert bad in warning["message"]
        kept = [f"{c}/cycling/cycle_{k}.parquet" for c in ("c1", "c2") for k in (0, 1, 2)
                if f"{c}/cycling/cycle_{k}.parquet" != bad]
        assert _paths(client, version["id"]) == kept
        assert _packed(tmp_path / "catalog", version["id"]) == set(kept)
        assert _profile_rows(version, "voltage_v") == 5 * ROWS  # the files kept only
        # the list is the registration's answer: the stored version has none
        assert client.get(f"/v1/versions/{version['id']}").json()["skipped"] == []

        # the same segments chosen by exclude: the same version, nothing skipped
        same = _register(client, "lab", root, exclude=[bad])
        assert same.status_code == 200, same.text
        assert same.json()["id"] == version["id"]
        assert (same.json()["skipped"], same.json()["skipped_count"]) == ([], 0)

        # a folder excluded is not listed; a glob's '*' crosses '/'
        for globs, want in ((["c1"], 3), (["*/cycle_1.parquet"], 4),
                            (["c1/*", "c2/cycling/cycle_[02].parquet"], 1)):
            other = _register(client, "lab", root, exclude=globs)
            assert other.status_code == 201, (globs, other.text)
            paths = _paths(client, other.json()["id"])
            assert len(paths) == want, (globs, paths)
            assert bad not in paths


def test_skip_leaves_out_the_whole_identity_of_a_bad_part(
        catalog_server: str, tmp_path: Path) -> None:
    root = tmp_path / "parts"
    _parts(root)
    with httpx.Client(base_url=catalog_server, timeout=120) as client:
        refused = _register(client, "parts", root, pattern=PARTS)
        assert refused.status_code == 422, refused.text
        problems = refused.json()["error"]["details"]["problems"]
        assert {p["segment_path"]: p["problem"] for p in problems}.keys() == {
            "c1/cycle_1_part1.parquet", "c2/cycle_0_part0.parquet"}

        answer = _register(client, "parts", root, pattern=PARTS, on_bad_file="skip")
        assert answer.status_code == 201, answer.text
        version = answer.json()
        assert (version["n_manifest_rows"], version["n_segments"]) == (2, 4)
        reasons = {f["path"]: f["reason"] for f in version["skipped"]}
        assert list(reasons) == ["c1/cycle_1_part0.parquet", "c1/cycle_1_part1.parquet",
                                 "c2/cycle_0_part0.parquet", "c2/cycle_0_part1.parquet"]
        assert version["skipped_count"] == 4
        assert "left out with 'c1/cycle_1_part1.parquet'" in reasons["c1/cycle_1_part0.parquet"]
        assert "missing columns ['voltage_v']" in reasons["c1/cycle_1_part1.parquet"]
        assert "is not a parquet file" in reasons["c2/cycle_0_part0.parquet"]
        assert "left out with 'c2/cycle_0_part0.parquet'" in reasons["c2/cycle_0_part1.parquet"]
        assert _paths(client, version["id"]) == [
            "c1/cycle_0_part0.parquet", "c1/cycle_0_part1.parquet",
            "c2/cycle_1_part0.parquet", "c2/cycle_1_part1.parquet"]
        index = client.get(f"/v1/versions/{version['id']}/index").json()["items"]
        assert sorted((r["cell_id"], r["cidx"], r["row_count"]) for r in index) == [
            ("c1", 0, 2 * ROWS), ("c2", 1, 2 * ROWS)]
        # a skipped file was read (its sibling was not): its rows are in no pack
        assert _packed(tmp_path / "catalog", version["id"]) is None
        assert _profile_rows(version, "voltage_v") == 4 * ROWS
        assert _profile_rows(version, "current_a") == 4 * ROWS


def test_every_file_skipped_is_refused_and_nothing_stored(
        catalog_server: str, tmp_path: Path) -> None:
    root = tmp_path / "broken"
    _plain(root)
    for path in root.rglob("*.parquet"):
        _truncate(path)
    with httpx.Client(base_url=catalog_server, timeout=120) as client:
        refused = _register(client, "broken", root, on_bad_file="skip")
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "invalid_manifest"
        assert "every file was skipped (6" in error["message"]
        assert error["details"]["problem_count"] == 6
        assert len(error["details"]["problems"]) == 6
        assert client.get("/v1/datasets/broken").status_code == 404


def _settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'catalog.db'}",
                    data_dir=tmp_path / "state", log_level="WARNING")


@pytest.mark.parametrize(("body", "names"), [
    ({"exclude": ["../elsewhere/*"]}, "'../elsewhere/*'"),
    ({"exclude": ["c1/../../x.parquet"]}, "'c1/../../x.parquet'"),
    ({"exclude": ["/data/*"]}, "'/data/*'"),
    ({"exclude": ["s3://bucket/*"]}, "'s3://bucket/*'"),
    ({"exclude": ["ok/*", ""]}, "exclude"),
    ({"exclude": ["*"] * (MAX_EXCLUDE_GLOBS + 1)}, str(MAX_EXCLUDE_GLOBS)),
    ({"exclude": ["a" * (MAX_GLOB_CHARS + 1)]}, str(MAX_GLOB_CHARS)),
    ({"exclude": "c1/*"}, "exclude"),
    ({"on_bad_file": "maybe"}, "on_bad_file"),
    ({"pattern": None, "manifest": "m.parquet", "exclude": ["x"]}, "'exclude'"),
    ({"pattern": None, "rows": [], "on_bad_file": "skip"}, "'on_bad_file'"),
])
def test_a_bad_exclude_or_on_bad_file_is_a_422_naming_it(
        tmp_path: Path, body: dict[str, Any], names: str) -> None:
    root = tmp_path / "data"
    _plain(root)
    with run_catalog_server(_settings(tmp_path)) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        sent = {k: v for k, v in body.items() if v is not None}
        if body.get("pattern", PATTERN) is None:
            sent = {"root": root.as_uri(), **sent}
            answer = client.post("/v1/datasets/lab/versions", json=sent)
        else:
            answer = _register(client, "lab", root, **sent)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request"
        assert names in error["message"], error["message"]
        assert client.get("/v1/datasets/lab").status_code == 404


def test_the_openapi_document_types_the_new_fields(tmp_path: Path) -> None:
    with run_catalog_server(_settings(tmp_path)) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    skipped = schemas["VersionOut"]["properties"]["skipped"]
    assert skipped["items"] == {"$ref": "#/components/schemas/SkippedFileOut"}
    assert "on_bad_file" in skipped["description"]
    assert schemas["SkippedFileOut"]["required"] == ["path", "reason"]
    assert schemas["VersionOut"]["properties"]["skipped_count"]["type"] == "integer"
    body = schemas["RegisterVersionIn"]["properties"]
    assert body["on_bad_file"]["enum"] == ["stop", "skip"]
    assert body["on_bad_file"]["default"] == "stop"
    globs = next(s for s in body["exclude"]["anyOf"] if s.get("type") == "array")
    assert (globs["maxItems"], globs["items"]["maxLength"]) == (MAX_EXCLUDE_GLOBS,
                                                                MAX_GLOB_CHARS)


def test_exclude_globs_match_whole_relative_paths() -> None:
    excluded = compile_excludes(["c1", "*/cycle_1.parquet", "raw/c[23]/*.pq"])
    assert excluded("c1")
    assert not excluded("c1/cycling/cycle_0.parquet")  # the folder's name, not below it
    assert excluded("c2/cycling/cycle_1.parquet")  # '*' crosses '/'
    assert excluded("cycle_1.parquet") is False  # the '/' is literal
    assert excluded("raw/c3/x.pq")
    assert not excluded("raw/c4/x.pq")
    assert not excluded("c2/cycling/Cycle_1.parquet")  # case matters
    assert not compile_excludes([])("anything")
    with pytest.raises(WindpipeError, match=r"exclude glob '\.\./x'"):
        compile_excludes(["../x"])


def _kept_and_skipped(root: Path, pattern: str, bad: list[str]) -> tuple[Any, Any]:
    storage = Storage.from_uri(str(root))
    every = manifest_from_pattern(storage, PatternSource(pattern), dataset="lab")
    skipped = prepare_version(storage, every, on_bad_file="skip")
    chosen = manifest_from_pattern(storage, PatternSource(pattern, exclude=tuple(bad)),
                                   dataset="lab")
    return skipped, prepare_version(storage, chosen)


def test_the_profile_of_a_skipping_registration_is_that_of_the_files_kept(
        tmp_path: Path) -> None:
    root = tmp_path / "data"
    # the bad file comes first: every index the checks counted by must move
    _segment(root / "a0" / "cycling" / "cycle_0.parquet")
    _truncate(root / "a0" / "cycling" / "cycle_0.parquet")
    rng = np.random.default_rng(4)
    for cell in ("b1", "b2"):
        for cidx in (0, 1):
            time = np.arange(ROWS, dtype=np.float64)
            if cidx:
                time[10:] += 500.0  # a gap: irregular sampling, listed by index
            current = rng.normal(0, 1, ROWS)
            current[rng.random(ROWS) < 0.2] = np.nan
            count = pa.array(rng.integers(0, 9, ROWS), mask=rng.random(ROWS) < 0.3)
            if cell == "b2":  # float here, an integer elsewhere: its footer counts move
                count = pa.array(rng.normal(size=ROWS))
            path = root / cell / "cycling" / f"cycle_{cidx}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.from_arrow(pa.table({"time_s": time, "current_a": current,
                                    "count": count})).write_parquet(path)
    skipped, chosen = _kept_and_skipped(root, PATTERN, ["a0/*"])
    assert skipped.skipped.count == 1
    assert skipped.version_id == chosen.version_id
    assert skipped.figures is not None  # renumbered, not dropped
    profile = profile_version(Storage.from_uri(str(root)), skipped)
    assert profile == profile_version(Storage.from_uri(str(root)), chosen)
    assert profile == profile_version(Storage.from_uri(str(root)),
                                      dataclasses.replace(skipped, figures=None))
    assert sum(profile.irregular_segments.values()) == 2


def test_a_skipped_part_that_was_read_drops_the_figures(tmp_path: Path) -> None:
    root = tmp_path / "parts"
    _parts(root)
    skipped, chosen = _kept_and_skipped(root, PARTS, ["c1/cycle_1_*", "c2/cycle_0_*"])
    assert skipped.skipped.read
    assert skipped.figures is None  # they held the rows of a file left out
    assert skipped.version_id == chosen.version_id
    assert skipped.schema == chosen.schema
    storage = Storage.from_uri(str(root))
    assert profile_version(storage, skipped) == profile_version(storage, chosen)
