"""Safe defaults: an exposed server without tokens or with the development ticket secret
refuses to start; ``--insecure`` starts it with a warning; loopback needs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from tests.fixtures.servers import free_port, run_catalog_server
from windpipe._serving import serve_flight
from windpipe.catalog.api.server import start_catalog_server
from windpipe.flight_server.access import RestAccess
from windpipe.flight_server.auth import CallAuth, caller
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.principals import LOCAL, Principal, Role
from windpipe.services.contract.wire import error_from_flight
from windpipe.services.exposure import InsecureDeploymentError, check_exposure, is_local_peer
from windpipe.services.settings import Settings, is_loopback


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org", ""))


def test_exposed_servers_refuse_to_start_unprotected(tmp_path: Path) -> None:
    bare = Settings(host="0.0.0.0", data_dir=tmp_path, log_level="WARNING")
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_ADMIN_TOKEN") as catalog:
        start_catalog_server(bare, port=0)
    assert "WINDPIPE_TICKET_SECRET" not in str(catalog.value)  # the catalog signs nothing
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_TICKET_SECRET"):
        serve_flight(bare.model_copy(update={"admin_token": SecretStr("t")}), port=0)
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_ADMIN_TOKEN"):
        serve_flight(bare.model_copy(update={"ticket_secret": SecretStr("x" * 32)}),
                     port=0)
    protected = bare.model_copy(update={"admin_token": SecretStr("t"),
                                        "ticket_secret": SecretStr("x" * 32)})
    check_exposure(protected, service="Flight server", host="0.0.0.0",
                   tokens_configured=lambda: False, signs_tickets=True)  # no raise
    # A stored token counts as configured, without WINDPIPE_ADMIN_TOKEN.
    check_exposure(bare, service="catalog", host="0.0.0.0", tokens_configured=lambda: True,
                   signs_tickets=False)


def test_insecure_starts_with_a_warning(tmp_path: Path) -> None:
    settings = Settings(host="0.0.0.0", data_dir=tmp_path, log_level="WARNING", insecure=True)
    with capture_logs() as logs:
        server = start_catalog_server(settings, port=0)
    try:
        assert server.port > 0
    finally:
        server.stop(grace_s=5)
    assert any(e["event"] == "security.insecure" and e["log_level"] == "warning" for e in logs)


def test_cli_refusal_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    out = subprocess.run(
        [sys.executable, "-m", "windpipe.cli", "serve", "catalog", "--host", "0.0.0.0",
         "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 2
    assert "WINDPIPE_ADMIN_TOKEN" in out.stderr
    assert "--insecure" in out.stderr


# TEST-NET-1 (RFC 5737): a non-loopback address no host has, so a server that passed the
# check by mistake fails to bind instead of listening on a reachable address.
UNREACHABLE_HOST = "192.0.2.1"


def test_a_rest_backed_flight_server_asks_its_catalog(tmp_path: Path) -> None:
    """Only the catalog's tokens admit a REST-backed Flight server's callers: an open
    catalog (no tokens: anonymous calls are its `local` admin) keeps it from starting on
    a network address, whatever WINDPIPE_ADMIN_TOKEN the Flight server itself holds."""
    flight = Settings(flight_host=UNREACHABLE_HOST, ticket_secret=SecretStr("x" * 32),
                      data_dir=tmp_path / "flight", tier_bytes=0, log_level="WARNING")
    with run_catalog_server(Settings(data_dir=tmp_path / "open", log_level="WARNING")) as url:
        for own_token in (None, SecretStr("flight-only")):
            settings = flight.model_copy(update={"catalog_url": url, "admin_token": own_token})
            with pytest.raises(InsecureDeploymentError, match="answers calls without a token"):
                serve_flight(settings, port=0)
        asks = RestAccess(url)
        assert asks.requires_tokens() is False
    closed = Settings(data_dir=tmp_path / "closed", log_level="WARNING",
                      admin_token=SecretStr("catalog-bootstrap"))
    with run_catalog_server(closed) as url:
        asks = RestAccess(url)
        assert asks.requires_tokens() is True
        check_exposure(flight.model_copy(update={"catalog_url": url}), service="Flight server",
                       host=UNREACHABLE_HOST, signs_tickets=True, catalog_decides=True,
                       tokens_configured=asks.requires_tokens)  # no raise
    dead = flight.model_copy(update={"catalog_url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(InsecureDeploymentError, match="cannot tell whether callers need"):
        serve_flight(dead, port=0)
    serve_flight(dead.model_copy(update={"insecure": True, "flight_host": "127.0.0.1"}),
                 port=0).stop(grace_s=5)  # loopback: nothing to ask


def test_local_is_never_granted_to_a_remote_caller(tmp_path: Path) -> None:
    """An open catalog (no tokens) serves anonymous calls as `local` only to callers on its
    host, even under --insecure. The remote caller arrives through a reverse proxy on this
    host: uvicorn takes its address from X-Forwarded-For (sent from loopback), as it
    would for a proxied user."""
    for insecure in (False, True):
        settings = Settings(data_dir=tmp_path / str(insecure), log_level="WARNING",
                            insecure=insecure)
        with run_catalog_server(settings) as url, httpx.Client(base_url=url) as client:
            assert client.get("/v1/whoami").json()["name"] == "local"
            remote = client.get("/v1/whoami", headers={"x-forwarded-for": "203.0.113.9"})
            assert remote.status_code == 401, remote.text
            assert remote.json()["error"]["type"] == "unauthenticated"
            refused = client.post("/v1/tokens", json={"name": "x", "role": "admin"},
                                  headers={"x-forwarded-for": "198.51.100.7"})
            assert refused.status_code == 401


class _Context:
    """What ``windpipe.flight_server.auth.caller`` reads of a pyarrow ``ServerCallContext``."""

    def __init__(self, peer: str, call: CallAuth | None) -> None:
        self._peer, self._call = peer, call

    def peer(self) -> str:
        return self._peer

    def get_middleware(self, _name: str) -> CallAuth | None:
        return self._call


def test_flight_grants_local_only_to_callers_on_its_host() -> None:
    """``local`` (a Flight server without an access layer, or one whose database or
    catalog has no tokens) is refused to a caller on another host; any other principal
    is served from anywhere."""
    local = CallAuth(principal=Principal(LOCAL, Role.ADMIN), token=None)
    alice = CallAuth(principal=Principal("alice", Role.READER), token="t")
    for peer in ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "ipv6:[::ffff:127.0.0.1]:5",
                 "unix:/tmp/s"):
        assert caller(_Context(peer, local)).name == LOCAL
        assert caller(_Context(peer, None)).name == LOCAL
    for peer in ("ipv4:10.1.2.3:5000", "ipv6:[2001:db8::1]:5000", "ipv6:[::ffff:10.0.0.1]:5",
                 "garbage"):
        for call in (local, None):
            with pytest.raises(fl.FlightUnauthenticatedError) as info:
                caller(_Context(peer, call))
            assert error_from_flight(info.value).type == ErrorType.UNAUTHENTICATED
        assert caller(_Context(peer, alice)).name == "alice"
    assert is_local_peer("127.0.0.1")
    assert is_local_peer("localhost")
    assert not any(is_local_peer(h) for h in (None, "", "testclient", "10.0.0.5", "0.0.0.0"))
