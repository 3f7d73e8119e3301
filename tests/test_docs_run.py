"""Every Python block of docs/sdk.md and docs/data.md runs as written, executed in order
in one namespace per page (as a reader pastes them into one notebook), against a real
catalog and Flight server (``embedded_services``) on free ports, from a fresh working
directory holding ``demo-data`` (``windpipe synth demo-data --rows-per-cycle 2000``).

The one change made to a block is the catalog's URL (``http://127.0.0.1:8000`` and
``http://localhost:8000`` become the fixture's). A block that cannot run in a test
says why right above its fence (``<!-- docs-test: skip: ... -->``,
``tests/fixtures/docs.py``) and is skipped, exactly those. A block that trains
(``.backward(``) must leave finite losses behind.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.fixtures.docs import code_blocks, finite_losses, page_blocks
from tests.fixtures.servers import embedded_services
from windpipe.sdk import Catalog
from windpipe.services.synth import write_synthetic_dataset

ROOT = Path(__file__).resolve().parents[1]
RUN_PAGES = ("sdk.md", "data.md")  # data.md: when it exists
URLS = ("http://127.0.0.1:8000", "http://localhost:8000")


def _pages() -> list[Path]:
    return [ROOT / "docs" / name for name in RUN_PAGES if (ROOT / "docs" / name).exists()]


def _close_catalogs(scope: dict[str, object]) -> None:
    for value in scope.values():
        if isinstance(value, Catalog):
            value.close()


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import matplotlib as mpl  # noqa: PLC0415 - the plot extra, only for this test

    mpl.use("Agg")
    blocks = page_blocks(page, "python")
    assert blocks, f"{page.name} has no python block"
    write_synthetic_dataset(tmp_path / "demo-data", rows_per_cycle=2000, seed=0)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "__docs__"}
    ran = trained = 0
    with embedded_services(tmp_path / ".windpipe") as url, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DataWarning etc.: what the page says, not errors
        try:
            for block in blocks:
                if block.skip is not None:
                    continue
                code = block.code
                for written in URLS:
                    code = code.replace(written, url)
                where = f"docs/{page.name}:{block.line}"
                exec(compile(code, where, "exec"), scope)  # the docs, as written
                ran += 1
                if block.trains:
                    finite_losses(scope, where=where)
                    trained += 1
        finally:
            _close_catalogs(scope)
    assert ran > 0
    if page.name == "sdk.md":
        assert trained >= 3  # the training loop, the aligned one and Keras'


def test_sdk_md_skips_only_the_blocks_that_say_why() -> None:
    blocks = page_blocks(ROOT / "docs" / "sdk.md", "python")
    skipped = [b for b in blocks if b.skip is not None]
    assert [b.skip for b in skipped] == [
        "the compose deployment's names (flight-1, flight-2) and ports"]
    assert len(blocks) - len(skipped) >= 4


def test_a_skip_marker_needs_a_reason() -> None:
    text = "a\n<!-- docs-test: skip: needs S3 -->\n```python\nx = 1\n```\n\n```python\ny\n```\n"
    blocks = code_blocks(text)
    assert [(b.skip, b.line) for b in blocks] == [("needs S3", 3), (None, 7)]
    with pytest.raises(ValueError, match="must say why"):
        code_blocks("<!-- docs-test: skip:  -->\n```python\nx\n```\n")


def test_finite_losses_finds_a_nan() -> None:
    import torch  # noqa: PLC0415

    assert finite_losses({"loss": torch.tensor(0.5), "history": [(0.4, 0.3)]}, where="t") == 3
    with pytest.raises(AssertionError, match="non-finite"):
        finite_losses({"losses": [0.1, float("nan")]}, where="t")
    with pytest.raises(AssertionError, match="no loss value"):
        finite_losses({"model": 1}, where="t")
