"""bench/collection.py: the served registration (the catalog in a process of its
own registers a small collection and reports its times and peak memory), and the cold
epoch, with and without the version's pack, streams the same rows."""

from __future__ import annotations

from pathlib import Path

from bench.collection import cold_epoch, served_registration
from windpipe.services.synth import write_synthetic_dataset


def test_served_registration_reports_times_and_the_servers_peak_memory(tmp_path: Path) -> None:
    root = tmp_path / "small"
    write_synthetic_dataset(root, cells=2, cycles=3, rows_per_cycle=60, zarr_fraction=0.0)
    run = served_registration(root, work=tmp_path / "catalog", progress=False)
    assert run["segments"] > 10
    assert all(run[k] > 0 for k in ("register", "register_cpu", "index", "split", "plan"))
    assert 0 < run["peak_rss_idle"] <= run["peak_rss_registered"] <= run["peak_rss"]


def test_the_cold_epoch_streams_the_same_rows_with_and_without_the_pack(tmp_path: Path) -> None:
    root = tmp_path / "small"
    write_synthetic_dataset(root, cells=3, cycles=4, rows_per_cycle=60, zarr_fraction=0.0)
    packed = cold_epoch(root, work=tmp_path / "packed", name="packed")
    files = cold_epoch(root, work=tmp_path / "files", name="files", packs=False)
    assert (tmp_path / "packed" / "packs").is_dir()
    assert not any((tmp_path / "files" / "packs").glob("v-*"))
    for key in ("rows", "windows", "batches"):
        assert packed[key] == files[key] > 0, key
    assert packed["rows"] <= 32 * packed["windows"]  # real steps: at most T = 32 a window
