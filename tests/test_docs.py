"""README and docs/ say what the code does: relative links resolve, anchors exist,
Python snippets compile, and the README's notebook section runs as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.servers import embedded_services

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


def _readme_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## In a notebook"):text.index("## The REST API")]
    return FENCE.findall(section)


@pytest.mark.slow
def test_the_readme_notebook_section_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """The bash block's ``windpipe synth`` line and the Python block, run as written;
    only the servers are ours (port 0 instead of 8000/8815)."""
    import matplotlib as mpl  # noqa: PLC0415

    mpl.use("Agg")
    (bash_lang, bash), (py_lang, code) = _readme_blocks()
    assert (bash_lang, py_lang) == ("bash", "python")
    synth = next(line for line in bash.splitlines() if " synth " in line)
    argv = shlex.split(synth)
    assert argv[0] == ".venv/bin/windpipe"
    subprocess.run([sys.executable, "-m", "windpipe.cli", *argv[1:]], cwd=tmp_path,
                   check=True, capture_output=True)
    assert "http://127.0.0.1:8000" in code
    monkeypatch.chdir(tmp_path)
    with embedded_services(tmp_path / ".windpipe") as url:
        scope: dict[str, object] = {"__name__": "__readme__"}
        exec(compile(code.replace("http://127.0.0.1:8000", url), "README", "exec"), scope)
        scope["cat"].close()  # type: ignore[attr-defined]
    loss = scope["loss"]
    assert bool(loss.isfinite())  # type: ignore[attr-defined]
    for name in ("split", "plan", "batch", "loader"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
