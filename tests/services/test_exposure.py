"""Safe defaults: an exposed server without tokens or with the development ticket secret
refuses to start; ``--insecure`` starts it with a warning; loopback needs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from catalog.api.server import start_catalog_server
from flight_server.runner import start_flight_server
from services.exposure import InsecureDeploymentError, check_exposure
from services.settings import Settings, is_loopback


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org", ""))


def test_exposed_servers_refuse_to_start_unprotected(tmp_path: Path) -> None:
    bare = Settings(host="0.0.0.0", data_dir=tmp_path, log_level="WARNING")
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_TOKEN") as catalog:
        start_catalog_server(bare, port=0)
    assert "WINDPIPE_TICKET_SECRET" not in str(catalog.value)  # the catalog signs nothing
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_TICKET_SECRET"):
        start_flight_server(bare.model_copy(update={"token": SecretStr("t")}), port=0)
    with pytest.raises(InsecureDeploymentError, match="WINDPIPE_TOKEN"):
        start_flight_server(bare.model_copy(update={"ticket_secret": SecretStr("x" * 32)}),
                            port=0)
    protected = bare.model_copy(update={"token": SecretStr("t"),
                                        "ticket_secret": SecretStr("x" * 32)})
    check_exposure(protected, service="Flight server", host="0.0.0.0",
                   tokens_configured=lambda: False, signs_tickets=True)  # no raise
    # A stored token counts as configured, without WINDPIPE_TOKEN.
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
    assert "WINDPIPE_TOKEN" in out.stderr
    assert "--insecure" in out.stderr
