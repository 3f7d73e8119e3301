"""``windpipe ui DIR``: the catalog's pages over an embedded catalog, run as a user runs it
(a subprocess on a free port, stopped with SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

import windpipe
from tests.catalog.api_support import write_small_dataset
from tests.windpipe.test_cli import _read_until

WINDPIPE = [sys.executable, "-m", "windpipe.cli"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}


def test_ui_serves_the_pages_of_an_embedded_catalog(tmp_path: Path):
    data = tmp_path / "my-data"
    manifest = write_small_dataset(data)
    state = tmp_path / "state"
    with windpipe.embedded(state) as cat:
        version = cat.register("mine", root=data.as_uri(), manifest=manifest.name)
    proc = subprocess.Popen([*WINDPIPE, "ui", str(state), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=_env())
    try:
        found = _read_until(proc, ("ui ready at",), timeout=60)
        url = found["ui ready at"]
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/ui")
        listing = httpx.get(url)  # no token: the loopback catalog's local user
        assert listing.status_code == 200
        assert ">mine<" in listing.text
        assert "content-security-policy" in listing.headers
        page = httpx.get(f"{url}/versions/{version.id}")
        assert page.status_code == 200
        assert "cell0" in page.text
        assert str(data) not in page.text  # no host path on a page
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ui_refuses_a_directory_without_a_catalog(tmp_path: Path):
    out = subprocess.run([*WINDPIPE, "ui", str(tmp_path), "--port", "0"],
                         capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert out.returncode == 2
    assert "no catalog at" in out.stderr
    assert "catalog.db" in out.stderr
