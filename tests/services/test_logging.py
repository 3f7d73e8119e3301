"""One log format for windpipe's events, uvicorn's and alembic's lines; quiet below
WARNING until configured (a notebook, the demo, the fixtures): windpipe/services/logging.py.

Each case runs in a fresh interpreter: logging is process-wide state."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# timestamp [level] event [logger] key=value ...
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[(\w+)\s*\] (.+?)\s*"
                  r"\[([A-Za-z_][\w.]*)\](?: (.*))?$")

EMIT = """
import logging
from windpipe.services.logging import configure_logging, get_logger
{setup}
get_logger("windpipe.flight").info("flight.warm", bytes=10)
get_logger("windpipe.flight").warning("flight.slow", seconds=2.5)
logging.getLogger("uvicorn.error").info("Started server process [1]")
logging.getLogger("alembic.runtime.migration").info("Running upgrade  -> 0001")
logging.getLogger("alembic.runtime.plugins").info("setup plugin x")
print("stdout says nothing else")
"""


def _run(setup: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    return subprocess.run([sys.executable, "-c", EMIT.format(setup=setup)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True,
                          env={**env, "PYTHONPATH": str(ROOT)})


def test_unconfigured_only_warnings_reach_stderr_in_the_same_format() -> None:
    proc = _run("")
    assert proc.stdout == "stdout says nothing else\n"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    found = LINE.match(lines[0])
    assert found is not None, lines[0]
    assert found.group(1) == "warning"
    assert found.group(2) == "flight.slow"
    assert found.group(4) == "seconds=2.5"


def test_configured_every_library_logs_in_one_format() -> None:
    proc = _run('configure_logging(level="INFO")')
    assert proc.stdout == "stdout says nothing else\n"
    lines = proc.stderr.splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), proc.stderr
    loggers = [m.group(3) for m in parsed if m]
    assert loggers == ["windpipe.flight", "windpipe.flight", "uvicorn.error",
                       "alembic.runtime.migration"]  # alembic's plugin chatter: DEBUG only
    assert [m.group(1) for m in parsed if m] == ["info", "warning", "info", "info"]


def test_json_lines_for_every_library() -> None:
    proc = _run('configure_logging(level="INFO", json=True)')
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [r["logger"] for r in records] == ["windpipe.flight", "windpipe.flight",
                                              "uvicorn.error", "alembic.runtime.migration"]
    assert records[0]["event"] == "flight.warm"
    assert records[0]["bytes"] == 10
    assert all({"timestamp", "level", "event"} <= set(r) for r in records)


def test_the_served_catalog_logs_through_the_one_format(tmp_path: Path) -> None:
    """``windpipe serve``: uvicorn's and alembic's lines as windpipe's (no uvicorn
    ``INFO:     `` prefix, no second format)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "windpipe.cli", "serve", "catalog", "--port", "0",
         "--data-dir", str(tmp_path / "state")],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert "catalog ready at" in ready, ready
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines
    unmatched = [line for line in lines if not LINE.match(line)]  # one line per event
    assert not unmatched, err
    loggers = {m.group(3) for line in lines if (m := LINE.match(line))}
    assert {"uvicorn.error", "alembic.runtime.migration"} <= loggers, err
