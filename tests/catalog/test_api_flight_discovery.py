"""A discovery file with bad lines among good ones, read by a real catalog and a real
Flight server: every consumer sees the good lines only (``/v1/config``,
``/v1/flight/stats``, ``/metrics``, the endpoints of ``GetFlightInfo``), and the
catalog's fan-out to the Flight servers stays bounded when they do not answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.flight as fl
import pytest

from tests.catalog.api_support import write_small_dataset
from tests.catalog.test_api_flight_stats import parse_metrics
from tests.fixtures.servers import free_ports, run_catalog_server
from windpipe._serving import serve_flight
from windpipe.catalog.flight_stats import fetch_cache_stats
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.settings import Settings


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
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]},
    })
    assert plan.status_code == 201, plan.text
    return str(plan.json()["id"])


def test_bad_discovery_lines_are_skipped_by_every_consumer(
        sqlite_url: str, tmp_path: Path) -> None:
    live_port, dead_port = free_ports(2)
    live = f"grpc://127.0.0.1:{live_port}"
    dead = f"grpc://127.0.0.1:{dead_port}"  # valid, but nothing listens
    listed = tmp_path / "servers.txt"
    listed.write_text("\n".join([
        "# the deployment's Flight servers", live, "grpc://127.0.0.1:99999", "grpc://h:abc",
        "not a url", "grpc://[::1", f"http://127.0.0.1:{live_port}", "file:///etc/hosts",
        f"{dead}  # node b",
    ]) + "\n")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "catalog",
                        flight_discovery=listed.as_uri(), log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        flight = serve_flight(settings, port=live_port, cache_bytes=16 << 20)
        try:
            config = client.get("/v1/config")
            assert config.status_code == 200, config.text
            assert config.json()["flight_locations"] == [live, dead]

            stats = client.get("/v1/flight/stats", params={"timeout_s": 2})
            assert stats.status_code == 200, stats.text
            servers = {s["location"]: s for s in stats.json()["servers"]}
            assert list(servers) == [live, dead]
            assert "stats" in servers[live]
            assert servers[dead]["error"]["type"] == "unavailable"

            metrics = client.get("/metrics")
            assert metrics.status_code == 200, metrics.text
            samples = parse_metrics(metrics.text)
            up = {dict(labels)["location"]: value for (name, labels), value in samples.items()
                  if name == "windpipe_flight_up"}
            assert up == {live: 1, dead: 0}

            plan_id = _plan(client, tmp_path / "data")
            with fl.connect(live) as flight_client:
                info = flight_client.get_flight_info(
                    fl.FlightDescriptor.for_command(FlightCommand(plan_id).encode()))
                assert info.endpoints
                for endpoint in info.endpoints:
                    assert {loc.uri.decode() for loc in endpoint.locations} == {live, dead}
                first = flight_client.do_get(info.endpoints[0].ticket).read_chunk()
                assert first.data.num_rows > 0
        finally:
            flight.stop(grace_s=5.0)


@pytest.fixture
def silent_servers() -> Iterator[list[str]]:
    """Locations that accept a connection and never answer (a listening socket nobody
    accepts from): every call to them lasts its whole timeout."""
    socks = [socket.socket() for _ in range(6)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
        yield [f"grpc://127.0.0.1:{sock.getsockname()[1]}" for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def test_the_fan_out_reports_servers_past_its_deadline_as_unavailable(
        silent_servers: list[str]) -> None:
    # two calls at once, each waiting its whole timeout: the last ones cannot be
    # reached before the deadline, whatever the machine's load
    servers = fetch_cache_stats(silent_servers, timeout_s=0.3, max_parallel=2,
                                deadline_s=0.45)
    assert [s.location for s in servers] == silent_servers
    assert all(s.stats is None and s.error is not None for s in servers)
    assert {s.error["type"] for s in servers if s.error} == {"unavailable"}
    last = servers[-1].error
    assert last is not None
    assert "within the 0.45 s deadline" in last["message"]


def test_a_location_without_a_flight_transport_is_reported_not_raised() -> None:
    http, closed = "http://127.0.0.1:9", f"grpc://127.0.0.1:{free_ports(1)[0]}"
    servers = fetch_cache_stats([http, closed], timeout_s=2.0)
    assert [s.location for s in servers] == [http, closed]
    assert servers[0].error is not None
    assert servers[0].error["type"] == "invalid_request"
    assert servers[1].error is not None
    assert servers[1].error["type"] == "unavailable"
