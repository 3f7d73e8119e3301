"""Roles and scopes on every Flight call, tickets bound to their principal and expiring,
revocation within ``auth_cache_s``: real catalog + Flight servers in both shapes (plans
and tokens from the database, or over REST from the catalog)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe._serving import serve_flight
from windpipe.flight_server.tickets import TicketPayload, sign_ticket
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.wire import (
    ACTION_CACHE_STATS,
    ACTION_HEALTH,
    ACTION_TIER_INFO,
    ACTION_WARM,
    FlightCommand,
)
from windpipe.services.contract.wire import error_from_flight as wire_error
from windpipe.services.settings import Settings

BOOT = "flight-boot-token"
SECRET = "flight-access-secret"
PLAN = {"default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _opts(token: str | None) -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=flight_headers(token))


def _kind(exc: pytest.ExceptionInfo[Any]) -> ErrorType:
    err = wire_error(exc.value)
    assert isinstance(err, WindpipeError)
    return err.type


@contextmanager
def _world(database_url: str, tmp_path: Path, *, shape: str,
           auth_cache_s: float = 0.0) -> Iterator[dict[str, Any]]:
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), ticket_secret=SecretStr(SECRET),
                        flight_host="127.0.0.1", tier_bytes=0, auth_cache_s=auth_cache_s,
                        log_level="WARNING")
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(settings))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=60))
        plans = {}
        for name in ("lab-a", "other"):
            root = write_small_dataset(tmp_path / name).parent
            v = client.post(f"/v1/datasets/{name}/versions", headers=_auth(BOOT),
                            json={"root": root.as_uri(), "manifest": "manifest.parquet"})
            s = client.post(f"/v1/versions/{v.json()['id']}/splits", headers=_auth(BOOT),
                            json={"strategy": "sample", "fraction": 0.0})
            p = client.post(f"/v1/splits/{s.json()['id']}/plans", headers=_auth(BOOT), json=PLAN)
            assert p.status_code == 201, p.text
            plans[name] = p.json()["id"]
        tokens = {}
        for name, role, scope in (("r", "reader", None), ("scoped", "reader", "lab-*")):
            body = {"name": name, "role": role, **({"datasets": scope} if scope else {})}
            tokens[name] = client.post("/v1/tokens", json=body, headers=_auth(BOOT)).json()["token"]
        flight_settings = (settings.model_copy(update={"catalog_url": url, "database_url": None})
                           if shape == "rest" else settings)
        running = serve_flight(flight_settings, port=0)
        stack.callback(running.stop, grace_s=5)
        flight = fl.connect(running.location)
        stack.callback(flight.close)
        yield {"flight": flight, "client": client, "plans": plans, "tokens": tokens}


@pytest.mark.parametrize("shape", ["database", "rest"])
def test_every_flight_call_by_principal(database_url: str, tmp_path: Path, shape: str) -> None:
    with _world(database_url, tmp_path, shape=shape) as w:
        flight, plans, tokens = w["flight"], w["plans"], w["tokens"]
        lab = FlightCommand(plans["lab-a"]).descriptor()
        other = FlightCommand(plans["other"]).descriptor()
        warm_lab = fl.Action(ACTION_WARM, json.dumps({"plan_id": plans["lab-a"]}).encode())
        warm_other = fl.Action(ACTION_WARM, json.dumps({"plan_id": plans["other"]}).encode())
        stats = fl.Action(ACTION_CACHE_STATS, b"")
        tier = fl.Action(ACTION_TIER_INFO, b"")
        # health is open; everything else needs a valid token.
        assert list(flight.do_action(fl.Action(ACTION_HEALTH, b"")))
        for bad in (None, "wpk_unknown"):
            for call in (lambda o: flight.get_flight_info(lab, o),
                         lambda o: list(flight.do_action(stats, o)),
                         lambda o: list(flight.do_action(tier, o)),
                         lambda o: list(flight.do_action(warm_lab, o))):
                with pytest.raises(fl.FlightUnauthenticatedError) as info:
                    call(_opts(bad))
                assert _kind(info) == ErrorType.UNAUTHENTICATED
            # GetSchema is not served, to anyone (GetFlightInfo answers the schema)
            with pytest.raises((OSError, pa.ArrowException), match="does not serve GetSchema"):
                flight.get_schema(lab, _opts(bad))
        # An unscoped reader reads both; the scoped one only lab-*.
        for token, allowed in ((tokens["r"], (lab, other)), (tokens["scoped"], (lab,))):
            for desc in (lab, other):
                if desc in allowed:
                    assert flight.get_flight_info(desc, _opts(token)).schema is not None
                else:
                    with pytest.raises(fl.FlightUnauthorizedError) as info:
                        flight.get_flight_info(desc, _opts(token))
                    assert _kind(info) == ErrorType.FORBIDDEN
            assert list(flight.do_action(stats, _opts(token)))
            assert list(flight.do_action(tier, _opts(token)))
        assert list(flight.do_action(warm_lab, _opts(tokens["scoped"])))
        with pytest.raises(fl.FlightUnauthorizedError) as info:
            list(flight.do_action(warm_other, _opts(tokens["scoped"])))
        assert _kind(info) == ErrorType.FORBIDDEN

        # Tickets carry their principal and expire by default.
        info_r = flight.get_flight_info(lab, _opts(tokens["r"]))
        ticket = info_r.endpoints[0].ticket
        payload = json.loads(base64.urlsafe_b64decode(
            ticket.ticket.split(b".")[1] + b"=" * 4))
        assert payload["sub"] == "r"
        assert 86000 < payload["exp"] - time.time() <= 86400
        assert flight.do_get(ticket, _opts(tokens["r"])).read_all().num_rows > 0
        with pytest.raises(fl.FlightUnauthorizedError) as foreign:
            flight.do_get(ticket, _opts(tokens["scoped"])).read_all()
        assert _kind(foreign) == ErrorType.INVALID_TICKET
        with pytest.raises(fl.FlightUnauthenticatedError):
            flight.do_get(ticket).read_all()
        expired = sign_ticket(TicketPayload(
            plan_id=plans["lab-a"], epoch=0, rank=0, world_size=1, start_batch=0, end_batch=1,
            exp=time.time() - 1, sub="r"), SECRET.encode())
        with pytest.raises(fl.FlightUnauthorizedError) as old:
            flight.do_get(fl.Ticket(expired), _opts(tokens["r"])).read_all()
        assert _kind(old) == ErrorType.INVALID_TICKET
        assert "expired" in wire_error(old.value).message
        # A forged ticket naming another principal's plan fails its signature.
        forged = sign_ticket(TicketPayload(
            plan_id=plans["other"], epoch=0, rank=0, world_size=1, start_batch=0, end_batch=1,
            exp=time.time() + 60, sub="scoped"), b"windpipe-dev-secret-change-me")
        with pytest.raises(fl.FlightUnauthorizedError) as fake:
            flight.do_get(fl.Ticket(forged), _opts(tokens["scoped"])).read_all()
        assert _kind(fake) == ErrorType.INVALID_TICKET


def test_revocation_reaches_flight_within_the_cache_bound(
    database_url: str, tmp_path: Path
) -> None:
    with _world(database_url, tmp_path, shape="rest", auth_cache_s=1.5) as w:
        flight, client, plans, tokens = w["flight"], w["client"], w["plans"], w["tokens"]
        lab = FlightCommand(plans["lab-a"]).descriptor()
        ticket = flight.get_flight_info(lab, _opts(tokens["r"])).endpoints[0].ticket
        assert client.delete("/v1/tokens/r", headers=_auth(BOOT)).status_code == 204
        revoked = time.monotonic()
        assert flight.get_flight_info(lab, _opts(tokens["r"]))  # still trusted: cached
        while time.monotonic() - revoked < 1.6:
            time.sleep(0.1)
        with pytest.raises(fl.FlightUnauthenticatedError):
            flight.get_flight_info(lab, _opts(tokens["r"]))
        with pytest.raises(fl.FlightUnauthenticatedError):  # a ticket does not outlive it
            flight.do_get(ticket, _opts(tokens["r"])).read_all()
