"""The ``windpipe`` command, run as users run it (subprocesses, real servers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.flight as flight
import sqlalchemy as sa

WINDPIPE = [sys.executable, "-m", "windpipe.cli"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WINDPIPE_DATABASE_URL", None)
    return env


def test_help_lists_every_command():
    out = subprocess.run([*WINDPIPE, "--help"], capture_output=True, text=True, check=True)
    for command in ("serve", "migrate", "synth", "demo", "bench"):
        assert command in out.stdout


def test_migrate_creates_the_schema(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    subprocess.run([*WINDPIPE, "migrate", "--database-url", url], check=True,
                   capture_output=True, env=_env())
    tables = set(sa.inspect(sa.create_engine(url)).get_table_names())
    assert {"datasets", "versions", "splits", "plans", "plan_artifacts",
            "alembic_version"} <= tables


def _read_until(proc: subprocess.Popen[str], needles: tuple[str, ...], timeout: float) -> dict:
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while len(found) < len(needles) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        for needle in needles:
            if needle in line:
                found[needle] = line.strip().rsplit(" ", 1)[-1]
    return found


def test_serve_prints_urls_serves_and_stops_on_sigterm(tmp_path: Path):
    proc = subprocess.Popen(
        [*WINDPIPE, "serve", "--port", "0", "--flight-port", "0", "--data-dir",
         str(tmp_path / "state")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(),
    )
    try:
        urls = _read_until(proc, ("catalog ready at", "flight ready at"), timeout=60)
        assert set(urls) == {"catalog ready at", "flight ready at"}, urls
        rest, location = urls["catalog ready at"], urls["flight ready at"]
        assert httpx.get(f"{rest}/healthz").status_code == 200
        assert httpx.get(f"{rest}/readyz").status_code == 200
        config = httpx.get(f"{rest}/v1/config").json()
        assert location in str(config)
        client = flight.connect(location)
        assert list(client.do_action(flight.Action("health", b"")))
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "windpipe stopped" in (proc.stdout.read() if proc.stdout else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
