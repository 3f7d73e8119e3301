"""The layer rule of ``docs/architecture.md``, enforced.

``lint-imports`` checks the import contracts of ``pyproject.toml`` (layers, in which
the catalog, the Flight server and the SDK are siblings that never import each other;
a pure planning core, a materializer without server code, an SDK that only speaks the
wire contract, a Flight server without catalog, SQL or web code, no import cycles);
each contract is shown to fail on a planted wrong import in a copy of the tree. Two
rules import-linter cannot express are checked here directly: no first-party import
hides inside a function (the CLI and its ``windpipe/commands/``, whose ``--help`` must
stay fast, and the benchmarks aside), and importing the planning core or the
materializer loads no SQL, HTTP or server code, nor importing the Flight server any
catalog or SQL code.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("windpipe", "bench")
LINT = Path(sys.executable).with_name("lint-imports")
# first-party imports inside functions are allowed only where start-up time matters
LAZY_ALLOWED = ("windpipe/cli.py", "windpipe/commands/", "bench/")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([str(LINT), "--no-cache", "--no-logo"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_import_contracts_hold() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "planted", "contract", "culprit"), [
    ("windpipe/services/settings.py", "import windpipe.catalog.models", "Layers point one way",
     "windpipe.services.settings -> windpipe.catalog.models"),
    ("windpipe/services/planning/streams.py", "import sqlalchemy", "The planning core has no HTTP",
     "windpipe.services.planning.streams -> sqlalchemy"),
    ("windpipe/services/materialize/cache.py", "import windpipe.flight_server.server",
     "The materializer imports no",
     "windpipe.services.materialize.cache -> windpipe.flight_server.server"),
    ("windpipe/sdk/_batch.py", "import windpipe.catalog.plans", "The SDK speaks the wire contract",
     "windpipe.sdk._batch -> windpipe.catalog.plans"),
    # the catalog, the Flight server and the SDK are independent siblings
    ("windpipe/flight_server/server.py", "import windpipe.catalog.plans", "Layers point one way",
     "windpipe.flight_server.server -> windpipe.catalog.plans"),
    ("windpipe/catalog/plans.py", "import windpipe.flight_server.runner", "Layers point one way",
     "windpipe.catalog.plans -> windpipe.flight_server.runner"),
    ("windpipe/catalog/retire.py", "import windpipe.sdk._batch", "Layers point one way",
     "windpipe.catalog.retire -> windpipe.sdk._batch"),
    ("windpipe/flight_server/access.py", "import sqlalchemy", "The Flight server is a data plane",
     "windpipe.flight_server.access -> sqlalchemy"),
    ("windpipe/services/planning/streams.py", "import windpipe.services.planning.artifact",
     "No import cycles",
     ".streams -> .artifact"),
])
def test_a_planted_wrong_import_breaks_its_contract(
    tmp_path: Path, module: str, planted: str, contract: str, culprit: str
) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _lint(tmp_path).returncode == 0  # the copy is as clean as the tree
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{planted}  # planted\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith(" BROKEN")]
    assert [line for line in broken if line.startswith(contract)], result.stdout
    assert culprit in result.stdout, result.stdout


def _function_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                names = [a.name for a in inner.names]
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names = [inner.module]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{inner.lineno} {n}"
                      for n in names if n.split(".")[0] in PACKAGES]
    return found


def test_no_first_party_import_hides_in_a_function() -> None:
    offenders = [
        hit
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(LAZY_ALLOWED)
        for hit in _function_level_imports(path)
    ]
    assert offenders == []


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return {m.split(".")[0] for m in out.split()} | set(out.split())


_SERVERS = ("sqlalchemy", "fastapi", "uvicorn", "alembic")


@pytest.mark.parametrize(("package", "absent"), [
    ("windpipe.services.planning",
     (*_SERVERS, "httpx", "pyarrow._flight", "obstore", "zarr", "windpipe.catalog",
      "windpipe.flight_server", "windpipe.services.storage", "windpipe.services.materialize",
      "windpipe.services.database")),
    ("windpipe.services.materialize",
     (*_SERVERS, "httpx", "windpipe.catalog", "windpipe.flight_server", "windpipe.migrations")),
    ("windpipe.flight_server.runner",
     (*_SERVERS, "psycopg", "windpipe.catalog", "windpipe.migrations", "windpipe.sdk")),
])
def test_importing_a_library_loads_no_server_code(package: str, absent: tuple[str, ...]) -> None:
    loaded = _loaded_after(f"import {package}")
    assert package in loaded  # the probe ran
    assert sorted(loaded & set(absent)) == []


def _layered() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return text[text.index('id = "layers"'):text.index('id = "pure-planning"')]


def _children(package: Path) -> list[str]:
    return sorted(
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    )


def test_every_module_of_services_is_in_a_layer() -> None:
    """A new module under windpipe/services/ must be placed in the layer rule, not escape it."""
    children = _children(ROOT / "windpipe" / "services")
    assert "contract" in children  # the probe looked at the real tree
    missing = [c for c in children if f"windpipe.services.{c}" not in _layered()]
    assert missing == []


def test_every_top_level_module_of_windpipe_is_in_a_layer() -> None:
    """The CLI, the public face's modules and the five packages: each one named in a layer."""
    children = _children(ROOT / "windpipe")
    assert {"cli", "services", "sdk"} <= set(children)
    missing = [c for c in children if not re.search(rf"\bwindpipe\.{c}\b", _layered())]
    assert missing == []
