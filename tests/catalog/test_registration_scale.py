"""Registration at collection scale: many small segments read in bounded
batches, with the same version, rows, schema and profile as one segment at a time."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from windpipe.catalog import checks
from windpipe.catalog.batched import batched_map
from windpipe.catalog.profile import profile_version
from windpipe.catalog.registration import PreparedVersion, prepare_version
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.identity import canonical_json
from windpipe.services.storage.formats import parquet as parquet_format
from windpipe.services.storage.formats import zarr as zarr_format
from windpipe.services.storage.segments import inspect_segment
from windpipe.services.storage.store import Storage
from windpipe.services.synth import write_synthetic_dataset

# recorded, for this synthetic dataset, on the code before segments were read in batches
_CONTENT_DIGEST = "33cacd0f0026125739e3de1ecb8034386ea89eb158c5cfe17aede8b6f0f085e7"
_PROFILE_DIGEST = "4827339ee223f3d606ce0d5a8d346dbcb880e10b58f2162e901ae43f55778efb"


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """297 small segments (parquet and zarr) of 3 cells x 40 cycles."""
    root = tmp_path_factory.mktemp("many") / "data"
    write_synthetic_dataset(root, cells=3, cycles=40, rows_per_cycle=40)
    return root


def _manifest(root: Path) -> pl.DataFrame:
    return pl.read_parquet(root / "manifest.parquet")


def _content(prepared: PreparedVersion) -> str:
    payload = {"segments": [list(r) for r in prepared.segments.iter_rows()],
               "rows": [list(r) for r in prepared.manifest_rows.iter_rows()],
               "schema": prepared.schema}
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def test_many_segments_store_the_same_rows_as_before(many: Path) -> None:
    storage = Storage.from_uri(str(many))
    prepared = prepare_version(storage, _manifest(many))
    assert prepared.segments.height == 297
    assert _content(prepared) == _CONTENT_DIGEST  # segments, manifest rows, schema
    profile = profile_version(storage, prepared).model_dump(mode="json")
    assert hashlib.sha256(canonical_json(profile)).hexdigest() == _PROFILE_DIGEST
    # one thread, one segment a batch: the same version
    again = prepare_version(storage, _manifest(many), workers=1)
    assert again.version_id == prepared.version_id
    assert again.segments.equals(prepared.segments)
    assert again.manifest_rows.equals(prepared.manifest_rows)


def test_counts_match_an_independent_listing(many: Path) -> None:
    prepared = prepare_version(Storage.from_uri(str(many)), _manifest(many))
    seg = prepared.segments
    parquet = sorted(p.relative_to(many).as_posix() for p in many.rglob("*.parquet")
                     if p.name != "manifest.parquet")
    zarr = sorted(p.relative_to(many).as_posix() for p in many.rglob("*.zarr"))
    assert sorted(seg.get_column("path").to_list()) == sorted(parquet + zarr)
    rows = dict(zip(seg.get_column("path").to_list(), seg.get_column("row_count").to_list(),
                    strict=True))
    for rel in parquet:
        assert rows[rel] == pq.ParquetFile(many / rel).metadata.num_rows


def test_fast_paths_describe_segments_as_the_slow_ones(
        many: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = Storage.from_uri(str(many))
    paths = _manifest(many).get_column("segment_path").to_list()
    fast = [inspect_segment(storage, p) for p in paths]
    assert {i.format for i in fast} == {"parquet", "zarr"}
    monkeypatch.setattr(parquet_format, "_local_tail", lambda *a, **k: None)
    monkeypatch.setattr(zarr_format, "layout_from_docs", lambda *a: None)
    assert [inspect_segment(storage, p) for p in paths] == fast


def test_the_pool_is_bounded(many: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    active = 0
    most = 0
    lock = threading.Lock()
    real = checks._local_batch

    def counting(storage: Storage, job: checks.Job, **options: object) -> object:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.005)
        try:
            return real(storage, job, **options)  # type: ignore[arg-type]
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(checks, "_local_batch", counting)
    monkeypatch.setattr(checks, "LOCAL_BATCH", 8)  # 297 segments: 38 batches
    storage = Storage.from_uri(str(many))
    prepare_version(storage, _manifest(many), workers=3)
    assert 1 <= most <= 3
    most = 0
    prepare_version(storage, _manifest(many))
    assert most <= checks.LOCAL_WORKERS


def test_batched_map_keeps_order_and_stops() -> None:
    out = list(batched_map(lambda x: x * 2, range(100), workers=3, batch=7))
    assert out == [(x, 2 * x) for x in range(100)]
    seen: list[int] = []
    for x, _ in batched_map(lambda x: x, range(1000), workers=2, batch=10,
                            stop=lambda: len(seen) >= 5):
        seen.append(x)
    assert 5 <= len(seen) < 1000  # no batch submitted after the stop, the rest left out


def test_a_missing_segment_in_the_middle_is_named(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_synthetic_dataset(root, cells=3, cycles=40, rows_per_cycle=40)
    frame = _manifest(root)
    parquet_rows = [i for i, p in enumerate(frame.get_column("segment_path").to_list())
                    if p.endswith(".parquet")]
    row = parquet_rows[len(parquet_rows) // 2]
    path = frame.get_column("segment_path")[row]
    (root / path).unlink()
    with pytest.raises(WindpipeError) as caught:
        prepare_version(Storage.from_uri(str(root)), frame)
    assert caught.value.type == ErrorType.INVALID_MANIFEST
    details = caught.value.details
    assert details["problem_count"] == 1
    assert details["problems"] == [{"row": row, "segment_path": path,
                                    "problem": f"segment {path!r} does not exist"}]


def test_the_checks_profile_small_parquet_files_as_a_second_read_would(many: Path) -> None:
    storage = Storage.from_uri(str(many))
    prepared = prepare_version(storage, _manifest(many))
    formats = prepared.segments.get_column("format")
    assert prepared.figures is not None  # every small local parquet file, no zarr
    assert len(prepared.figures) == (formats == "parquet").sum()
    assert sorted(prepared.figures.unfigured) == (formats == "zarr").arg_true().to_list()
    fused = profile_version(storage, prepared)
    reread = profile_version(storage, dataclasses.replace(prepared, figures=None))
    assert fused == reread


def test_a_column_of_mixed_types_is_profiled_as_before(tmp_path: Path) -> None:
    """A column stored as int64 in one segment and float64 in another is read in both
    (its schema type is mixed): the figures of the int64 one lack it, so it is read."""
    root = tmp_path / "data"
    (root / "s").mkdir(parents=True)
    t = np.arange(50, dtype=np.float64)
    t[30:] += 100.0  # a gap
    n = pl.Series("n", [1, None] * 25, dtype=pl.Int64)  # counted from the footers
    pl.DataFrame({"time_s": t, "x": np.arange(50, dtype=np.int64), "n": n}).write_parquet(
        root / "s/a.parquet")
    pl.DataFrame({"time_s": t, "x": [1.0, float("inf"), None, float("nan")] * 12 + [0.0, 0.0],
                  "n": n}).write_parquet(root / "s/b.parquet")
    manifest = pl.DataFrame({"set_id": ["s", "s"], "cell_id": ["c", "c"], "cidx": [0, 1],
                             "protocol": ["p", "p"],
                             "segment_path": ["s/a.parquet", "s/b.parquet"]})
    storage = Storage.from_uri(str(root))
    prepared = prepare_version(storage, manifest)
    assert prepared.schema["p"][1]["dtype"].startswith("mixed(")
    fused = profile_version(storage, prepared)
    assert fused == profile_version(storage, dataclasses.replace(prepared, figures=None))
    assert [(c.column, c.nulls, c.non_finite) for c in fused.columns] == [
        ("n", 50, 0), ("time_s", 0, 0), ("x", 24, 12)]
    assert fused.irregular_segments == {"p": 2}
    assert fused.null_counts_from_footer == 2
