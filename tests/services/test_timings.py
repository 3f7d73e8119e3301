"""Process-wide latency histograms (windpipe/services/timings.py), written as Prometheus
histograms by prometheus_client and read back with its parser: cumulative buckets with
``le`` semantics, counts and sums per label set; and a real chunk read timed by op."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.data import write_parquet_segment
from windpipe.services.storage.segments import inspect_segment, read_chunk
from windpipe.services.storage.store import Storage
from windpipe.services.timings import (
    STORAGE_READ_ERRORS,
    STORAGE_READS,
    Counts,
    Timings,
    collector,
)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset], float]:
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_buckets_are_cumulative_with_le_bounds() -> None:
    timings = Timings("t_seconds", "t", ("op",), buckets=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 2.0):
        timings.observe(("a",), seconds)
    timings.observe(("b",), 0.0)
    snap = timings.snapshot()
    assert snap[("a",)] == ([2, 1, 1], pytest.approx(2.65))
    assert snap[("b",)] == ([1, 0, 0], 0.0)
    with timings.time(("c",)):
        pass
    assert sum(timings.snapshot()[("c",)][0]) == 1


def test_the_process_histograms_on_a_page_and_a_real_read(tmp_path: Path) -> None:
    storage = Storage.from_uri(tmp_path.as_uri())
    write_parquet_segment(tmp_path, "s.parquet", {"t": np.arange(40.0), "v": np.ones(40)},
                          row_group_rows=16)
    registry = CollectorRegistry()
    registry.register(collector())
    before = _samples(registry)
    info = inspect_segment(storage, "s.parquet")
    read_chunk(storage, info, 1, ["v"])
    with pytest.raises(Exception, match="no chunk 9"):
        read_chunk(storage, info, 9, ["v"])  # refused before any read: not timed
    after = _samples(registry)

    def count(samples: dict, op: str) -> float:
        key = ("windpipe_storage_read_seconds_count", frozenset({("op", op), ("store", "file")}))
        return samples.get(key, 0.0)

    assert count(after, "inspect") == count(before, "inspect") + 1
    assert count(after, "chunk") == count(before, "chunk") + 1
    inf = ("windpipe_storage_read_seconds_bucket",
           frozenset({("op", "chunk"), ("store", "file"), ("le", "+Inf")}))
    assert after[inf] == count(after, "chunk")
    assert STORAGE_READS.name == "windpipe_storage_read_seconds"

    # a read that fails is timed and counted by its windpipe error type
    errors_before = STORAGE_READ_ERRORS.snapshot()
    (tmp_path / "s.parquet").write_bytes(b"not parquet any more")
    with pytest.raises(Exception, match=r"s\.parquet"):
        read_chunk(storage, info, 0, ["v"])
    grown = {k: v - errors_before.get(k, 0) for k, v in STORAGE_READ_ERRORS.snapshot().items()
             if v != errors_before.get(k, 0)}
    assert len(grown) == 1
    ((op, store, kind), n), = grown.items()
    assert (op, store, n) == ("chunk", "file", 1)
    assert kind in {"segment_changed", "segment_error"}
    assert count(_samples(registry), "chunk") == count(after, "chunk") + 1


def test_counts_snapshot() -> None:
    counts = Counts("c", "c", ("k",))
    counts.inc(("x",))
    counts.inc(("x",))
    assert counts.snapshot() == {("x",): 2}
