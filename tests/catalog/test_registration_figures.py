"""Registration at collection scale, the parts that replaced per-segment Python:
the batch counts against per-segment numpy, the polars-written canonical JSON against
``canonical_json``, the columnar descriptions against the segments, and the batch
checks against the per-segment checked path they fall back to."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from windpipe.catalog import checks
from windpipe.catalog.canonical import identity_ids, row_json
from windpipe.catalog.described import Described
from windpipe.catalog.figures import count_group, sampling_problem, sampling_steps
from windpipe.catalog.manifest_paths import unique_paths
from windpipe.catalog.problems import ProblemLog
from windpipe.catalog.profile import profile_version
from windpipe.catalog.registration import prepare_version
from windpipe.services.contract.identity import canonical_json, manifest_row_id
from windpipe.services.contract.stats import TIME_COLUMN
from windpipe.services.storage.beneath import Beneath
from windpipe.services.storage.paths import PathEscapeError, normalized_path
from windpipe.services.storage.segments import ColumnInfo, SegmentInfo
from windpipe.services.storage.store import Storage
from windpipe.services.synth import write_synthetic_dataset


def _times(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.cumsum(rng.choice([1.0, 1.0, 1.0, 0.0, -2.0, 40.0, 1e3], size=n))
    t[rng.random(n) < 0.1] = rng.choice([np.nan, np.inf, -np.inf])
    return t


def test_sampling_steps_match_the_rules_segment_by_segment() -> None:
    rng = np.random.default_rng(7)
    lengths = [0, 1, 2, 3, 5, 40, 1, 0, 17, 2, 300]
    parts = [_times(rng, n) for n in lengths] + [np.arange(10.0), np.full(6, np.nan)]
    offsets = np.concatenate([[0], np.cumsum([p.shape[0] for p in parts])])
    gaps, back = sampling_steps(np.concatenate(parts), offsets)
    assert [(int(g), int(b)) for g, b in zip(gaps, back, strict=True)] == [
        sampling_problem(p)[:2] for p in parts]
    assert gaps.sum() > 0
    assert back.sum() > 0


def test_count_group_counts_as_each_segment_alone() -> None:
    rng = np.random.default_rng(3)
    tables = []
    for n in (4, 60, 1, 33):
        x = rng.normal(size=n).astype(np.float32)
        x[rng.random(n) < 0.2] = np.nan
        x[rng.random(n) < 0.1] = np.inf
        k = pa.array(rng.integers(0, 5, size=n), mask=rng.random(n) < 0.3)
        tables.append(pa.table({TIME_COLUMN: _times(rng, n),
                                "x": pa.array(x, mask=rng.random(n) < 0.1), "k": k}))
    names = (TIME_COLUMN, "x", "k")
    found = count_group(tables, names)
    for i, table in enumerate(tables):
        for j, name in enumerate(names):
            values = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            assert found.nan[j, i] == np.isnan(values).sum(), (i, name)
            assert found.inf[j, i] == np.isinf(values).sum(), (i, name)
        times = table.column(TIME_COLUMN).to_numpy()
        expected = sampling_problem(times)
        if expected[0] or expected[1]:
            assert found.irregular[i] == expected
        else:
            assert i not in found.irregular


def test_row_json_is_canonical_json_for_every_type() -> None:
    frame = pl.DataFrame({
        "s": ["a", 'q"uote', "back\\slash", "nl\n", "ü€😀", None, "\x7f", "tab\t"],
        "i": [1, -2, None, 3, 4, 5, 2**62, 0],
        "b": [True, False, None, True, True, False, True, False],
        "f": [1.0, 2.5, None, float("nan"), 1e-5, 3.0, float("inf"), -0.0],
        "d": [datetime.date(2024, 1, 1)] * 8,
        "u": pl.Series(range(8), dtype=pl.UInt8),
        "plain": ["x"] * 8})
    assert row_json(frame).to_list() == [canonical_json(list(r)).decode()
                                         for r in frame.iter_rows()]
    floats = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-5, 1e16, 2.5, 3.0,
              None, 0.1, 1 / 3]
    draw = np.random.default_rng(0).integers(0, len(floats), 300)
    repeated = pl.DataFrame({"f": [floats[k] for k in draw],  # distinct values joined back
                             "g": pl.Series([1.5, 2.0, None, float("nan")] * 75,
                                            dtype=pl.Float32),
                             "s": [f'v"{k % 3}' for k in draw]})
    assert row_json(repeated).to_list() == [canonical_json(list(r)).decode()
                                            for r in repeated.iter_rows()]
    assert row_json(frame.select()).to_list() == []
    ident = pl.DataFrame({"set_id": ["s", 't"x'], "cell_id": ["c", "ü"], "cidx": [0, 7],
                          "protocol": ["p", "cy"]})
    assert identity_ids(ident).to_list() == [manifest_row_id(*r) for r in ident.iter_rows()]


def test_descriptions_held_in_columns_come_back_as_given() -> None:
    cols = (ColumnInfo("t", "double", numeric=True), ColumnInfo("s", "string", numeric=False))
    infos = [SegmentInfo(f"p{k}", "parquet" if k % 2 else "zarr", 10 * k, cols,
                         (k, 10 * k - k) if k % 3 else (10 * k,),
                         "0123456789abcdef" * 2 if k != 4 else "a-longer-fingerprint" * 3)
             for k in range(6)]
    described = Described(7)
    for k in (5, 0):  # any order, one at a time or a batch at a time
        described.add(k, dataclasses.replace(infos[k], columns=tuple(cols)))
    described.add_batch([(3, infos[3]), (6, "segment 'p6' does not exist"), (1, infos[1])])
    described.add_batch([(4, infos[4]), (2, infos[2])])  # a long fingerprint among them
    assert [described.info(k, f"p{k}") for k in range(6)] == infos
    assert described.problems == {6: "segment 'p6' does not exist"}
    assert described.done == 7
    assert described.column_lists == [cols]
    assert list(described) == list(range(6))
    frame = described.frame()
    assert frame.get_column("fingerprint").to_list()[:6] == [i.fingerprint for i in infos]
    assert frame.get_column("chunk_rows").to_list()[:6] == [list(i.chunk_rows) for i in infos]
    assert frame.get_column("format").to_list()[:6] == [i.format for i in infos]


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("collection") / "data"
    write_synthetic_dataset(root, cells=3, cycles=20, rows_per_cycle=40)
    return root


def test_the_batch_checks_give_what_the_checked_path_gives(
        collection: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file checked through the fast path (one read below directories opened once,
    counted by batch) against every file sent to the per-segment checked path."""
    storage = Storage.from_uri(str(collection))
    manifest = pl.read_parquet(collection / "manifest.parquet")
    fast = prepare_version(storage, manifest)
    monkeypatch.setattr(Beneath, "read", lambda *a, **k: None)  # undecided: the usual path
    slow = prepare_version(storage, manifest)
    assert fast.version_id == slow.version_id
    assert fast.segments.equals(slow.segments)
    assert fast.schema == slow.schema
    assert fast.figures is not None
    assert slow.figures is not None
    assert fast.figures.state() == slow.figures.state()
    assert profile_version(storage, fast) == profile_version(
        storage, dataclasses.replace(fast, figures=None))


