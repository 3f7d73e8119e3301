"""The benchmark's report marks each target pass or FAIL, and a run says what it is doing
as it goes (bench/report.py, bench/__main__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import bench.__main__ as bench_main
import bench.data
import bench.workload
from bench.report import ratio_rows, ratio_table, verdict, write_markdown

_RESULT = {"batches": 10, "seconds": 1.0, "run_cpu_s": 1.0, "cpu_s": 1.0,
           "peak_rss_bytes": 1 << 20, "tokens_per_batch": 100}


def _record(ratios: dict[str, float]) -> dict[str, Any]:
    row = {"tokens_per_s": 1e6, "batches_per_s": 10.0, "tokens_per_cpu_s": 1e6,
           "peak_rss_bytes": 1 << 20, "cpu_s": 1.0}
    return {"contenders": {"windpipe_local": row, "numpy_memmap": row},
            "machine": {"cpus": 2}, "date": "2026-01-01T00:00:00+00:00", "rows": 100,
            "batch": {"batch_size": 64, "seq_len": 1024}, "ratios": ratios}


def test_each_target_is_marked() -> None:
    assert verdict(1.2, 1.0) == "pass"
    assert verdict(1.0, 1.0) == "pass"
    assert verdict(0.59, 0.6) == "FAIL"
    assert verdict(3.0, None) == ""
    record = _record({"windpipe_local/numpy_memmap": 0.8, "cpu/windpipe_local/numpy_memmap": 0.7,
                      "windpipe_full_in_mem/full_in_mem_torch": 4.0,
                      "windpipe_flight_warm/numpy_memmap": 0.3})
    rows = ratio_rows(record)
    assert [(k, mark) for k, _v, _c, _g, mark in rows] == [
        ("windpipe_local/numpy_memmap", "FAIL"),
        ("windpipe_full_in_mem/full_in_mem_torch", "pass"),
        ("windpipe_flight_warm/numpy_memmap", "")]
    table = ratio_table(record)
    assert table[0].endswith("| target | verdict |")
    assert "| windpipe_local/numpy_memmap | 0.80x | 0.70x | >= 1.0x | FAIL |" in table
    assert "| windpipe_full_in_mem/full_in_mem_torch | 4.00x |  | >= 1.5x | pass |" in table


def test_the_markdown_has_the_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "bench.md"
    write_markdown(_record({"windpipe_local/numpy_memmap": 1.3}), path)
    assert "| windpipe_local/numpy_memmap | 1.30x |  | >= 1.0x | pass |" in path.read_text()


class _Workload:
    n_batches, batch_size, seq_len, tokens_per_batch = 4, 64, 1024, 65536
    stream_rows = (100,)
    strategy = "shuffled"

    def save(self, path: Path) -> None:
        np.save(path.with_suffix(".npy"), np.zeros(1))


def test_a_run_prints_its_progress_and_the_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The orchestration only: the contenders' processes are stood in for (their own
    tests run them, tests/bench/test_bench_quick.py)."""
    monkeypatch.setattr(bench.data, "ensure_dataset", lambda path, **_kw: path)
    monkeypatch.setattr(bench.workload, "build_workload", lambda _root: _Workload())
    speed = {"windpipe_local": 1.5, "numpy_memmap": 1.0}

    def run(name: str, _path: Path, **_kw: Any) -> dict[str, Any]:
        out = dict(_RESULT, seconds=1.0 / speed[name], run_cpu_s=1.0 / speed[name])
        out["tokens_per_s"] = out["batches"] * 100 / out["seconds"]
        out["batches_per_s"] = out["batches"] / out["seconds"]
        out["tokens_per_cpu_s"] = out["batches"] * 100 / out["run_cpu_s"]
        return out

    monkeypatch.setattr(bench_main, "run_contender", run)
    code = bench_main.main(["--only", "windpipe_local", "numpy_memmap", "--out", str(tmp_path),
                            "--rows", "1000"])
    assert code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("preparing the dataset (1,000 cycling rows")
    first = next(i for i, ln in enumerate(lines) if ln.startswith("[1/2] windpipe_local: up to"))
    second = next(i for i, ln in enumerate(lines) if ln.startswith("[2/2] numpy_memmap: up to"))
    assert first < second
    assert "| windpipe_local/numpy_memmap | 1.50x | 1.50x | >= 1.0x | pass |" in out
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["ratios"]["windpipe_local/numpy_memmap"] == pytest.approx(1.5)
