"""What ``pip install`` puts on a machine: one top-level package, ``windpipe``, that a
project's own ``services/``, ``catalog/``, ``sdk/`` or ``migrations/`` cannot shadow, and a
server that runs from ``windpipe[server]`` without torch.

A fresh virtual environment gets a non-editable install of a copy of the tree (tracked
files and new ones git does not ignore), so nothing of the checkout or of the test
environment leaks in.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.packaging import install_tree
from tests.fixtures.servers import free_ports

SPECIFIED = {"windpipe"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding ``pip install '<tree>[server]'`` and nothing else of ours."""
    return install_tree(tmp_path_factory.mktemp("packaging"), "server")


def _top_level_packages(venv: Path) -> set[str]:
    record = next(venv.glob("lib/python*/site-packages/windpipe-*.dist-info/RECORD"))
    tops = set()
    for line in record.read_text().splitlines():
        path = line.split(",")[0]
        first, _, rest = path.partition("/")
        if rest and not first.endswith((".dist-info", ".data")) and first != "..":
            tops.add(first)
    return tops


def test_install_holds_exactly_the_specified_packages(server_venv: Path) -> None:
    assert _top_level_packages(server_venv) == SPECIFIED
    out = subprocess.run(
        [str(server_venv / "bin" / "python"), "-c",
         "import importlib.util as u, windpipe; "
         "print(windpipe.__version__, u.find_spec('torch') is None, u.find_spec('bench'))"],
        cwd=server_venv, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0.1.0", "True", "None"]  # versioned, no torch, no bench


def test_a_project_with_folders_of_our_packages_names_still_imports_windpipe(
        server_venv: Path, tmp_path: Path) -> None:
    """A script beside its own ``services/``, ``catalog/``, ``sdk/`` and ``migrations/``
    (each a package that would shadow a top-level one of ours) imports windpipe, opens an
    embedded catalog (the migrations run) and gets the installed classes."""
    for own in ("services", "catalog", "sdk", "migrations", "flight_server"):
        (tmp_path / own).mkdir()
        (tmp_path / own / "__init__.py").write_text(f"MINE = {own!r}\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import services, sdk\n"
        "import windpipe\n"
        "from windpipe import Catalog, LoaderConfig\n"
        "from windpipe.services.contract.errors import WindpipeError\n"
        "catalog = windpipe.embedded('state')\n"
        "print(services.MINE, sdk.MINE, catalog.datasets(), Catalog.__module__,\n"
        "      LoaderConfig.__module__, WindpipeError.__module__)\n")
    out = subprocess.run([str(server_venv / "bin" / "python"), str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["services", "sdk", "[]", "windpipe.sdk._catalog",
                                  "windpipe.services.contract.configs",
                                  "windpipe.services.contract.errors"]


def test_the_server_runs_without_torch(server_venv: Path, tmp_path: Path) -> None:
    port, flight_port = free_ports(2)
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(server_venv / "bin" / "windpipe"), "serve", "--data-dir", str(tmp_path / "state"),
         "--port", str(port), "--flight-port", str(flight_port)],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        ready = None
        while proc.poll() is None:  # until it answers or exits (pytest-timeout bounds it)
            try:
                ready = httpx.get(f"{url}/readyz", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert ready is not None, (tmp_path / "serve.log").read_text()
        assert ready.status_code == 200
        assert httpx.get(f"{url}/v1/datasets", timeout=5).json()["items"] == []
        client = subprocess.run(  # the client of the same install, without torch
            [str(server_venv / "bin" / "python"), "-c",
             "import sys; from windpipe import Catalog; "
             f"c = Catalog({url!r}); print(c.health(), c.datasets(), 'torch' in sys.modules)"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
        assert client.stdout.split() == ["True", "[]", "False"], client.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert "torch" not in (tmp_path / "serve.log").read_text().lower()
