"""The host tier as the capacity level: a plan larger than the chunk cache but
within the tier streams correctly, its first pass fills the tier behind the stream, and
its second pass is served from the tier with no storage read (no decode). Real Flight
servers on port 0; the reference is a server whose cache holds the whole plan."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    Received,
    StreamSpec,
    consume,
    iter_consume,
    start_server,
    write_dataset,
)
from windpipe.flight_server.runner import RunningFlightServer
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.materialize.blocks import block_layouts

CONFIG = LoaderConfig(inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
                      default_window=WindowConfig(batch_size=4, seq_len=16), strategy="shuffled")
SMALL_CACHE = 128 << 10  # a quarter of the plan's 512 KiB of decoded rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("capacity"),
                         [StreamSpec("cycling", f"c{i}", i, (4096,)) for i in range(8)],
                         chunk_rows=512)


def _server(ds: Dataset, tmp: Path, **settings: object) -> RunningFlightServer:
    return start_server({"p": ds.plan(CONFIG, "p")}, data_dir=tmp / "state",
                        allowed_roots=(str(ds.root),), **settings)  # type: ignore[arg-type]


def _same(got: list[Received], want: list[Received]) -> None:
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.meta == w.meta, i
        np.testing.assert_array_equal(g.inputs, w.inputs, err_msg=f"batch {i}")
        np.testing.assert_array_equal(g.targets, w.targets, err_msg=f"batch {i}")
        np.testing.assert_array_equal(g.mask, w.mask, err_msg=f"batch {i}")


def test_second_pass_over_data_larger_than_the_cache_comes_from_the_tier(
        dataset: Dataset, tmp_path: Path) -> None:
    whole = sum(x.nbytes for x in block_layouts(dataset.plan(CONFIG, "p")))
    assert whole == 4 * SMALL_CACHE  # data 4x the cache
    reference = _server(dataset, tmp_path / "ref", cache_bytes=64 << 20)
    try:
        want = [consume(reference.location, FlightCommand("p", epoch=e)) for e in (0, 1)]
    finally:
        reference.stop(grace_s=5)
    running = _server(dataset, tmp_path / "tiered", cache_bytes=SMALL_CACHE,
                      tier_dir=tmp_path / "tier", tier_bytes=64 << 20)
    server = running.server
    try:
        first = consume(running.location, FlightCommand("p", epoch=0))
        read_first = server.cache.stats().bytes_read
        assert server.tier_fill is not None
        assert server.tier_fill.wait(60)
        second = consume(running.location, FlightCommand("p", epoch=1))
        read_second = server.cache.stats().bytes_read - read_first
        peak = server.cache.stats().peak_bytes
        assert server.tier is not None
        tier = server.tier.stats()
    finally:
        running.stop(grace_s=5)
    _same(first, want[0])
    _same(second, want[1])
    assert read_first > 0  # the first pass decoded its chunks from storage ...
    assert server.tier_fill.blocks == 1
    assert server.tier_fill.bytes_read > 0
    assert read_second == 0  # the second pass: not one byte read from storage
    assert tier["tier_builds"] == 1
    assert tier["tier_used_bytes"] >= whole
    assert peak <= SMALL_CACHE


def test_a_plan_beyond_the_tier_streams_by_chunks(dataset: Dataset, tmp_path: Path) -> None:
    running = _server(dataset, tmp_path / "small", cache_bytes=SMALL_CACHE,
                      tier_dir=tmp_path / "tier", tier_bytes=256 << 10)
    server = running.server
    try:
        got = consume(running.location, FlightCommand("p", epoch=0))
        assert server.tier_fill is not None
        assert server.tier_fill.wait(60)
        again = consume(running.location, FlightCommand("p", epoch=0))
        assert server.tier is not None
        builds = server.tier.stats()["tier_builds"]
    finally:
        running.stop(grace_s=5)
    _same(again, got)
    assert builds == 0
    assert server.tier_fill.blocks == 0


def test_a_pass_reads_from_the_tier_once_the_fill_behind_it_is_done(
        dataset: Dataset, tmp_path: Path) -> None:
    """The first pass starts on chunks; once the background fill has put the plan's block
    in the tier, the rest of the same pass maps it: no further storage read or decode."""
    reference = _server(dataset, tmp_path / "ref", cache_bytes=64 << 20)
    try:
        want = consume(reference.location, FlightCommand("p", epoch=0))
    finally:
        reference.stop(grace_s=5)
    running = _server(dataset, tmp_path / "tiered", cache_bytes=SMALL_CACHE,
                      tier_dir=tmp_path / "tier", tier_bytes=64 << 20)
    server = running.server
    try:
        batches = iter_consume(running.location, FlightCommand("p", epoch=0))
        got = [next(batches)]
        assert server.tier_fill is not None
        assert server.tier_fill.wait(60)
        time.sleep(0.3)  # chunk loads the pipeline had started ahead end
        read_before = server.cache.stats().bytes_read
        rest = list(batches)
        read_after = server.cache.stats().bytes_read
    finally:
        running.stop(grace_s=5)
    _same(got + rest, want)
    assert read_before > 0  # the pass began on chunks read from storage
    assert len(rest) > len(want) // 2  # most of the pass came after the fill
    assert read_after == read_before  # ... and took the tier's block: nothing read again
