"""README and docs/ say what the code does: relative links resolve, anchors exist,
Python snippets compile, and the README's notebook section runs as written."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.docs import code_blocks, finite_losses
from windpipe.sdk import Catalog

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    out = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(page: Path) -> Iterator[str]:
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page: Path):
    problems = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: {dest} does not exist")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not problems, f"{page.name}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_snippets_compile(page: Path):
    for i, (lang, code) in enumerate(FENCE.findall(page.read_text())):
        if lang == "python":
            compile(code, f"{page.name}[snippet {i}]", "exec")


def test_the_checker_catches_a_broken_link_and_anchor(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Title `x`\n\n## Two words\n\n[a](page.md#two-words) [b](gone.md) "
                    "[c](#nope) [d](https://example.com/x)\n")
    assert _anchors(page) == {"title-x", "two-words"}
    assert list(_links(page)) == ["page.md#two-words", "gone.md", "#nope"]


KINDS = ("tutorial", "how-to", "reference", "explanation", "history")


def _documentation_table() -> list[tuple[str, list[str]]]:
    """The README's documentation table: each row's kind and the pages it links."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Documentation"):].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    return [(row.split("|")[1].strip(), [m.group(1) for m in LINK.finditer(row)])
            for row in rows]


def test_the_readme_documentation_table_links_every_page_in_order():
    """Every page of docs/ (and its notebooks) has a row, a reader finds it by kind, and
    the kinds run learn, do, look up, understand."""
    rows = _documentation_table()
    linked = {target.partition("#")[0] for _kind, targets in rows for target in targets}
    pages = {p.relative_to(ROOT).as_posix()
             for p in [*(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.ipynb")]}
    assert sorted(pages - linked) == [], "docs pages missing from the README's table"
    kinds = [kind for kind, _targets in rows]
    assert set(kinds) <= set(KINDS), kinds
    assert kinds == sorted(kinds, key=KINDS.index), kinds


def _readme_notebook_blocks() -> tuple[str, list[str]]:
    """The notebook section's bash block (the one that starts the servers) and its
    python blocks, in order, each unless a docs-test skip marker says why not."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## In a notebook"):text.index("## The REST API")]
    blocks = [b for b in code_blocks(section) if b.skip is None]
    bash = next(b.code for b in blocks if b.lang == "bash" and " serve " in b.code)
    return bash, [b.code for b in blocks if b.lang == "python"]


def test_what_the_readme_notebook_section_writes_is_ignored_by_git():
    """Run in the repository root, the section's dataset, server state and plots stay out
    of ``git status``: .gitignore names each one it writes."""
    bash, python = _readme_notebook_blocks()
    code = "\n".join(python)
    figures = re.search(r"figures = \{(.*?)\}", code, re.S)
    assert figures, "the section's figures dict moved: update this test"
    assert 'savefig(f"{name}.png")' in code
    names = re.findall(r'"(\w+)":', figures.group(1))
    assert names
    written = [*(f"{d.rstrip('/')}/" for d in re.findall(r"(?:synth|--data-dir) (\S+)", bash)),
               *(f"{name}.png" for name in names)]
    assert len(written) == len(names) + 2, bash  # the dataset and the servers' state
    ignored = {line.strip().lstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()}
    assert [w for w in written if w not in ignored] == []


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_ready(url: str, server: subprocess.Popen[bytes]) -> None:
    """Until the server answers, or fails if it exits (pytest-timeout bounds the rest)."""
    while True:
        if server.poll() is not None:
            _out, err = server.communicate()
            raise AssertionError(f"the README's server exited: {err.decode()[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def _venv_in(cwd: Path) -> None:
    """``.venv/bin/windpipe`` and ``.venv/bin/python`` in ``cwd``, as after the quick start
    in the repository root: this checkout's venv, or this interpreter."""
    venv = ROOT / ".venv"
    if (venv / "bin" / "windpipe").exists():
        (cwd / ".venv").symlink_to(venv, target_is_directory=True)
        return
    bin_dir = cwd / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "windpipe").write_text(f"#!/bin/sh\nexec {sys.executable} -m windpipe.cli \"$@\"\n")
    (bin_dir / "windpipe").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)


@pytest.mark.slow
def test_the_readme_notebook_section_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """The section's shell lines run as written from a fresh directory (``&`` lines in
    the background: the servers on :8000 and :8815), then its Python, as written, in
    this process with that directory as the working directory; then the server stops."""
    import matplotlib as mpl  # noqa: PLC0415

    mpl.use("Agg")
    bash, python = _readme_notebook_blocks()
    assert python
    assert any("http://127.0.0.1:8000" in c for c in python)  # the server started above
    taken = [p for p in (8000, 8815) if _port_taken(p)]
    if taken:
        pytest.skip(f"the README's servers need ports {taken}, which are in use here")
    _venv_in(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    servers: list[subprocess.Popen[bytes]] = []
    scope: dict[str, object] = {"__name__": "__readme__"}
    try:
        for line in (ln.strip() for ln in bash.splitlines()):
            if not line or line.startswith("#"):
                continue
            if line.endswith("&"):
                servers.append(subprocess.Popen(
                    ["bash", "-c", f"exec {line[:-1].strip()}"], cwd=tmp_path, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            else:
                subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True,
                               capture_output=True, timeout=300)
        assert len(servers) == 1, bash
        _wait_ready("http://127.0.0.1:8000/readyz", servers[0])
        monkeypatch.chdir(tmp_path)
        for i, code in enumerate(python):
            exec(compile(code, f"README.md[python {i}]", "exec"), scope)
    finally:
        for value in scope.values():
            if isinstance(value, Catalog):
                value.close()
        for server in servers:
            server.send_signal(signal.SIGINT)
            try:
                server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
    finite_losses(scope, where="README.md")
    assert scope["losses"], "no training step"
    for name in ("split", "plan", "batch", "loader"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / ".windpipe").is_dir()  # the server's state: in the fresh directory
