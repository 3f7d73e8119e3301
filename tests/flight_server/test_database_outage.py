"""A Flight server reading the catalog database answers its outage as ``unavailable``:
every call that needs the database (GetFlightInfo, DoGet, the warm action,
a token or scope to check) fails with the typed, retryable envelope, even for a plan the
server holds, never ``internal``; once the database is back the same server serves.

The outage is real: the PostgreSQL database stops accepting connections and its
sessions are terminated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import INTERNALS, write_small_dataset
from tests.fixtures.database import PG_ADMIN_URL
from tests.fixtures.servers import run_catalog_server
from windpipe._serving import serve_flight
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType, Transient, WindpipeError
from windpipe.services.contract.wire import ACTION_WARM, FlightCommand
from windpipe.services.contract.wire import error_from_flight as wire_error
from windpipe.services.settings import Settings

BOOT = "outage-boot-token"
PLAN = {"default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}


def _set_connections(url: str, *, allow: bool) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def _opts(token: str) -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=flight_headers(token), timeout=20)


def _unavailable(call: Callable[[], Any]) -> WindpipeError:
    """The server's own answer (naming the database), not the call's 20 s timeout."""
    with pytest.raises(fl.FlightError) as info:
        call()
    assert not INTERNALS.search(str(info.value)), str(info.value)
    err = wire_error(info.value)
    assert isinstance(err, WindpipeError), info.value
    assert err.type == ErrorType.UNAVAILABLE, (err.type, err.message)
    assert isinstance(info.value, fl.FlightUnavailableError)
    assert isinstance(err, Transient), err
    assert "database" in err.message
    return err


def test_a_database_outage_is_unavailable_on_every_flight_call(
    postgres_url: str, tmp_path: Path,
) -> None:
    settings = Settings(database_url=postgres_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), ticket_secret=SecretStr("outage-secret"),
                        flight_host="127.0.0.1", tier_bytes=0, log_level="CRITICAL")
    with run_catalog_server(settings) as url, httpx.Client(
            base_url=url, timeout=60, headers={"authorization": f"Bearer {BOOT}"}) as client:
        plans = {}
        for name in ("lab-a", "lab-b"):
            root = write_small_dataset(tmp_path / name).parent
            v = client.post(f"/v1/datasets/{name}/versions",
                            json={"root": root.as_uri(), "manifest": "manifest.parquet"})
            s = client.post(f"/v1/versions/{v.json()['id']}/splits",
                            json={"strategy": "sample", "fraction": 0.0})
            p = client.post(f"/v1/splits/{s.json()['id']}/plans", json=PLAN)
            assert p.status_code == 201, p.text
            plans[name] = p.json()["id"]
        tokens = {name: client.post("/v1/tokens", json={
            "name": name, "role": "reader", "datasets": "lab-*"}).json()["token"]
            for name in ("scoped", "fresh")}

        running = serve_flight(settings, port=0)  # plans and tokens from the database
        flight = fl.connect(running.location)
        try:
            lab_a = FlightCommand(plans["lab-a"]).descriptor()
            lab_b = FlightCommand(plans["lab-b"]).descriptor()
            warm = fl.Action(ACTION_WARM, json.dumps({"plan_id": plans["lab-a"]}).encode())
            ticket = flight.get_flight_info(lab_a, _opts(BOOT)).endpoints[0].ticket
            assert flight.do_get(ticket, _opts(BOOT)).read_all().num_rows > 0  # held now
            assert flight.get_flight_info(lab_a, _opts(tokens["scoped"])).endpoints

            _set_connections(postgres_url, allow=False)
            try:
                # the plan is held, its liveness is not known: asked of the database
                _unavailable(lambda: flight.get_flight_info(lab_a, _opts(BOOT)))
                _unavailable(lambda: flight.do_get(ticket, _opts(BOOT)).read_all())
                _unavailable(lambda: list(flight.do_action(warm, _opts(BOOT))))
                # a scope to check (the token itself is cached) and a token to check
                _unavailable(lambda: flight.get_flight_info(lab_b, _opts(tokens["scoped"])))
                _unavailable(lambda: flight.get_flight_info(lab_a, _opts(tokens["fresh"])))
            finally:
                _set_connections(postgres_url, allow=True)
            assert flight.do_get(ticket, _opts(BOOT)).read_all().num_rows > 0
            assert flight.get_flight_info(lab_b, _opts(tokens["fresh"])).endpoints
        finally:
            flight.close()
            running.stop(grace_s=5)
