"""The bodies read by their routes off the event loop (a registration's, a split's
statistics request), over real HTTP.

* Their validation (and a registration's request key) runs in a worker thread: while
  the validation of one request is held, ``/healthz`` answers.
* Every answer is the one FastAPI gave when it read the body itself: bad JSON, an empty
  body, a content type that is not JSON, bytes that are no text, a bad path and a bad
  body together, bad JSON before the token check, a bad body after it.
* ``/openapi.json`` describes the bodies as for declared ones.
* The chunked request key and key payload equal the one-call encodings, and the exact
  count of a body's objects, a slice at a time, equals one pass over it.
* Once the servers' imports are warmed, the first thread hop imports nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from tests.catalog.api_support import assert_error
from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.api.app import create_app
from windpipe.catalog.api.manifest_body import json_objects
from windpipe.catalog.api.routes import datasets
from windpipe.catalog.api.routes.datasets import key_payload
from windpipe.catalog.api.schemas import RegisterVersionIn
from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.jobs import request_key
from windpipe.services.contract import text
from windpipe.services.contract.identity import canonical_json
from windpipe.services.contract.stats import StatsRequest
from windpipe.services.settings import Settings

_HELD = "held-until-healthz-answers"
_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"


@pytest.fixture
def catalog(sqlite_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


@pytest.mark.parametrize(("path", "kind"), [
    ("/v1/datasets/held/versions", "invalid_manifest"),  # its rows name a missing file
    ("/v1/splits/s-none/stats", "not_found"),
])
def test_the_body_is_validated_and_keyed_off_the_event_loop(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, kind: str,
) -> None:
    entered, release = threading.Event(), threading.Event()
    threads: dict[str, int] = {}
    check, key = text.text_problem, datasets.request_key

    def held_check(value: str) -> str | None:
        if value == _HELD:
            threads["validation"] = threading.get_ident()
            entered.set()
            release.wait(60)
        return check(value)

    def recorded_key(dataset: str, body: dict[str, Any]) -> str:
        threads["key"] = threading.get_ident()
        return key(dataset, body)

    monkeypatch.setattr(text, "text_problem", held_check)
    monkeypatch.setattr(datasets, "request_key", recorded_key)
    server = start_catalog_server(Settings(
        database_url=sqlite_url, data_dir=tmp_path / "c", log_level="ERROR",
        host="127.0.0.1"), port=0)
    body = {"columns": [_HELD]} if "stats" in path else {
        "root": tmp_path.resolve().as_uri(), "rows": [
            {"set_id": _HELD, "cell_id": "c", "cidx": 0, "protocol": "cycling",
             "segment_path": "missing.parquet"}]}
    try:
        with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url,
                                                         timeout=60) as client:
            posted = pool.submit(client.post, path, json=body)
            try:
                assert entered.wait(60), "the body's validation never ran"
                health = httpx.get(f"{server.url}/healthz", timeout=15)
            finally:
                release.set()
            answer = posted.result(timeout=120)
    finally:
        release.set()
        server.stop(grace_s=15)
    assert health.status_code == 200, health.text
    assert_error(answer, 404 if kind == "not_found" else 422, kind)
    assert server.thread.ident not in (None, *threads.values())
    assert set(threads) == ({"validation"} if "stats" in path else {"validation", "key"})


_JSON = {"content-type": "application/json"}


def _errors(answer: httpx.Response) -> list[dict[str, Any]]:
    return assert_error(answer, 422, "invalid_request")["details"]["errors"]  # type: ignore[no-any-return]


def test_the_answers_are_fastapis(catalog: httpx.Client, tmp_path: Path) -> None:
    def post(content: bytes, headers: dict[str, str], name: str = "d") -> httpx.Response:
        return catalog.post(f"/v1/datasets/{name}/versions", content=content, headers=headers)

    assert _errors(post(b"", _JSON)) == [
        {"loc": ["body"], "msg": "Field required", "type": "missing"}]
    assert _errors(post(b"{", _JSON)) == [
        {"ctx": {"error": "Expecting property name enclosed in double quotes"},
         "loc": ["body", 1], "msg": "JSON decode error", "type": "json_invalid"}]
    invalid = post(b'{"root": "x"} x', _JSON)
    assert assert_error(invalid, 422, "invalid_request")["message"] == (
        "body.14: JSON decode error")
    assert _errors(invalid)[0]["ctx"] == {"error": "Extra data"}
    rows = json.dumps({"root": "x", "rows": []}).encode()
    attributes = [{"loc": ["body"], "type": "model_attributes_type",
                   "msg": "Input should be a valid dictionary or object to extract fields from"}]
    assert _errors(post(rows, {"content-type": "text/plain"})) == attributes
    assert _errors(post(rows, {})) == attributes
    unreadable = post(b'{"root": "\xff"}', _JSON)
    assert assert_error(unreadable, 400, "invalid_request")["message"] == (
        "There was an error parsing the body")
    assert _errors(post(b'{"root": 1, "rows": []}', _JSON, name="-bad")) == [
        {"ctx": {"pattern": _PATTERN}, "loc": ["path", "name"],
         "msg": f"String should match pattern '{_PATTERN}'", "type": "string_pattern_mismatch"},
        {"loc": ["body", "root"], "msg": "Input should be a valid string",
         "type": "string_type"}]
    assert _errors(post(b"{", _JSON, name="-bad"))[0]["type"] == "json_invalid"
    assert _errors(post(b'{"root": "x", "rows": [], "zzz": 1}', _JSON)) == [
        {"loc": ["body", "zzz"], "msg": "Extra inputs are not permitted",
         "type": "extra_forbidden"}]
    missing = json.dumps({"root": tmp_path.resolve().as_uri(), "rows": [
        {"set_id": "s", "cell_id": "c", "cidx": 0, "protocol": "cycling",
         "segment_path": "missing.parquet"}]}).encode()
    for content_type in ("application/json; charset=utf-8", "application/vnd.windpipe+json"):
        assert_error(post(missing, {"content-type": content_type}), 422, "invalid_manifest")

    def stats(content: bytes, headers: dict[str, str]) -> httpx.Response:
        return catalog.post("/v1/splits/s-none/stats", content=content, headers=headers)

    assert _errors(stats(b"", _JSON)) == [
        {"loc": ["body"], "msg": "Field required", "type": "missing"}]
    assert _errors(stats(b"{", _JSON))[0]["loc"] == ["body", 1]
    assert _errors(stats(b'{"side": "train"}', {})) == attributes
    assert _errors(stats(b'{"side": "x"}', _JSON)) == [
        {"ctx": {"expected": "'train' or 'val'"}, "loc": ["body", "side"],
         "msg": "Input should be 'train' or 'val'", "type": "literal_error"}]
    assert_error(stats(b'{"side": "val"}', {"content-type": "application/problem+json"}),
                 404, "not_found")


def test_bad_json_is_refused_before_the_token_and_a_bad_body_after_it(
    sqlite_url: str, tmp_path: Path,
) -> None:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path, log_level="ERROR",
                        admin_token=SecretStr("s3cret"))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as c:
        path = "/v1/datasets/d/versions"
        assert _errors(c.post(path, content=b"{", headers=_JSON))[0]["type"] == "json_invalid"
        assert_error(c.post(path, json={"root": 1}), 401, "unauthenticated")
        authed = c.post(path, json={"root": 1}, headers={"authorization": "Bearer s3cret"})
        assert [e["loc"] for e in _errors(authed)] == [["body", "root"]]


def test_the_openapi_document_describes_the_bodies_as_declared(tmp_path: Path) -> None:
    declared = FastAPI()

    @declared.post("/v1/datasets/{name}/versions")
    def register_version(name: str, body: RegisterVersionIn) -> None:
        del name, body

    @declared.post("/v1/splits/{split_id}/stats")
    def compute_split_stats(split_id: str, body: StatsRequest) -> None:
        del split_id, body

    want = declared.openapi()
    spec = create_app(Settings(data_dir=tmp_path)).openapi()
    for path, model in (("/v1/datasets/{name}/versions", "RegisterVersionIn"),
                        ("/v1/splits/{split_id}/stats", "StatsRequest")):
        body = spec["paths"][path]["post"]["requestBody"]
        assert body == want["paths"][path]["post"]["requestBody"]
        assert body["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{model}"}
        assert spec["components"]["schemas"][model] == want["components"]["schemas"][model]
    names = list(spec["components"]["schemas"])
    assert names == sorted(names)


def _row(i: int) -> dict[str, Any]:
    return {"set_id": "s", "cell_id": f"c{i % 7}", "cidx": i, "protocol": "cycling",
            "segment_path": f"seg/{i}.parquet", "note": None if i % 3 else "é",
            "nested": {"a": [None, 1.0, i / 3]}, "x": math.nan if i == 5 else 2.0}


@pytest.mark.parametrize("n", [0, 1, 2048, 5000])
def test_the_key_payload_and_the_request_key_are_the_one_call_encodings(n: int) -> None:
    inline = RegisterVersionIn.model_validate({"root": "file:///r", "rows": [
        _row(i) for i in range(n)], "description": "d"})
    pattern = RegisterVersionIn.model_validate({
        "root": "file:///r", "pattern": "{cell_id}.parquet",
        "metadata_rows": [_row(i) for i in range(n)], "exclude": ["a/*"]})
    for body in (inline, pattern):
        payload = key_payload(body)
        assert payload == body.model_dump(mode="json", exclude_none=True,
                                          exclude_defaults=True)
        assert request_key("ds", payload) == hashlib.sha256(
            canonical_json(["ds", payload])).hexdigest()
    odd = {"b": (1.0, 2.5), 3: ["x"] * n, "a": {"k": [1, 2.0]}, "e": [], "ü": "ß"}
    assert request_key("d", odd) == hashlib.sha256(canonical_json(["d", odd])).hexdigest()


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


@pytest.mark.parametrize("seed", range(4))
def test_the_exact_object_count_equals_one_pass_over_the_body(seed: int) -> None:
    rng = random.Random(seed)
    parts = [rng.choice([b"{", b"}", b'"', b"\\", b"a" * rng.randrange(1, 200), b',"x{\\"{"'])
             for _ in range(60_000)]
    long_string = b'"' + b"{\\\"" * 400_000 + b'"'  # 1.6 MiB, across a slice boundary
    for body in (b"".join(parts), b"".join([*parts[:30_000], long_string, *parts[30_000:]]),
                 b'{"a": "{"} "{{{' + b"{" * 10, b""):
        assert json_objects(body) == _STRING.sub(b"", body).count(b"{")


def test_after_warming_the_first_thread_hop_imports_nothing() -> None:
    code = textwrap.dedent("""
        import asyncio, sys
        import anyio.to_thread
        from windpipe.services.runtime import warm_imports
        warm_imports()
        before = set(sys.modules)
        asyncio.run(anyio.to_thread.run_sync(len, ()))
        print(sorted(set(sys.modules) - before))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "[]"
