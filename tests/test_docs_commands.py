"""Every shell command of README.md and docs/ runs in a test, or its page says why not.

A ``bash`` (``sh``, ``shell``, ``console``, ``zsh``) block is either listed in
:data:`RUN_BY`, keyed by its page and a distinctive piece of its text and naming the
test that runs it as written, or has ``<!-- docs-test: skip: <why> -->`` on the line
right above its fence (``tests/fixtures/docs.py``). A block listed here is found by
that text, so a changed block fails the test that runs it until both agree again.

The blocks this module runs, run as written with ``bash -e``: from a fresh working
directory holding ``.venv`` (this environment's, as after the quick start), with its
``bin`` (``windpipe``, ``python``) first on PATH and no ``WINDPIPE_*`` variable but the
ports and, for the security page's servers, an S3 endpoint. A server block gets free
ports through ``WINDPIPE_PORT`` and ``WINDPIPE_FLIGHT_PORT`` (its flags set neither), is
ready at ``/readyz``, and stops on SIGTERM; a command addressing the default
``localhost:8000`` is pointed at that port, the one change made to a block.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import polars as pl
import pytest
import yaml

from tests.fixtures.cyclers import (
    REAL_FILES,
    arbin_file,
    batterydata_file,
    biologic_mpr,
    maccor_file,
    real_file,
)
from tests.fixtures.docs import CodeBlock, code_blocks
from tests.fixtures.servers import free_ports
from tests.test_docs import _readme_notebook_blocks
from windpipe.sdk._locations import LOCATION_MAP_ENV, LocationMap

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = frozenset({"bash", "sh", "shell", "console", "zsh"})
HERE = "tests/test_docs_commands.py"

NOTEBOOK_SERVE = "serve --data-dir .windpipe --allow-root demo-data &"
CURL = "curl -X POST localhost:8000/v1/datasets/demo/versions"
LOCATION_MAP = "export WINDPIPE_FLIGHT_LOCATION_MAP="
INGEST = "windpipe ingest exports/ --out lab-data"
ALLOW_ROOTS = "windpipe serve --allow-root /data/lab --allow-root s3://lab-bucket/datasets"
ROOT_SCOPES = "--root-scope 'lab-*=/data/lab'"


@dataclass(frozen=True)
class RunBy:
    """The block of ``page`` holding ``text`` runs as written in ``test``."""

    page: str
    text: str
    test: str  # path, or path::function


RUN_BY = (
    RunBy("README.md", NOTEBOOK_SERVE,
          "tests/test_docs.py::test_the_readme_notebook_section_runs_as_written"),
    RunBy("README.md", CURL, f"{HERE}::test_the_readme_curl_registers_with_the_readme_server"),
    RunBy("README.md", LOCATION_MAP,
          f"{HERE}::test_the_readme_location_map_reaches_every_compose_flight_server"),
    RunBy("docs/data.md", INGEST, f"{HERE}::test_the_ingest_block_runs_as_written"),
    RunBy("docs/deploy.md", "tests/deploy/test_multi_node.py",
          "tests/deploy/test_multi_node.py"),  # the command is that module's run
    RunBy("docs/security.md", ALLOW_ROOTS, f"{HERE}::test_the_security_serve_blocks_run"),
    RunBy("docs/security.md", ROOT_SCOPES, f"{HERE}::test_the_security_serve_blocks_run"),
)

WHAT_TO_DO = (
    "run it as written in a test and list (page, a distinctive piece of its text, the "
    f"test) in RUN_BY ({HERE}), or put `<!-- docs-test: skip: <why it cannot run in a "
    "test> -->` on the line right above its fence")


def _shell_blocks(text: str) -> list[CodeBlock]:
    return [b for b in code_blocks(text) if b.lang in SHELL]


def _problems(page: str, blocks: list[CodeBlock], entries: list[RunBy]) -> list[str]:
    """What is wrong with ``page``'s shell blocks and their RUN_BY entries."""
    problems = []
    for block in blocks:
        where = f"{page}:{block.line}"
        runs = [e.test for e in entries if e.text in block.code]
        if block.skip is not None and runs:
            problems.append(f"{where}: marked skip ({block.skip}) and listed in RUN_BY "
                            f"as run by {runs[0]}: keep one")
        elif block.skip is None and not runs:
            problems.append(f"{where}: no test runs this {block.lang} block: {WHAT_TO_DO}")
    for entry in entries:
        n = sum(entry.text in b.code for b in blocks)
        if n != 1:
            problems.append(f"RUN_BY's {entry.text!r} is in {n} shell blocks of {page}, not "
                            f"1: the page changed; update the entry and {entry.test}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_shell_block_runs_in_a_test_or_says_why(page: Path) -> None:
    rel = page.relative_to(ROOT).as_posix()
    entries = [e for e in RUN_BY if e.page == rel]
    problems = _problems(rel, _shell_blocks(page.read_text()), entries)
    assert not problems, "\n".join(problems)


def test_the_check_names_an_unaccounted_block_and_what_to_do() -> None:
    page = ("```bash\nwindpipe a\n```\n\n<!-- docs-test: skip: needs a cluster -->\n"
            "```sh\nkubectl b\n```\n\n```console\nwindpipe c\n```\n\n```python\nd\n```\n")
    blocks = _shell_blocks(page)
    assert [(b.lang, b.line, b.skip) for b in blocks] == [
        ("bash", 1, None), ("sh", 6, "needs a cluster"), ("console", 10, None)]
    assert _problems("p.md", blocks, [RunBy("p.md", "windpipe a", "t")]) == [
        f"p.md:10: no test runs this console block: {WHAT_TO_DO}"]
    both = _problems("p.md", blocks, [RunBy("p.md", "windpipe", "t"), RunBy("p.md", "kube", "u")])
    assert both == ["p.md:6: marked skip (needs a cluster) and listed in RUN_BY as run by u: "
                    "keep one",
                    "RUN_BY's 'windpipe' is in 2 shell blocks of p.md, not 1: the page "
                    "changed; update the entry and t"]


@pytest.mark.parametrize("entry", RUN_BY, ids=lambda e: f"{e.page}:{e.text[:24]}")
def test_each_listed_test_exists(entry: RunBy) -> None:
    path, _, name = entry.test.partition("::")
    assert (ROOT / entry.page).is_file(), entry.page
    source = (ROOT / path).read_text()
    assert not name or re.search(rf"^def {re.escape(name)}\(", source, re.M), entry.test


def test_the_notebook_block_listed_is_the_one_test_docs_runs() -> None:
    bash, _python = _readme_notebook_blocks()
    assert bash == _block("README.md", NOTEBOOK_SERVE)


# -- running blocks -------------------------------------------------------------------


def _block(page: str, text: str) -> str:
    """The one shell block of ``page`` holding ``text`` (a RUN_BY key)."""
    assert any((e.page, e.text) == (page, text) for e in RUN_BY), (page, text)
    found = [b for b in _shell_blocks((ROOT / page).read_text()) if text in b.code]
    assert len(found) == 1, f"{page}: {len(found)} shell blocks hold {text!r}"
    assert found[0].skip is None, f"{page}:{found[0].line} is marked skip: {found[0].skip}"
    return found[0].code


def _venv(tmp_path: Path) -> Path:
    """This environment's venv (its ``bin`` has ``windpipe``), or one standing in for it
    when the tests run from an interpreter without the script."""
    prefix = Path(sys.prefix)
    if (prefix / "bin" / "windpipe").exists():
        return prefix
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "windpipe").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m windpipe.cli "$@"\n')
    (venv / "bin" / "windpipe").chmod(0o755)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def _shell(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh working directory with ``.venv``, and the environment blocks run in."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    venv = _venv(tmp_path)
    (cwd / ".venv").symlink_to(venv, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return cwd, env


def _run(code: str, cwd: Path, env: dict[str, str]) -> str:
    """``code`` in bash, stopping at the first failing command; its stdout."""
    done = subprocess.run(["bash", "-e", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, f"exit {done.returncode}:\n{code}\n{done.stderr[-3000:]}"
    return done.stdout


def _with_ports(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    port, flight_port = free_ports(2)
    return port, {**env, "WINDPIPE_PORT": str(port), "WINDPIPE_FLIGHT_PORT": str(flight_port)}


@contextmanager
def _serving(code: str, cwd: Path, env: dict[str, str], *, port: int) -> Iterator[str]:
    """Run a block that starts a server (in the foreground, or with ``&``); yield its URL
    once ready; then SIGTERM its process group and wait for the shell, which waits for
    the server (``trap wait TERM``)."""
    log = cwd.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"trap wait TERM\n{code}\nwait\n"], cwd=cwd,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:  # until ready, or fail if it exits (pytest-timeout bounds the rest)
            if proc.poll() is not None:
                raise AssertionError(f"the block's server exited ({proc.returncode}):\n"
                                     f"{code}\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_readme_curl_registers_with_the_readme_server(tmp_path: Path) -> None:
    """The REST section's curl, from the notebook section's directory, against the server
    its block starts (that block as written; tests/test_docs.py runs it with the rest
    of the section)."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed here")
    cwd, env = _shell(tmp_path)
    port, env = _with_ports(env)
    curl = _block("README.md", CURL)
    assert curl.count("localhost:8000") == 1
    with _serving(_block("README.md", NOTEBOOK_SERVE), cwd, env, port=port) as url:
        version = json.loads(_run(curl.replace("localhost:8000", f"localhost:{port}"),
                                  cwd, env))
        assert version.get("dataset") == "demo", version
        assert version["root_uri"] == (cwd / "demo-data").resolve().as_uri()
        assert version["n_segments"] > 0
        listed = httpx.get(f"{url}/v1/datasets/demo/versions", timeout=10).json()["items"]
        assert [v["id"] for v in listed] == [version["id"]]


def test_the_readme_location_map_reaches_every_compose_flight_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The export, run as written, sets what the SDK reads (``LocationMap()`` as
    ``Catalog`` builds it), and that maps each location a compose Flight server
    advertises to the port compose publishes it on."""
    cwd, env = _shell(tmp_path)
    value = _run(f'{_block("README.md", LOCATION_MAP)}\nprintf %s "${LOCATION_MAP_ENV}"',
                 cwd, env)
    monkeypatch.setenv(LOCATION_MAP_ENV, value)
    mapping = LocationMap()
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    flights = {name: svc for name, svc in compose["services"].items()
               if "flight" in (svc.get("command") or [])}
    assert len(flights) >= 2
    for name, svc in flights.items():
        advertised = svc["environment"]["WINDPIPE_FLIGHT_PUBLIC_LOCATION"]
        published = svc["ports"][0].split(":")[0]
        assert mapping(advertised) == f"grpc://localhost:{published}", name


def _ingest_example_files(cwd: Path) -> None:
    """The files docs/data.md's ingest block names, in the layouts their cyclers write."""
    exports = cwd / "exports"
    exports.mkdir()
    arbin_file(exports / "cellB.csv")
    maccor_file(exports / "cellC.001")
    batterydata_file(exports / "cellD-raw.csv")
    maccor_file(cwd / "run7.001")
    maccor_file(cwd / "run7.002")
    biologic_mpr(cwd / "cellA_01_GCPL_C01.mpr")
    biologic_mpr(cwd / "cellA_02_PEIS_C01.mpr", spectrum=True)
    for name in ("00_test_01_OCV_C01.mpr", "00_test_02_MB_C01.mpr"):
        real_file(name, cwd / "real")
    whole = (REAL_FILES / "00_test_04_MB_C01.mpr").read_bytes()
    (cwd / "real" / "00_test_04_MB_C01.mpr").write_bytes(whole[: len(whole) // 2])  # cut short


@pytest.mark.slow  # four ingests, each a process importing the readers
def test_the_ingest_block_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("galvani")
    pytest.importorskip("battdat")
    cwd, env = _shell(tmp_path)
    _ingest_example_files(cwd)
    said = [ln for ln in _run(_block("docs/data.md", INGEST), cwd, env).splitlines()
            if ln.startswith("wrote ")]
    assert len(said) == 4, said
    assert " of 3 cells " in said[0]  # exports/: an Arbin, a MACCOR and a batterydata cell
    lab = pl.read_parquet(cwd / "lab-data" / "manifest.parquet")  # --overwrite replaced it
    assert set(lab.select("set_id", "cell_id").rows()) == {("run7", "run7")}
    cell_a = pl.read_parquet(cwd / "cellA-data" / "manifest.parquet")
    assert sorted(set(cell_a.select("cell_id", "protocol").rows())) == [
        ("cellA", "cycling"), ("cellA", "eis")]
    real = pl.read_parquet(cwd / "real-data" / "manifest.parquet")
    assert set(real.get_column("cell_id")) == {"00_test_01_OCV_C01", "00_test_02_MB_C01"}
    skipped = json.loads((cwd / "real-data" / "ingest.json").read_text())["skipped"]
    assert [Path(s["file"]).name for s in skipped] == ["00_test_04_MB_C01.mpr"]


# (dataset, root, forbidden): what each security.md serve block must answer a registration
SECURITY_CHECKS = {
    ALLOW_ROOTS: [("lab-1", "/data/lab/x", False), ("lab-1", "/data/labx", True),
                  ("lab-1", "/elsewhere", True), ("lab-1", "s3://lab-bucket/datasets/x", False),
                  ("lab-1", "s3://lab-bucket/datasets2/x", True),
                  ("lab-1", "s3://other-bucket/datasets", True)],
    ROOT_SCOPES: [("lab-1", "/data/lab/x", False), ("lab-1", "/data/ml/x", True),
                  ("ml-1", "/data/ml/x", False), ("team-1", "/data/ml/x", False),
                  ("ml-1", "/data", True), ("other", "/data/other", False),
                  ("other", "/data/lab/x", True), ("lab-1", "/elsewhere", True)],
}


@pytest.mark.parametrize("text", list(SECURITY_CHECKS), ids=["allow-root", "root-scope"])
def test_the_security_serve_blocks_run(tmp_path: Path, text: str) -> None:
    """The server starts as the block writes it, and its flags took effect: a root
    outside what they allow is 403 before anything is opened; one inside is opened, and
    fails otherwise (a folder absent here; a bucket behind an S3 endpoint on loopback
    where nothing listens, so no request leaves the machine)."""
    cwd, env = _shell(tmp_path)
    port, env = _with_ports(env)
    nothing_there = free_ports(1)[0]
    env |= {"WINDPIPE_S3_ENDPOINT": f"http://127.0.0.1:{nothing_there}",
            "WINDPIPE_S3_ALLOW_HTTP": "true"}
    with _serving(_block("docs/security.md", text), cwd, env, port=port) as url:
        got = {}
        for dataset, root, _forbidden in SECURITY_CHECKS[text]:
            answer = httpx.post(f"{url}/v1/datasets/{dataset}/versions", timeout=30,
                                json={"root": root, "manifest": "manifest.parquet"})
            got[dataset, root] = answer.status_code == 403
    assert got == {(d, r): forbidden for d, r, forbidden in SECURITY_CHECKS[text]}
