"""``python -m bench.stats`` on the smallest benchmark dataset: its record has the
documented shape, and windpipe's statistics agree with the polars query they are timed
against (docs/benchmarks.md, "Statistics of a split's side")."""

from __future__ import annotations

import json
from pathlib import Path

from bench.stats import COLUMNS, main


def test_the_record_and_the_agreement(tmp_path: Path) -> None:
    out = tmp_path / "stats.json"
    assert main(["--rows", "1", "--rounds", "1", "--out", str(tmp_path),
                 "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["columns"] == list(COLUMNS)
    assert record["rows"] > 1_000_000
    assert set(record["seconds"]) == {"windpipe_stats", "polars_stats", "polars_scan"}
    assert all(s > 0 for s in record["seconds"].values())
    assert record["ratios"]["windpipe_stats/polars_scan"] == (
        record["seconds"]["windpipe_stats"] / record["seconds"]["polars_scan"])
    assert record["agreement"]["counts_equal"] == 1.0
    assert record["agreement"]["max_relative_difference"] < 1e-6  # polars sums float32
