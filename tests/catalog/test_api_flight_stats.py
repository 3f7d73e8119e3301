"""``GET /v1/flight/stats`` and ``GET /metrics`` against a real Flight server, on SQLite and
PostgreSQL, with one more configured location where nothing listens."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.flight as fl
import pytest

from catalog.flight_stats import LocationStats, render_metrics
from flight_server.runner import start_flight_server
from services.contract.wire import FlightCommand
from services.settings import Settings
from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.servers import free_ports, run_catalog_server

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (-?[0-9.e+]+|NaN|[+-]Inf)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Deployed:
    client: httpx.Client
    live: str
    dead: str


@pytest.fixture
def deployed(database_url: str, tmp_path: Path) -> Iterator[Deployed]:
    live_port, dead_port = free_ports(2)
    live = f"grpc://127.0.0.1:{live_port}"
    dead = f"grpc://127.0.0.1:{dead_port}"  # bound once, now closed: nothing listens
    settings = Settings(database_url=database_url, data_dir=tmp_path / "catalog",
                        flight_locations=(live, dead), log_level="WARNING")
    with run_catalog_server(settings) as url:
        flight = start_flight_server(settings, port=int(live.rsplit(":", 1)[1]),
                                     cache_bytes=64 << 20)
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                yield Deployed(client=client, live=live, dead=dead)
        finally:
            flight.stop(grace_s=5.0)


def _plan(client: httpx.Client, root: Path) -> str:
    write_small_dataset(root)
    version = client.post("/v1/datasets/d/versions",
                          json={"root": root.as_uri(), "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    split = client.post(f"/v1/versions/{version.json()['id']}/splits",
                        json={"strategy": "sample", "fraction": 0.0})
    assert split.status_code == 201, split.text
    plan = client.post(f"/v1/splits/{split.json()['id']}/plans", json={
        "default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v", "current_a"]}, "targets": {"cycling": ["voltage_v"]},
    })
    assert plan.status_code == 201, plan.text
    return str(plan.json()["id"])


def _stream(location: str, plan_id: str, n_batches: int) -> int:
    """Read up to ``n_batches`` with raw pyarrow.flight; returns how many came."""
    client = fl.connect(location)
    try:
        info = client.get_flight_info(
            fl.FlightDescriptor.for_command(FlightCommand(plan_id).encode())
        )
        got = 0
        for endpoint in info.endpoints:
            reader = client.do_get(endpoint.ticket)
            for _chunk in reader:
                got += 1
                if got == n_batches:
                    return got
        return got
    finally:
        client.close()


def _servers(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get("/v1/flight/stats", params={"timeout_s": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"servers"}
    return {s["location"]: s for s in body["servers"]}


def _settled(client: httpx.Client, location: str) -> dict[str, int]:
    """Stats once read-ahead has finished loading (no load in flight)."""
    deadline = time.monotonic() + 10
    while True:
        stats: dict[str, int] = _servers(client)[location]["stats"]
        if stats["loads_in_flight"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of a Prometheus text page, checking its syntax: TYPE before samples."""
    typed: dict[str, str] = {}
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge"), line
            assert name not in typed, f"family {name} typed twice"
            typed[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, _, labels, value = match.groups()
        assert name in typed, f"sample before its TYPE: {line!r}"
        key = (name, frozenset(_LABEL.findall(labels or "")))
        assert key not in out, f"duplicate sample {line!r}"
        out[key] = float(value)
    return out


def _sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
            **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_flight_stats_and_metrics_follow_the_cache(deployed: Deployed, tmp_path: Path) -> None:
    client, live, dead = deployed.client, deployed.live, deployed.dead
    before = _servers(client)
    assert list(before) == [live, dead]
    assert set(before[dead]) == {"location", "error"}
    assert before[dead]["error"]["type"] == "unavailable"
    assert dead in before[dead]["error"]["message"]
    assert set(before[live]) == {"location", "stats"}
    stats = before[live]["stats"]
    assert stats["misses"] == stats["resident_bytes"] == stats["bytes_read"] == 0
    assert stats["budget_bytes"] == 64 << 20

    plan_id = _plan(client, tmp_path / "data")
    assert _stream(live, plan_id, 3) == 3
    after = _servers(client)[live]["stats"]
    assert after["misses"] > 0
    assert after["resident_bytes"] > 0
    assert after["bytes_read"] > 0
    assert after["loads_in_flight"] >= 0
    assert after["resident_bytes"] <= after["budget_bytes"]

    full = _stream(live, plan_id, 10_000)
    assert full > 3
    settled = _settled(client, live)
    assert _stream(live, plan_id, 10_000) == full  # every chunk is resident: hits only
    again = _settled(client, live)
    assert again["hits"] > settled["hits"]
    assert (again["misses"], again["bytes_read"]) == (settled["misses"], settled["bytes_read"])

    assert_error(client.get("/v1/no/such/route"), 404, "not_found")
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse_metrics(response.text)
    assert _sample(samples, "windpipe_cache_misses_total", location=live) == again["misses"]
    assert _sample(samples, "windpipe_cache_hits_total", location=live) >= again["hits"]
    assert _sample(samples, "windpipe_cache_resident_bytes", location=live) > 0
    assert _sample(samples, "windpipe_cache_storage_bytes_read_total",
                   location=live) == again["bytes_read"]
    for name in ("windpipe_cache_evictions_total", "windpipe_cache_loads_in_flight"):
        assert _sample(samples, name, location=live) >= 0
    assert _sample(samples, "windpipe_flight_up", location=live) == 1
    assert _sample(samples, "windpipe_flight_up", location=dead) == 0
    assert ("windpipe_cache_misses_total", frozenset({("location", dead)})) not in samples
    for kind in ("datasets", "versions", "splits", "plans"):
        assert _sample(samples, f"windpipe_catalog_{kind}") == 1
    assert _sample(samples, "windpipe_catalog_table_rows", table="segments") == 8
    requests = "windpipe_http_requests_total"
    assert _sample(samples, requests, method="POST", route="/v1/splits/{split_id}/plans",
                   status="201") == 1
    assert _sample(samples, requests, method="GET", route="/v1/flight/stats",
                   status="200") >= 4
    assert _sample(samples, requests, method="GET", route="unmatched", status="404") == 1


def test_metrics_need_the_token_when_one_is_set(database_url: str, tmp_path: Path) -> None:
    from pydantic import SecretStr  # noqa: PLC0415

    settings = Settings(database_url=database_url, data_dir=tmp_path, log_level="WARNING",
                        token=SecretStr("t0k"), flight_locations=("grpc://127.0.0.1:1",))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert_error(client.get("/metrics"), 401, "unauthenticated")
        assert_error(client.get("/v1/flight/stats"), 401, "unauthenticated")
        auth = {"authorization": "Bearer t0k"}
        stats = client.get("/v1/flight/stats", headers=auth)
        assert stats.status_code == 200
        assert stats.json()["servers"][0]["error"]["type"] == "unavailable"
        assert client.get("/metrics", headers=auth).status_code == 200


def test_render_metrics_escapes_labels() -> None:
    text = render_metrics(
        table_rows={"datasets": 2}, requests={("GET", '/a"b\\c', 200): 4},
        servers=[LocationStats("grpc://x:1", stats={"hits": 5, "misses": 1}),
                 LocationStats("grpc://y:2", error={"type": "unavailable", "message": "down"})],
    )
    samples = parse_metrics(text)
    assert _sample(samples, "windpipe_catalog_datasets") == 2
    assert _sample(samples, "windpipe_catalog_plans") == 0
    assert _sample(samples, "windpipe_cache_hits_total", location="grpc://x:1") == 5
    assert 'route="/a\\"b\\\\c"' in text
    assert _sample(samples, "windpipe_flight_up", location="grpc://y:2") == 0
