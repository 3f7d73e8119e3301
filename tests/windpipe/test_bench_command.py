"""``windpipe bench`` and ``python -m bench`` as users run them: the benchmarks live only
in a checkout, so outside one the command refuses up front, and a run whose contenders
failed says so in its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main

REPO = Path(__file__).resolve().parents[2]
WINDPIPE_SCRIPT = Path(sys.executable).parent / "windpipe"  # the console script users run


def _env_without_the_checkout() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_bench_is_not_importable_outside_the_checkout(tmp_path: Path):
    # the premise of the refusal below: bench/ is not packaged (pyproject's packages.find
    # leaves it out, so neither the wheel nor the editable install maps it) and a process
    # started elsewhere does not find it
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('bench'))"],
        cwd=tmp_path, env=_env_without_the_checkout(), capture_output=True, text=True,
        check=True)
    assert probe.stdout.strip() == "None"


def test_windpipe_bench_outside_a_checkout_refuses_before_running(tmp_path: Path):
    assert WINDPIPE_SCRIPT.is_file(), WINDPIPE_SCRIPT
    out = subprocess.run([str(WINDPIPE_SCRIPT), "bench", "--quick"], cwd=tmp_path,
                         env=_env_without_the_checkout(), capture_output=True, text=True,
                         check=False, timeout=600)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "python -m bench --quick" in out.stderr
    assert "checkout" in out.stderr
    assert str(tmp_path) in out.stderr  # where it looked
    assert list(tmp_path.iterdir()) == []  # no dataset prepared for contenders that fail


def test_windpipe_bench_from_the_repository_root_reaches_the_benchmark():
    # the console script's sys.path starts at its bin/ folder: the checkout it runs in counts
    out = subprocess.run([str(WINDPIPE_SCRIPT), "bench", "--help"], cwd=REPO,
                         env=_env_without_the_checkout(), capture_output=True, text=True,
                         check=True)
    assert out.stdout.startswith("usage: python -m bench")


@pytest.mark.slow
def test_a_run_with_a_failed_contender_exits_non_zero(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    # the contender's process starts where bench does not import (the failure users met
    # running outside a checkout): its record has an error, and so does the exit status
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    json_path = tmp_path / "out" / "bench.json"
    code = bench_main(["--rows", "1", "--out", str(tmp_path / "out"), "--max-seconds", "1",
                       "--max-batches", "1", "--only", "numpy_memmap"])
    assert code == 1
    assert json_path.is_file()  # the record is written all the same
    assert "bench.runner" in json_path.read_text()