def test_a_segment_behind_a_link_inside_the_root_registers_as_its_copy(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_synthetic_dataset(root, cells=1, cycles=3, rows_per_cycle=40, zarr_fraction=0.0)
    manifest = pl.read_parquet(root / "manifest.parquet")
    storage = Storage.from_uri(str(root))
    plain = prepare_version(storage, manifest)
    first = manifest.get_column("segment_path")[0]
    moved = root / "elsewhere.parquet"
    (root / first).rename(moved)
    (root / first).symlink_to(moved)
    linked = prepare_version(storage, manifest)
    keep = ["path", "format", "row_count", "chunk_rows"]
    assert linked.segments.select(keep).equals(plain.segments.select(keep))
    assert profile_version(storage, linked) == profile_version(storage, plain)


def test_a_batch_is_checked_on_its_thread_and_counted_there(collection: Path) -> None:
    storage = Storage.from_uri(str(collection))
    manifest = pl.read_parquet(collection / "manifest.parquet")
    paths = manifest.get_column("segment_path").to_list()[:10]
    job = (list(range(10)), paths, manifest.get_column("protocol").to_list()[:10])
    results, tally = checks._local_batch(storage, job)
    assert [k for k, _f in results] == list(range(10))
    parquet = [p for p in paths if p.endswith(".parquet")]
    assert len(tally) == len(parquet)
    assert sorted(tally.unfigured) == [k for k, p in enumerate(paths) if p.endswith(".zarr")]


def test_manifest_paths_are_normalized_and_deduplicated_as_one_by_one() -> None:
    raw = pl.Series("segment_path", [
        "a/b.parquet", "./a/b.parquet", "a//c.parquet", "a/./d.parquet", "/abs.parquet",
        "a\\b.parquet", "s3://bucket/x", "a/../b", "", "   ", "x\x01y", "e/", "é/x.parquet",
        "a b/c.parquet", "a\x7fb", "e", None, "C:/x", "..", ".", "a/b.parquet", "ok.pq"])
    expected = ProblemLog()
    first: dict[str, int] = {}
    for row, path in enumerate(raw.to_list()):  # the rules one path at a time
        try:
            norm = normalized_path(path)
        except PathEscapeError as exc:
            expected.add({"row": row, "p": path, "t": f"invalid segment path: {exc}"})
            continue
        if norm in first:
            expected.add({"row": row, "p": path,
                          "t": f"segment listed twice (first in row {first[norm]})"})
            continue
        first[norm] = row
    log = ProblemLog()
    paths, at = unique_paths(raw, log, lambda row, path, text: {"row": row, "p": path,
                                                                "t": text})
    assert paths.to_list() == list(first)
    assert at.tolist() == list(first.values())
    assert log.problems() == expected.problems()
    assert log.count == expected.count > 10
