"""``python -m bench.healthz`` at its smallest: every kind runs against a real catalog
(SQLite), is polled, and its record has the documented shape (docs/benchmarks.md,
"``/healthz`` under load")."""

from __future__ import annotations

import json
from pathlib import Path

from bench.healthz import BOUND_MS, main


def test_every_kind_is_measured_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "healthz.json"
    main(["--cells", "2", "--cycles", "2", "--rows", "50", "--repeats", "1",
          "--concurrent", "3", "--big-inline", "50", "--diagnose", "--json", str(out)])
    record = json.loads(out.read_text())
    assert (record["database"], record["segments"], record["bound_ms"]) == (
        "sqlite", 5, BOUND_MS)
    assert record["gc_freeze"] is True
    kinds = [k["kind"] for k in record["kinds"]]
    assert [k.split(",")[0].split(" x")[0] for k in kinds] == [
        "idle (no request)", "register by pattern", "register by manifest file",
        "register by inline rows", "refused inline rows", "split", "split stats", "plan",
        "schedule pages", "3 identical registrations"]
    for kind in record["kinds"]:
        assert kind["polls"] > 0, kind
        assert kind["p50_ms"] <= kind["p99_ms"] <= kind["max_ms"], kind
        assert kind["under_bound"] == (kind["max_ms"] < BOUND_MS), kind
    assert sum(k["gc_count"] for k in record["kinds"]) > 0  # the server's collections seen
    assert set(record["late_loop_samples"]) == set(kinds)
