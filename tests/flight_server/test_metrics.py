"""A Flight server's own ``/metrics`` (``WINDPIPE_FLIGHT_METRICS_PORT``), scraped over real
HTTP from a real server after real streams, read with prometheus_client's parser."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow.flight as fl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.flight_server.helpers import (
    COLUMNS,
    StreamSpec,
    cache_stats,
    consume,
    start_server,
    write_dataset,
)
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import FlightCommand

SPECS = [StreamSpec("cycling", f"c{c}", k, (60, 45)) for c in range(2) for k in range(2)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8), strategy="shuffled", seed=3,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _scrape_until(url: str, done: Callable[[Samples], bool]) -> Samples:
    """The page once ``done`` holds: a stream's end and a call's status are counted as the
    server finishes them, which can trail the client's last read by a moment."""
    deadline = time.monotonic() + 30
    while True:
        samples = _scrape(url)
        if done(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def stats_misses(location: str) -> int:
    """Chunk loads of the server's cache so far (each one storage read or more)."""
    return int(cache_stats(location)["misses"])


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_flight_server_serves_its_own_metrics(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, SPECS, fmt="mixed", chunk_rows=16)
    running = start_server({"p": dataset.plan(CONFIG, "p")}, flight_metrics_port=0)
    try:
        assert running.metrics is not None
        url = running.metrics.url
        before = _scrape(url)
        assert _value(before, "windpipe_flight_batch_build_seconds_count") == 0
        assert _value(before, "windpipe_flight_active_streams") == 0

        got = consume(running.location, FlightCommand("p"))
        assert got
        with pytest.raises(fl.FlightError):
            consume(running.location, FlightCommand("p-unknown"))
        samples = _scrape_until(url, lambda s: (
            _value(s, "windpipe_flight_errors_total", method="get_flight_info",
                   type="not_found") == 1
            and _value(s, "windpipe_flight_sent_batches_total") == len(got)))

        batches = "windpipe_flight_batch_build_seconds"
        count = _value(samples, f"{batches}_count")
        assert count >= len(got)  # every batch sent was built (and timed) first
        assert _value(samples, f"{batches}_bucket", le="+Inf") == count
        assert _value(samples, f"{batches}_sum") > 0
        buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value
                         in samples.items() if name == f"{batches}_bucket")
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        assert _value(samples, "windpipe_flight_sent_batches_total") == len(got)
        # each batch sent timed once, the stream's duration by its outcome
        assert _value(samples, "windpipe_flight_batch_send_seconds_count") == len(got)
        assert _value(samples, "windpipe_flight_batch_send_seconds_bucket", le="+Inf") == len(got)
        assert _value(samples, "windpipe_flight_stream_seconds_count", outcome="completed") == 1
        assert _value(samples, "windpipe_flight_stream_seconds_sum", outcome="completed") > 0
        # the chunks it loaded, timed as storage reads of this process (file store)
        reads = sum(v for (name, labels), v in samples.items()
                    if name == "windpipe_storage_read_seconds_count"
                    and ("store", "file") in labels)
        assert reads >= stats_misses(running.location)
        assert _value(samples, "process_open_fds") > 0
        assert _value(samples, "process_resident_memory_bytes") > 0
        assert _value(samples, "windpipe_flight_sent_bytes_total") > 0
        assert _value(samples, "windpipe_flight_streams_total", outcome="completed") >= 1
        assert _value(samples, "windpipe_flight_errors_total", method="get_flight_info",
                      type="not_found") == 1
        stats = cache_stats(running.location)
        assert _value(samples, "windpipe_flight_cache_misses_total") == stats["misses"] > 0
        assert _value(samples, "windpipe_flight_cache_budget_bytes") == stats["budget_bytes"]
        assert _value(samples, "windpipe_flight_active_streams") == 0
    finally:
        running.stop(grace_s=5)
    with pytest.raises(httpx.TransportError):  # stopping the server stops its endpoint
        httpx.get(url, timeout=5)


def test_no_metrics_endpoint_unless_asked(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, SPECS[:1], fmt="mixed", chunk_rows=16)
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    try:
        assert running.metrics is None
        assert running.server.metrics.registry.get_sample_value(
            "windpipe_flight_active_streams") == 0  # the registry is there all the same
    finally:
        running.stop(grace_s=5)


def test_a_tier_fill_that_fails_is_counted_and_the_stream_goes_on(tmp_path: Path) -> None:
    """The tier's directory turned into a file under the running server (a filesystem
    error where a full disk would give ENOSPC): the background fill fails, the page
    counts it, and the stream still delivers every batch by chunks."""
    specs = [StreamSpec("cycling", f"c{i}", i, (4096,)) for i in range(8)]
    dataset = write_dataset(tmp_path / "data", specs, chunk_rows=512)
    config = LoaderConfig(inputs={"cycling": COLUMNS["cycling"]},
                          targets={"cycling": ("voltage_v",)},
                          default_window=WindowConfig(batch_size=4, seq_len=16))
    plan = dataset.plan(config, "p")
    tier = tmp_path / "tier"
    running = start_server({"p": plan}, cache_bytes=128 << 10, tier_dir=tier,
                           tier_bytes=64 << 20, flight_metrics_port=0,
                           allowed_roots=(str(dataset.root),))
    try:
        assert running.metrics is not None
        fill = running.server.tier_fill
        assert fill is not None
        assert _value(_scrape(running.metrics.url), "windpipe_flight_tier_fill_failures_total") == 0
        shutil.rmtree(tier, ignore_errors=True)
        tier.write_text("not a directory")
        got = consume(running.location, FlightCommand("p"))
        assert fill.wait(60)
        samples = _scrape(running.metrics.url)
    finally:
        running.stop(grace_s=5)
    assert got
    assert [r.meta.batch_idx for r in got] == list(range(len(got)))  # none lost
    assert _value(samples, "windpipe_flight_tier_fill_failures_total") == fill.failures == 1
    assert _value(samples, "windpipe_flight_tier_fill_blocks_total") == 0
    assert _value(samples, "windpipe_flight_streams_total", outcome="completed") == 1
