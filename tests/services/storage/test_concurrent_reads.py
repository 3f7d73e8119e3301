"""Concurrent, coalesced, bounded object-store reads (windpipe/services/storage/concurrent.py,
coalesce.py, pacing.py, readahead.py) against moto's S3 server behind the benchmark's
latency proxy (bench/latency_proxy.py): latency overlaps, ranges merge, the byte bound
holds, failures are the typed storage errors, and nothing waits forever."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.proxy import CountingProxy
from windpipe.services.contract.errors import ErrorType, SegmentChanged, SegmentError, WindpipeError
from windpipe.services.storage.coalesce import Span, coalesce, split
from windpipe.services.storage.pacing import Pacing
from windpipe.services.storage.readahead import AheadRead, ReadAhead
from windpipe.services.storage.segments import inspect_segment, read_ahead, read_chunk
from windpipe.services.storage.store import Storage, StorageOptions

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]

LATENCY_S = 0.05


@pytest.fixture(scope="module")
def proxy(s3_server: Any) -> Iterator[CountingProxy]:
    with CountingProxy(s3_server.endpoint_url, latency_s=LATENCY_S,
                      bandwidth_bps=400e6) as running:
        yield running


@pytest.fixture(scope="module")
def blob(s3_server: Any) -> tuple[str, bytes]:
    prefix = s3_server.unique_prefix("conc")
    data = os.urandom(6 << 20)
    s3_server.client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/blob", Body=data)
    return prefix, data


def _slow(s3_server: Any, proxy: CountingProxy, prefix: str, **options: Any) -> Storage:
    return Storage.from_uri(f"s3://{s3_server.bucket}/{prefix}", StorageOptions(
        s3_endpoint=proxy.endpoint, s3_allow_http=True, **options))


def test_coalesce_merges_near_ranges_and_splits_large_ones() -> None:
    spans = coalesce([(100, 200), (0, 50), (250, 300), (10_000, 10_100), (40, 60), (5, 5)],
                     gap=64)
    assert spans == [Span(0, 300, ((0, 50), (40, 60), (100, 200), (250, 300))),
                     Span(10_000, 10_100, ((10_000, 10_100),))]
    assert coalesce([(0, 10), (11, 20)], gap=0) == [Span(0, 10, ((0, 10),)),
                                                    Span(11, 20, ((11, 20),))]
    parts = split(Span(0, 10, ((0, 10),)), max_span=4)
    assert parts == [(0, 4), (4, 8), (8, 10)]
    assert split(Span(5, 9, ((5, 9),)), max_span=100) == [(5, 9)]


def test_pacing_window_is_bandwidth_times_latency_within_bounds() -> None:
    pacing = Pacing(max_bytes=64 << 20, floor_bytes=1 << 20)
    assert pacing.figures().window_bytes == 1 << 20  # nothing measured yet: the floor
    token = pacing.start()
    time.sleep(0.02)
    pacing.done(token, 4 << 20)  # 4 MiB in ~20 ms: ~200 MB/s, 20 ms
    fig = pacing.figures()
    assert fig.latency_s is not None
    assert fig.bandwidth_bps is not None
    assert fig.window_bytes == max(1 << 20, min(64 << 20, int(
        2 * fig.bandwidth_bps * fig.latency_s)))
    assert (1 << 20) <= fig.window_bytes <= 64 << 20


def test_ranged_reads_overlap_their_latency(s3_server: Any, proxy: CountingProxy,
                                            blob: tuple[str, bytes]) -> None:
    prefix, data = blob
    storage = _slow(s3_server, proxy, prefix, coalesce_bytes=0)
    ranges = [(i * (512 << 10), i * (512 << 10) + 1000 + i) for i in range(10)]
    before = proxy.stats.requests
    proxy.reset_peak()
    got = storage.get_ranges("blob", ranges)
    assert got == [data[a:b] for a, b in ranges]
    assert proxy.stats.requests - before == 10  # nothing merged with a zero gap
    assert proxy.peak_in_flight > 1  # side by side (one after the other: never two)
    proxy.reset_peak()
    for a, b in ranges[:3]:
        assert storage.get_range("blob", a, b) == data[a:b]
    assert proxy.stats.requests - before == 13  # each one through the proxy's latency
    assert proxy.peak_in_flight == 1  # what one after the other looks like


def test_coalescing_merges_what_it_should_and_answers_exact_bytes(
        s3_server: Any, proxy: CountingProxy, blob: tuple[str, bytes]) -> None:
    prefix, data = blob
    storage = _slow(s3_server, proxy, prefix, coalesce_bytes=64 << 10)
    # three clusters of nearby ranges (one overlapping, one empty), far apart
    ranges = [(0, 10), (5, 40_000), (60_000, 61_000), (0, 0),
              (2 << 20, (2 << 20) + 5), ((2 << 20) + 30_000, (2 << 20) + 30_001),
              ((6 << 20) - 7, 6 << 20)]
    before = proxy.stats.requests
    got = storage.get_ranges("blob", ranges)
    assert got == [data[a:b] for a, b in ranges]
    assert proxy.stats.requests - before == 3


def _ahead(storage: Storage, reads: list[AheadRead], **kw: Any) -> ReadAhead:
    opts: dict[str, Any] = {"max_bytes": 3 << 20, "gap": 0, "floor_bytes": 3 << 20}
    opts.update(kw)
    return ReadAhead(storage.store, reads, **opts).start()


def test_read_ahead_holds_at_most_its_byte_bound(s3_server: Any, proxy: CountingProxy,
                                                 blob: tuple[str, bytes]) -> None:
    prefix, data = blob
    storage = _slow(s3_server, proxy, prefix)
    mib = 1 << 20
    reads = [AheadRead("blob", lambda size, tag, tail, i=i: [(i * mib // 2, (i + 1) * mib // 2)])
             for i in range(10)]
    ahead = _ahead(storage, reads)
    try:
        time.sleep(0.5)  # a slow consumer: the read-ahead fills its bound, no more
        assert ahead.stats().peak_held_bytes <= 3 << 20
        for i in range(10):
            a, b = i * mib // 2, (i + 1) * mib // 2
            assert ahead.read("blob", a, b) == data[a:b]
            time.sleep(0.02)
        stats = ahead.stats()
    finally:
        ahead.close()
    assert stats.hits == 10
    assert stats.misses == 0
    assert 0 < stats.peak_held_bytes <= 3 << 20
    assert stats.pacing.latency_s is not None
    assert stats.pacing.latency_s >= LATENCY_S * 0.9


@pytest.mark.parametrize(("lag", "hits"), [(0, 2), (1, 4)])
def test_consumers_on_threads_take_reads_out_of_order_within_their_lag(
        s3_server: Any, proxy: CountingProxy, blob: tuple[str, bytes], lag: int,
        hits: int) -> None:
    prefix, data = blob
    storage = _slow(s3_server, proxy, prefix)
    quarter = 1 << 18
    reads = [AheadRead("blob", lambda size, tag, tail, i=i: [(i * quarter, (i + 1) * quarter)])
             for i in range(4)]
    ahead = _ahead(storage, reads)
    ahead.allow_consumers(lag)
    try:
        time.sleep(0.5)  # every read fetched (within the bound)
        for i in (1, 0, 3, 2):  # two threads, each a read ahead of the other in turn
            got = ahead.read("blob", i * quarter, (i + 1) * quarter)
            assert got is None or got == data[i * quarter:(i + 1) * quarter]
        stats = ahead.stats()
    finally:
        ahead.close()
    # in order only (lag 0), a read taken first drops the one before it untaken
    assert (stats.hits, stats.misses) == (hits, 4 - hits)


def test_read_ahead_of_a_missing_object_leaves_the_typed_error_to_the_read(
        s3_server: Any, proxy: CountingProxy, blob: tuple[str, bytes]) -> None:
    prefix, _ = blob
    storage = _slow(s3_server, proxy, prefix)
    with pytest.raises(FileNotFoundError):
        storage.get_ranges("no-such-object", [(0, 10), (100, 200)])
    with storage.read_ahead([AheadRead("gone", lambda size, tag, tail: [(0, size)])]) as ahead:
        assert ahead is not None
        assert ahead.meta("gone") is None  # the probe failed: nothing served, no wait
        assert ahead.read("gone", 0, 10) is None
        with pytest.raises(FileNotFoundError):
            storage.get("gone")


def test_an_unreachable_store_is_unavailable_and_does_not_hang() -> None:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    storage = Storage.from_uri("s3://nowhere/p", StorageOptions(
        s3_endpoint=f"http://127.0.0.1:{port}", s3_allow_http=True, connect_timeout_s=0.5,
        timeout_s=1.0, max_retries=0))
    with pytest.raises(WindpipeError) as err:  # not a hang: the module's timeout
        storage.get_ranges("x", [(0, 10)])
    assert err.value.type == ErrorType.UNAVAILABLE


def _segment(tmp: Path, rows: int = 40_000) -> Path:
    rng = np.random.default_rng(5)
    table = pa.table({name: rng.standard_normal(rows).astype(np.float32)
                      for name in ("t", "a", "b", "c")})
    path = tmp / "seg.parquet"
    pq.write_table(table, path, row_group_size=10_000, use_dictionary=False)
    return path


def test_chunks_read_through_the_read_ahead_are_the_chunks(
        s3_server: Any, proxy: CountingProxy, tmp_path: Path) -> None:
    _segment(tmp_path)
    prefix = s3_server.unique_prefix("seg")
    s3_server.upload_dir(tmp_path, prefix)
    storage = _slow(s3_server, proxy, prefix)
    info = inspect_segment(storage, "seg.parquet")
    disk = Storage.from_uri(tmp_path.as_uri())
    reads = [(info, k, ("a", "c")) for k in range(len(info.chunk_rows))]
    proxy.reset_peak()
    with read_ahead(storage, reads) as ahead:
        assert ahead is not None
        got = [read_chunk(storage, info, k, ["a", "c"]) for k in range(len(info.chunk_rows))]
        stats = ahead.stats()
    overlapped = proxy.peak_in_flight
    want = [read_chunk(disk, info, k, ["a", "c"]) for k in range(len(info.chunk_rows))]
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        assert all(g[n].tobytes() == w[n].tobytes() for n in g)
    assert stats.hits >= len(info.chunk_rows)
    # at most one read raced its fetch (seen only in full-suite CI runs, 2026-12-02): a
    # read whose slot the I/O loop has not made active yet reads the store directly, by
    # design (ReadAhead.read never waits on a fetch that has not started, which pacing
    # could hold back); a miss is a direct read of the same bytes, checked above
    assert stats.misses <= 1
    # not a head, a footer and a column read per chunk one after the other
    assert overlapped > 1, overlapped
    # the object rewritten: the read-ahead's pinned reads fail, the chunk read says so
    s3_server.client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/seg.parquet",
                                Body=b"not parquet at all, PAR1")
    with read_ahead(storage, reads), pytest.raises(SegmentChanged):
        read_chunk(storage, info, 0, ["a", "c"])
    s3_server.client.delete_object(Bucket=s3_server.bucket, Key=f"{prefix}/seg.parquet")
    with read_ahead(storage, reads), pytest.raises(SegmentError):
        read_chunk(storage, info, 1, ["a"])
