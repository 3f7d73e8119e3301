"""``python -m bench.ui`` at its smallest: every page is measured against a real catalog
and the record has the shape docs/benchmarks.md describes."""

from __future__ import annotations

import json
from pathlib import Path

from bench.ui import main


def test_every_page_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "ui.json"
    main(["--cells", "2", "--cycles", "2", "--rows-per-cycle", "3000", "--repeats", "1",
          "--json", str(out)])
    record = json.loads(out.read_text())
    names = [p["page"] for p in record["pages"]]
    assert len(names) == 10
    assert names[0] == "datasets"
    assert names[8].startswith("segment (")
    for page in record["pages"]:
        assert page["bytes"] > 0, page
        assert page["median_ms"] <= page["max_ms"], page
