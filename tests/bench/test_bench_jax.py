"""The JAX throughput benchmark end to end on a tiny dataset: the numpy baseline and JAX
over the same-host path (the other contenders are the same harness with other readers
or transports: each run is a spawned process, so the test keeps to two) read the same
batches, and the record says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.jax_throughput import CONTENDERS, main

pytestmark = pytest.mark.slow
ONLY = ("jax local",)  # over Flight: the same harness (tests/sdk/test_jax.py: both transports)
assert all(name in {f"{n} {t}" for n, t in CONTENDERS} for name in ONLY)


def test_jax_reads_the_batches_of_the_numpy_baseline(tmp_path: Path) -> None:
    out = tmp_path / "jax.json"
    assert main(["--cells", "2", "--rows-per-cycle", "600", "--batch-size", "8",
                 "--seq-len", "32", "--epochs", "2", "--json", str(out),
                 "--only", *ONLY]) == 0
    results = json.loads(out.read_text())
    assert [r["name"] for r in results] == ["numpy local", *ONLY]
    assert len({(r["batches"], r["checksum"]) for r in results}) == 1
    assert results[0]["batches"] > 2
    assert all(r["tokens"] > 0 and r["peak_rss_bytes"] > 0 and r["cpu_seconds"] > 0
               for r in results)
