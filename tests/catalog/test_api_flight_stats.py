"""``GET /v1/flight/stats`` and ``GET /metrics`` against a real Flight server, on SQLite and
PostgreSQL, with one more configured location where nothing listens. The page is read
with prometheus_client's own parser."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.flight as fl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.servers import free_ports, run_catalog_server
from windpipe._serving import serve_flight
from windpipe.catalog.api.metrics import HttpMetrics
from windpipe.catalog.flight_stats import LocationStats, render_metrics
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.settings import Settings


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
        flight = serve_flight(settings, port=int(live.rsplit(":", 1)[1]),
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
    """Stats once read-ahead has finished loading (no load in flight; pytest-timeout
    bounds a wait that never ends)."""
    while True:
        stats: dict[str, int] = _servers(client)[location]["stats"]
        if stats["loads_in_flight"] == 0:
            return stats
        time.sleep(0.05)


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of a Prometheus text page by (name, labels), read with prometheus_client's
    parser; every family typed, no sample twice."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    assert text.endswith("\n")
    for family in text_string_to_metric_families(text):
        assert family.type in ("counter", "gauge", "histogram"), family
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate sample {key}"
            out[key] = sample.value
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
    latency = "windpipe_http_request_duration_seconds"
    stats_route = {"method": "GET", "route": "/v1/flight/stats"}
    count = _sample(samples, f"{latency}_count", **stats_route)
    assert count == _sample(samples, requests, status="200", **stats_route)
    assert _sample(samples, f"{latency}_bucket", le="+Inf", **stats_route) == count
    assert _sample(samples, f"{latency}_sum", **stats_route) > 0
    routes = {dict(labels)["route"] for name, labels in samples if name == requests}
    assert routes == {  # path templates, never the ids of the raw paths
        "/v1/datasets/{name}/versions", "/v1/versions/{version_id}/splits",
        "/v1/splits/{split_id}/plans", "/v1/flight/stats", "unmatched"}
    om = client.get("/metrics", headers={"accept": "application/openmetrics-text"})
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")


def test_metrics_need_the_token_when_one_is_set(database_url: str, tmp_path: Path) -> None:
    from pydantic import SecretStr  # noqa: PLC0415

    settings = Settings(database_url=database_url, data_dir=tmp_path, log_level="WARNING",
                        admin_token=SecretStr("t0k"), flight_locations=("grpc://127.0.0.1:1",))
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert_error(client.get("/metrics"), 401, "unauthenticated")
        assert_error(client.get("/v1/flight/stats"), 401, "unauthenticated")
        auth = {"authorization": "Bearer t0k"}
        stats = client.get("/v1/flight/stats", headers=auth)
        assert stats.status_code == 200
        assert stats.json()["servers"][0]["error"]["type"] == "unavailable"
        assert client.get("/metrics", headers=auth).status_code == 200


def test_render_metrics_escapes_labels() -> None:
    http = HttpMetrics()
    http.observe(method="GET", route='/a"b\\c', status=200, seconds=0.01)
    body, content_type = render_metrics(
        table_rows={"datasets": 2}, http=http.registry,
        servers=[LocationStats("grpc://x:1", stats={"hits": 5, "misses": 1}),
                 LocationStats("grpc://y:2", error={"type": "unavailable", "message": "down"})],
    )
    assert content_type.startswith("text/plain; version=0.0.4")
    text = body.decode()
    samples = parse_metrics(text)
    assert _sample(samples, "windpipe_catalog_datasets") == 2
    assert _sample(samples, "windpipe_catalog_plans") == 0
    assert _sample(samples, "windpipe_cache_hits_total", location="grpc://x:1") == 5
    assert 'route="/a\\"b\\\\c"' in text
    assert _sample(samples, "windpipe_http_requests_total", method="GET", route='/a"b\\c',
                   status="200") == 1
    assert _sample(samples, "windpipe_flight_up", location="grpc://y:2") == 0


def test_two_apps_in_one_process_count_apart() -> None:
    one, two = HttpMetrics(), HttpMetrics()
    one.observe(method="GET", route="/healthz", status=200, seconds=0.001)
    labels = {"method": "GET", "route": "/healthz", "status": "200"}
    assert one.registry.get_sample_value("windpipe_http_requests_total", labels) == 1
    assert two.registry.get_sample_value("windpipe_http_requests_total", labels) is None
