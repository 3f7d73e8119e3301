"""``windpipe demo`` end to end, as a user runs it: a subprocess from an empty directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end_and_stops_its_servers(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "windpipe.cli", "demo", "--rows-per-cycle", "2000",
         "--data-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for step in range(1, 8):
        assert f"[{step}/7]" in out, out
    assert "PlanReport" in out
    streamed = next(line for line in out.splitlines() if line.startswith("[6/7]"))
    batches = int(streamed.split()[2])
    assert batches > 0
    assert "M tokens/s" in streamed
    valid = next(line for line in out.splitlines() if "batch.target_valid" in line)
    assert 0 < int(valid.split()[0].replace(",", "")) <= int(streamed.split()[4].replace(",", ""))
    aligned = next(line for line in out.splitlines() if line.startswith("[7/7]"))
    found = re.search(r"(\d+) batches, hppc data in (\d+) of (\d+) lanes", aligned)
    assert found is not None, aligned
    n_aligned, with_hppc, lanes = (int(x) for x in found.groups())
    assert n_aligned > 0
    assert 0 < with_hppc < lanes  # hppc runs on only some cycles: has_data is mixed
    assert "demo finished; servers stopped" in out
    # no server log line among the steps (nor below them): the demo's servers log
    # nothing under WARNING (windpipe/services/logging.py)
    log_line = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[(debug|info)\s*\]|^INFO[: ]", re.M)
    assert not log_line.search(out), out
    assert not log_line.search(proc.stderr), proc.stderr
    assert (tmp_path / "demo" / "dataset" / "manifest.parquet").exists()
