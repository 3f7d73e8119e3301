"""The JAX throughput benchmark end to end on a tiny dataset: every contender (numpy,
JAX and torch over the same-host path, numpy and JAX over Flight) reads the same
batches, and the record says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.jax_throughput import CONTENDERS, main

pytestmark = pytest.mark.slow


def test_every_contender_reads_the_same_batches(tmp_path: Path) -> None:
    out = tmp_path / "jax.json"
    assert main(["--cells", "2", "--rows-per-cycle", "600", "--batch-size", "8",
                 "--seq-len", "32", "--epochs", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert [r["name"] for r in results] == [f"{n} {t}" for n, t in CONTENDERS]
    assert len({(r["batches"], r["checksum"]) for r in results}) == 1
    assert results[0]["batches"] > 2
    assert all(r["tokens"] > 0 and r["peak_rss_bytes"] > 0 for r in results)
