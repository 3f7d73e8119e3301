"""Relative paths and failed starts, tried as a new user would.

``--allow-root demo-data`` is taken from the working directory, a root the servers
cannot use is refused in one line, a relative ``root`` registered over REST is ``not
absolute`` (422), and a server that never started prints no ``windpipe stopped``.
(Token commands in the wrong directory: ``tests/windpipe/test_cli_tokens.py``.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

WINDPIPE = [sys.executable, "-m", "windpipe.cli"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}


def test_a_relative_allow_root_is_taken_from_the_working_directory(tmp_path: Path) -> None:
    synth = subprocess.run([*WINDPIPE, "synth", "demo-data", "--cells", "1", "--cycles", "1",
                            "--rows-per-cycle", "50"], cwd=tmp_path, env=_env(), check=True,
                           capture_output=True, text=True, timeout=120)
    assert "manifest: demo-data/manifest.parquet" in synth.stdout
    serve = subprocess.Popen(
        [*WINDPIPE, "serve", "catalog", "--allow-root", "demo-data", "--port", "0",
         "--data-dir", str(tmp_path / "state")],
        cwd=tmp_path, env={**_env(), "WINDPIPE_LOG_LEVEL": "WARNING"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("windpipe catalog ready at "), line
        url = line.split()[-1]
        with httpx.Client(base_url=url, timeout=60) as client:
            for root in ("demo-data", "file:demo-data", "./demo-data/"):
                answer = client.post("/v1/datasets/demo/versions",
                                     json={"root": root, "manifest": "manifest.parquet"})
                assert answer.status_code == 422, answer.text
                error = answer.json()["error"]
                assert error["type"] == "invalid_request"
                assert "not absolute" in error["message"]
            made = client.post("/v1/datasets/demo/versions",
                               json={"root": str(tmp_path / "demo-data"),
                                     "manifest": "manifest.parquet"})
            assert made.status_code == 201, made.text
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=60)
    assert "windpipe stopped" in out
    assert "Traceback" not in err


def test_a_server_that_never_started_names_why_in_one_line(tmp_path: Path) -> None:
    cases = (
        (["--allow-root", "ftp://example.org/x"], "--allow-root / WINDPIPE_ALLOWED_ROOTS"),
        (["--host", "0.0.0.0"], "refusing to serve the catalog"),
    )
    for flags, why in cases:
        out = subprocess.run([*WINDPIPE, "serve", "catalog", "--port", "0", "--data-dir",
                              str(tmp_path / "state"), *flags],
                             cwd=tmp_path, env=_env(), check=False, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2, out
        said = [line for line in out.stderr.splitlines() if line.startswith("windpipe serve:")]
        assert len(said) == 1, out.stderr  # one line (alembic may log at INFO before it)
        assert why in said[0]
        assert "Traceback" not in out.stderr
        assert "stopped" not in out.stdout, out.stdout
