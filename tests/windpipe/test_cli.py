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

from windpipe.cli import _settings, build_parser
from windpipe.flight_server.runner import start_flight_server
from windpipe.services.contract.wire import ACTION_HEALTH
from windpipe.services.settings import Settings

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
    log = tmp_path / "serve.log"
    env = {**_env(), "WINDPIPE_ALLOCATOR_TRIM_S": "0.2", "WINDPIPE_LOG_LEVEL": "DEBUG"}
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*WINDPIPE, "serve", "--port", "0", "--flight-port", "0", "--data-dir",
             str(tmp_path / "state")],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env,
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
        assert list(client.do_action(flight.Action(ACTION_HEALTH, b"")))
        client.close()
        deadline = time.monotonic() + 60  # the allocators trimmed while it serves
        while "runtime.allocator_trimmed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "runtime.allocator_trimmed" in log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "windpipe stopped" in (proc.stdout.read() if proc.stdout else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bench_passes_every_option_to_the_benchmark():
    out = subprocess.run([*WINDPIPE, "bench", "--help"], capture_output=True, text=True,
                         check=True, env=_env())
    assert out.stdout.startswith("usage: python -m bench")
    for option in ("--quick", "--json", "--only", "--skip-planning"):
        assert option in out.stdout


def test_flight_knobs_are_settings_flags_and_variables(monkeypatch, tmp_path):
    flags = ["serve", "flight", "--cache-wait-s", "5", "--readahead-batches", "0",
             "--endpoint-batches", "7", "--on-bad-segment", "skip", "--ticket-ttl-s", "60",
             "--flight-port", "0", "--tier-dir", str(tmp_path / "tier"), "--tier-bytes",
             "12345678", "--no-auto-blocks", "--build-ahead-bytes", "1000"]
    settings = _settings(build_parser().parse_args(flags))
    assert (settings.cache_wait_s, settings.readahead_batches, settings.endpoint_batches,
            settings.on_bad_segment, settings.ticket_ttl_s) == (5.0, 0, 7, "skip", 60.0)
    assert (settings.resolved_tier_dir(), settings.tier_bytes, settings.auto_blocks,
            settings.build_ahead_bytes) == (tmp_path / "tier", 12345678, False, 1000)
    assert _settings(build_parser().parse_args(["serve"])).auto_blocks is True
    assert Settings(tier_bytes=0).resolved_tier_dir() is None
    monkeypatch.setenv("WINDPIPE_READAHEAD_BATCHES", "3")
    monkeypatch.setenv("WINDPIPE_ON_BAD_SEGMENT", "skip")
    assert (Settings().readahead_batches, Settings().on_bad_segment) == (3, "skip")
    running = start_flight_server(settings.model_copy(update={"flight_host": "127.0.0.1"}),
                                  plan_source=lambda plan_id: None)
    try:
        server, config = running.server, running.server.config.settings
        assert (server.cache.wait_timeout_s, config.readahead_batches, config.endpoint_batches,
                config.on_bad_segment, config.ticket_ttl_s) == (5.0, 0, 7, "skip", 60.0)
        assert server.tier is not None
        assert (server.tier.directory, server.tier.budget_bytes) == (tmp_path / "tier",
                                                                     12345678)
        assert (config.auto_blocks, config.build_ahead_bytes) == (False, 1000)
    finally:
        running.stop(grace_s=5)
