"""bench/collection.py's served registration (issue 25): the catalog in a process of its
own registers a small collection and reports its times and peak memory."""

from __future__ import annotations

from pathlib import Path

from bench.collection import served_registration
from services.synth import write_synthetic_dataset


def test_served_registration_reports_times_and_the_servers_peak_memory(tmp_path: Path) -> None:
    root = tmp_path / "small"
    write_synthetic_dataset(root, cells=2, cycles=3, rows_per_cycle=60, zarr_fraction=0.0)
    run = served_registration(root, work=tmp_path / "catalog", progress=False)
    assert run["segments"] > 10
    assert all(run[k] > 0 for k in ("register", "register_cpu", "index", "split", "plan"))
    assert 0 < run["peak_rss_idle"] <= run["peak_rss_registered"] <= run["peak_rss"]
