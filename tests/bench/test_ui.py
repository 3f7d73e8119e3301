"""``python -m bench.ui`` at its smallest: every page is measured against a real catalog
and the record has the shape docs/benchmarks.md describes."""

from __future__ import annotations

import json
from pathlib import Path

from bench.ui import main


def test_every_page_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "ui.json"
    main(["--segments", "150", "--long-rows", "3000", "--repeats", "1", "--json", str(out)])
    record = json.loads(out.read_text())
    names = [p["page"] for p in record["pages"]]
    assert len(names) == 12
    assert names[0] == "datasets"
    assert [n for n in names if n.startswith("segment (")][-1] == "segment (3,000 rows, windows)"
    for page in record["pages"]:
        assert page["bytes"] > 0, page
        assert 0 < page["median_ms"] <= page["p95_ms"], page
