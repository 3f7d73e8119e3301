"""The benchmark harness end to end on a tiny dataset: every record has its documented
structure and positive, consistent numbers (docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.__main__ import main
from bench.data import ensure_dataset
from bench.planning import compare_revision, planning_times
from bench.server import data_bytes
from bench.windpipe_contenders import concurrency, local_concurrency
from bench.workload import EPOCHS, build_workload

CONTENDERS = ("windpipe_local", "numpy_strided", "numpy_memmap", "windpipe_flight_warm",
              "windpipe_flight_cold", "windpipe_full_in_mem", "full_in_mem_torch",
              "windowed_parquet", "flight_ceiling", "memcpy_ceiling")
SERVER_FIELDS = ("server_peak_rss_bytes", "server_cpu_s", "server_base_rss_bytes",
                 "cache_budget_bytes", "cache_peak_bytes", "storage_bytes")


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    json_path = out / "result.json"
    with pytest.MonkeyPatch.context() as env:  # as from a user's shell: no allow-list set
        env.delenv("WINDPIPE_ALLOWED_ROOTS", raising=False)
        code = main(["--rows", "200000", "--out", str(out), "--json", str(json_path),
                     "--max-seconds", "1", "--max-batches", "24", "--only", *CONTENDERS])
    assert code == 0
    assert json_path.with_suffix(".md").read_text().count("| windpipe_flight_warm |") == 1
    assert json_path.with_suffix(".png").stat().st_size > 1000
    loaded: dict[str, Any] = json.loads(json_path.read_text())
    return loaded


@pytest.mark.slow
@pytest.mark.timeout(900)  # its fixture runs every contender: minutes on a loaded machine
def test_record_structure_and_numbers(record: dict[str, Any]) -> None:
    assert set(record) >= {"contenders", "concurrency", "local_concurrency", "planning",
                           "machine", "date", "rows", "batch", "ratios"}
    assert record["date"].startswith("20")
    assert record["machine"]["cpus"] >= 1
    assert record["batch"] == {"batch_size": 64, "seq_len": 1024, "inputs": 3, "targets": 1,
                               "strategy": "shuffled"}
    assert set(record["contenders"]) == set(CONTENDERS)
    for name, r in record["contenders"].items():
        assert "error" not in r, f"{name}: {r.get('error')}"
        for key in ("tokens_per_s", "batches_per_s", "peak_rss_bytes", "cpu_s",
                    "tokens_per_cpu_s", "run_cpu_s", "tokens_per_process_cpu_s"):
            assert r[key] > 0, (name, key, r[key])
        assert r["tokens_per_s"] == pytest.approx(r["batches_per_s"] * 64 * 1024)
        assert r["batches"] >= 1
    for name in ("windpipe_local", "windpipe_flight_warm", "windpipe_flight_cold",
                 "windpipe_full_in_mem"):
        r = record["contenders"][name]
        for key in SERVER_FIELDS:
            assert r[key] > 0, (name, key)
        # the budget is one knob: the cache never holds more than it
        assert r["cache_peak_bytes"] <= r["cache_budget_bytes"]
        assert r["peak_rss_bytes"] >= r["server_peak_rss_bytes"]
    cold = record["contenders"]["windpipe_flight_cold"]
    warm = record["contenders"]["windpipe_flight_warm"]
    assert cold["cache_budget_bytes"] < warm["cache_budget_bytes"]
    assert record["ratios"]["windpipe_flight_warm/flight_ceiling"] == pytest.approx(
        warm["tokens_per_s"] / record["contenders"]["flight_ceiling"]["tokens_per_s"])
    local, memmap = record["contenders"]["windpipe_local"], record["contenders"]["numpy_memmap"]
    assert record["ratios"]["windpipe_local/numpy_memmap"] == pytest.approx(
        local["tokens_per_s"] / memmap["tokens_per_s"])
    assert record["ratios"]["cpu/windpipe_local/numpy_memmap"] == pytest.approx(
        local["tokens_per_cpu_s"] / memmap["tokens_per_cpu_s"])
    strided = record["contenders"]["numpy_strided"]
    assert record["ratios"]["windpipe_local/numpy_strided"] == pytest.approx(
        local["tokens_per_s"] / strided["tokens_per_s"])
    assert record["ratios"]["cpu/windpipe_local/numpy_strided"] == pytest.approx(
        local["tokens_per_cpu_s"] / strided["tokens_per_cpu_s"])
    assert local["tier_bytes"] > 0
    assert local["storage_bytes"] > 0  # the server filled the tier, the client only mapped it
    # every contender reads the same windows in the same (shuffled) order: the first value
    # of every batch sums alike over the same number of batches
    same = [n for n in ("windpipe_local", "numpy_strided", "numpy_memmap", "windpipe_flight_warm",
                        "windpipe_flight_cold", "windpipe_full_in_mem", "full_in_mem_torch")
            if record["contenders"][n]["batches"] == 24]
    assert len(same) >= 4
    checks = [record["contenders"][n]["checksum"] for n in same]
    assert checks == pytest.approx([checks[0]] * len(checks))


@pytest.mark.slow
def test_the_workload_is_the_planners_shuffled_schedule(tmp_path: Path) -> None:
    root = ensure_dataset(tmp_path / "data", cycling_rows=200_000)
    w = build_workload(root, batch_size=4, seq_len=64)
    assert w.lane_stream.shape[0] == EPOCHS
    orders = {tuple(w.lane_offset[e].tolist()) for e in range(EPOCHS)}
    assert len(orders) == EPOCHS  # reshuffled every epoch
    # the same windows every epoch (phase_shift off), each a full lane inside its stream
    pairs = [sorted(zip(w.lane_stream[e].tolist(), w.lane_offset[e].tolist(), strict=True))
             for e in range(EPOCHS)]
    assert all(p == pairs[0] for p in pairs)
    rows = np.asarray(w.stream_rows)
    assert (w.lane_offset[0] % 64 == 0).all()
    assert (w.lane_offset[0] + 64 + 1 <= rows[w.lane_stream[0]]).all()


@pytest.mark.slow
def test_local_consumers_share_one_tier(tmp_path: Path) -> None:
    root = ensure_dataset(tmp_path / "data", cycling_rows=200_000)
    workload = build_workload(root)
    # two consumers: the sharing is the claim (one consumer alone is the plain local row)
    rows = local_concurrency(workload, consumers=(2,), max_seconds=1.0)
    assert [r["consumers"] for r in rows] == [2]
    for r in rows:
        assert r["tokens_per_s"] > 0
        assert r["batches"] >= 1
        # decoded once, whatever the consumers: one pass read from storage, one tier
        assert 0 < r["storage_bytes"] <= 2 * data_bytes(workload)
        assert r["tier_bytes"] >= data_bytes(workload)
        assert 0 < r["consumers_pss_added_bytes"] <= r["consumers_pss_bytes"]


@pytest.mark.slow
def test_concurrency_keeps_storage_reads_flat(tmp_path: Path) -> None:
    root = ensure_dataset(tmp_path / "data", cycling_rows=200_000)
    workload = build_workload(root)
    rows = concurrency(workload, consumers=(2,), max_seconds=1.0)
    assert [r["consumers"] for r in rows] == [2]
    for r in rows:
        assert r["tokens_per_s"] > 0
        assert r["batches"] >= 1
        # one shared cache: at most one pass of the data is read, whatever the consumers
        assert 0 < r["storage_bytes"] <= 2 * data_bytes(workload)


@pytest.mark.slow
@pytest.mark.postgres
def test_planning_times(tmp_path: Path) -> None:
    rows = planning_times((1_000,), work_dir=tmp_path)
    assert [(r["windows"], r["database"]) for r in rows] == [(1_000, "sqlite"),
                                                              (1_000, "postgresql")]
    for r in rows:
        assert "error" not in r, r
        assert r["seconds"] > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_planning_side_by_side_with_a_revision(tmp_path: Path) -> None:
    rows = compare_revision("HEAD", [500], work_dir=tmp_path, repeats=1)
    assert [(r["windows"], r["database"]) for r in rows] == [(500, "sqlite"),
                                                             (500, "postgresql")]
    for r in rows:
        assert len(r["runs"]["this"]) == len(r["runs"]["rev"]) == 1
        assert r["this_s"] > 0
        assert r["rev_s"] > 0
        assert r["ratio"] == pytest.approx(r["this_s"] / r["rev_s"])
