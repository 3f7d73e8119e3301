"""Bad input never answers with internals: no traceback, no host path outside the root
the caller sent, no file contents, no connection string; every answer has a request id.
REST on both databases, Flight with a plan source that fails unexpectedly."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from tests.fixtures.servers import free_port, run_catalog_server
from tests.flight_server.helpers import start_server
from windpipe._serving import serve_flight
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.contract.wire import error_from_flight as wire_error
from windpipe.services.settings import Settings

SECRETS = ("secret-value", "secret-cell", "secret-m", "secret-zarr", "secret-cidx")
INTERNALS = re.compile(r"Traceback|File \"|Debug source|postgresql://|sqlite:///|:5432|"
                       r"site-packages|\.py\b")


def _rows(path: str) -> list[dict]:
    return [{"set_id": "s", "cell_id": "c", "cidx": 0, "protocol": "cycling",
             "segment_path": path}]


def _clean(text: str, *, root: Path, tmp_path: Path) -> None:
    assert not INTERNALS.search(text), text
    assert not any(s in text for s in SECRETS), text
    assert str(tmp_path) not in text.replace(str(root), "ROOT"), text


def test_bad_registrations_answer_without_internals(database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d.zarr").mkdir(parents=True)
    (root / "x.csv").write_text("set_id,cell_id,voltage\nsecret-value,c,1.0\n")
    (root / "y.parquet").write_text("a,b\nsecret-cell,2\n")
    (root / "m.csv").write_text("set_id,cell_id,cidx,protocol,segment_path\n"
                                "secret-m,c,secret-cidx,cycling,nope.parquet\n")
    (root / "d.zarr" / "zarr.json").write_text('{"secret-zarr": 1}')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.parquet").write_text("secret-value")
    (root / "link.parquet").symlink_to(outside / "t.parquet")
    bodies = [
        *({"root": root.as_uri(), "rows": _rows(p)}
          for p in ("x.csv", "y.parquet", "d.zarr", "missing.parquet", "link.parquet",
                    "../outside/t.parquet", "/etc/passwd")),
        *({"root": root.as_uri(), "manifest": m}
          for m in ("m.csv", "y.parquet", "x.csv", "link.parquet", "nope.csv")),
        {"root": root.as_uri(), "rows": [{"set_id": {"a": "secret-value"}, "cidx": [1]}]},
    ]
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        log_level="CRITICAL")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        for body in bodies:
            resp = client.post("/v1/datasets/d/versions", json=body)
            assert resp.status_code == 422, (body, resp.text)
            assert re.fullmatch(r"[0-9a-f]{16}", resp.headers["x-request-id"])
            _clean(resp.text, root=root, tmp_path=tmp_path)
        for path in ("/v1/plans/p-unknown", "/v1/plans/p-unknown/artifact",
                     "/v1/versions/v-x/index?page_token=%%%"):
            resp = client.get(path)
            assert resp.status_code in (404, 422), resp.text
            _clean(resp.text, root=root, tmp_path=tmp_path)


def test_flight_internal_errors_carry_only_a_request_id(tmp_path: Path) -> None:
    def broken(plan_id: str):
        raise RuntimeError(f"could not open {tmp_path}/db at postgresql://u:pw@10.1.2.3:5432/x")

    running = start_server({}, log_level="CRITICAL")
    running.server.plans._load = broken
    client = fl.connect(running.location)
    try:
        desc = FlightCommand("p-any").descriptor()
        options = fl.FlightCallOptions(headers=flight_headers(None))
        with pytest.raises(fl.FlightInternalError) as info:
            client.get_flight_info(desc, options)
        text = str(info.value)
        assert str(tmp_path) not in text
        assert "10.1.2.3" not in text
        assert "Traceback" not in text
        err = wire_error(info.value)
        assert err.type == ErrorType.INTERNAL
        assert re.fullmatch(r"[0-9a-f]{16}", err.details["request_id"])
        assert err.details["request_id"] in err.message
        # GetSchema is not served (windpipe.flight_server.calls): refused before any handler, so
        # without the traceback text pyarrow would attach to a handler's error.
        for desc_ in (desc, fl.FlightDescriptor.for_path("x")):
            with pytest.raises((OSError, pa.ArrowException)) as schema:
                client.get_schema(desc_, options)
            text = str(schema.value)
            assert "does not serve GetSchema" in text, text
            assert "Traceback" not in text
            assert not re.search(r'File "|\.py"|\.pyx"', text), text
    finally:
        client.close()
        running.stop(grace_s=5)


def test_flight_with_its_database_down_names_no_address() -> None:
    port = free_port()
    settings = Settings(flight_host="127.0.0.1", tier_bytes=0, log_level="CRITICAL",
                        database_url=f"postgresql://u:hunter2@127.0.0.1:{port}/windpipe")
    running = serve_flight(settings, port=0)
    client = fl.connect(running.location)
    try:
        with pytest.raises(fl.FlightUnavailableError) as info:
            client.get_flight_info(FlightCommand("p-any").descriptor())
    finally:
        client.close()
        running.stop(grace_s=5)
    text = str(info.value)
    assert str(port) not in text
    assert "hunter2" not in text
    err = wire_error(info.value)
    assert err.type == ErrorType.UNAVAILABLE
    assert err.details["request_id"] in err.message
