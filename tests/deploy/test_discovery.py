"""Finding the Flight servers (``windpipe.services.discovery``) and the host id of a node, fast.

The multi-node test (``test_multi_node.py``) exercises both end to end; these pin the
pieces: the sources, the re-read interval, a failing source keeping its last list,
``/v1/config`` following the source, the SDK's bounded refresh, and ``tier-info``
naming the configured host id.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pyarrow.flight as fl
import pytest
from pydantic import ValidationError

from tests.fixtures.servers import run_catalog_server
from windpipe.flight_server.runner import start_flight_server
from windpipe.sdk._exceptions import Unavailable
from windpipe.sdk._stream import FlightStream
from windpipe.services.discovery import DnsSource, FileSource, FlightDiscovery, parse_source
from windpipe.services.settings import Settings


def test_sources_parse_and_read(tmp_path: Path) -> None:
    listed = tmp_path / "servers.txt"
    listed.write_text("grpc://10.0.0.1:8815  # node a\n\n# gone\ngrpc://10.0.0.2:8815\n"
                      "grpc://10.0.0.1:8815\n")
    source = parse_source(f"file://{listed}")
    assert source == FileSource(listed)
    assert source.read() == ("grpc://10.0.0.1:8815", "grpc://10.0.0.2:8815")
    dns = parse_source("dns://localhost:8815")
    assert dns == DnsSource("localhost", 8815)
    assert "grpc://127.0.0.1:8815" in dns.read()
    for bad in ("dns://no-port", "http://x:1", "file://"):
        with pytest.raises(ValueError, match="expected dns://NAME:PORT"):
            parse_source(bad)
    with pytest.raises(ValidationError, match="flight discovery"):
        Settings(flight_discovery="http://windpipe-flight:8815")


def test_the_source_is_read_again_after_the_interval_and_a_failure_keeps_the_list(
        tmp_path: Path) -> None:
    listed = tmp_path / "servers.txt"
    listed.write_text("grpc://b:1\n")
    now = [0.0]
    found = FlightDiscovery(("grpc://a:1", "grpc://b:1"), FileSource(listed), interval_s=5.0,
                            clock=lambda: now[0])
    assert found.locations() == ("grpc://a:1", "grpc://b:1")
    listed.write_text("grpc://c:1\n")
    now[0] = 4.9
    assert found.locations() == ("grpc://a:1", "grpc://b:1")  # not due yet
    now[0] = 5.0
    assert found.locations() == ("grpc://a:1", "grpc://b:1", "grpc://c:1")
    listed.unlink()
    now[0] = 10.0
    assert found.locations() == ("grpc://a:1", "grpc://b:1", "grpc://c:1")  # kept


def test_v1_config_follows_the_source(tmp_path: Path) -> None:
    listed = tmp_path / "servers.txt"
    listed.write_text("grpc://10.0.0.1:8815\n")
    settings = Settings(data_dir=tmp_path / "cat", flight_locations=("grpc://static:1",),
                        flight_discovery=f"file://{listed}", flight_discovery_s=0.05)
    with run_catalog_server(settings) as url, httpx.Client(base_url=url) as client:
        first = client.get("/v1/config").json()["flight_locations"]
        listed.write_text("grpc://10.0.0.1:8815\ngrpc://10.0.0.2:8815\n")
        time.sleep(0.1)
        second = client.get("/v1/config").json()["flight_locations"]
    assert first == ["grpc://static:1", "grpc://10.0.0.1:8815"]
    assert second == ["grpc://static:1", "grpc://10.0.0.1:8815", "grpc://10.0.0.2:8815"]


def test_the_sdk_refreshes_its_locations_when_due_and_keeps_them_on_failure() -> None:
    answers: list[object] = [["grpc://b:1", "grpc://c:1"], Unavailable("catalog down"), []]

    def refresh() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, list)
        return answer

    stream = FlightStream(["grpc://a:1"], refresh=refresh, refresh_s=3600.0)
    stream.refresh_locations()
    assert stream.locations == ["grpc://a:1"]  # not due: nothing asked
    stream.refresh_s = 0.0
    stream.refresh_locations()
    assert stream.locations == ["grpc://b:1", "grpc://c:1"]
    stream.refresh_locations()  # the catalog is down: the list stays
    stream.refresh_locations()  # it names none: the list stays
    assert stream.locations == ["grpc://b:1", "grpc://c:1"]
    assert stream.counters.refreshes == 1
    assert answers == []
    fixed = FlightStream(["grpc://a:1"])  # locations given: never asked again
    fixed.refresh_s = 0.0
    fixed.refresh_locations()
    assert fixed.locations == ["grpc://a:1"]


def test_tier_info_names_the_configured_host_id(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "node", host_id="node-7", tier_bytes=1 << 20)
    running = start_flight_server(settings, port=0, cache_bytes=1 << 20,
                                  plan_source=pytest.fail)
    try:
        with fl.connect(running.location) as client:
            result = next(iter(client.do_action(fl.Action("tier-info", b"{}"))))
        tier = json.loads(result.body.to_pybytes())["tier"]
    finally:
        running.stop(grace_s=1.0)
    assert tier["host"] == "node-7"
    assert Path(tier["path"]) == (tmp_path / "node" / "tier").resolve()
