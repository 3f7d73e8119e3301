"""The shared chunk cache: single flight, pins, budget, LRU order, read-ahead, errors."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from windpipe.services.contract.errors import ErrorType, SegmentError, WindpipeError
from windpipe.services.materialize.cache import ChunkCache, ChunkRequest


class Loads:
    """Counting loaders (optionally slow or failing)."""

    def __init__(self, *, delay_s: float = 0.0, gate: threading.Event | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.delay_s = delay_s
        self.gate = gate
        self.lock = threading.Lock()

    def req(self, key: str, nbytes: int = 100, *, fail: bool = False) -> ChunkRequest:
        def load() -> tuple[Any, int]:
            with self.lock:
                self.calls[key] += 1
            time.sleep(self.delay_s)
            if self.gate is not None:
                assert self.gate.wait(10.0), "test gate never opened"
            if fail:
                raise SegmentError(f"bad {key}", details={"path": key})
            return f"value-{key}", nbytes

        return ChunkRequest(key=key, nbytes=nbytes, load=load)


def test_single_flight_under_concurrent_acquires() -> None:
    cache = ChunkCache(10_000, readahead_workers=0)
    loads = Loads(delay_s=0.05)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        with cache.acquire([loads.req("a"), loads.req("b")]) as pins:
            results.append(pins["a"] + pins["b"])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads.calls == Counter({"a": 1, "b": 1})
    assert results == ["value-avalue-b"] * 8
    stats = cache.stats()
    assert stats.misses == 2
    assert stats.hits == 14
    assert stats.pinned_bytes == 0
    assert stats.loads_in_flight == 0
    assert stats.bytes_read == 200


def test_lru_eviction_order_and_budget() -> None:
    cache = ChunkCache(300, readahead_workers=0)
    loads = Loads()
    for key in "abc":
        cache.acquire([loads.req(key)]).release()
    cache.acquire([loads.req("a")]).release()  # a becomes most recent
    cache.acquire([loads.req("d")]).release()  # evicts b (least recent)
    assert cache.keys() == ["c", "a", "d"]
    cache.acquire([loads.req("e")]).release()  # evicts c
    assert cache.keys() == ["a", "d", "e"]
    stats = cache.stats()
    assert stats.evictions == 2
    assert stats.resident_bytes == 300
    assert stats.peak_bytes <= 300


def test_pinned_chunks_are_never_evicted() -> None:
    cache = ChunkCache(300, readahead_workers=0, wait_timeout_s=0.3)
    loads = Loads()
    held = cache.acquire([loads.req("a"), loads.req("b")])
    cache.acquire([loads.req("c")]).release()
    cache.acquire([loads.req("d")]).release()  # only c is evictable
    assert set(cache.keys()) == {"a", "b", "d"}
    assert held["a"] == "value-a"
    with pytest.raises(WindpipeError) as info:  # needs 200 more, only d is evictable
        cache.acquire([loads.req("e"), loads.req("f")])
    assert info.value.type == ErrorType.RESOURCE_EXHAUSTED
    assert "pinned by other streams" in info.value.message
    held.release()
    cache.acquire([loads.req("e"), loads.req("f")]).release()
    assert cache.stats().pinned_bytes == 0
    assert cache.stats().peak_bytes <= 300


def test_waiter_proceeds_when_pins_are_released() -> None:
    cache = ChunkCache(200, readahead_workers=0, wait_timeout_s=5)
    loads = Loads()
    held = cache.acquire([loads.req("a"), loads.req("b")])
    done = threading.Event()

    def waiter() -> None:
        cache.acquire([loads.req("c"), loads.req("d")]).release()
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    assert not done.is_set()
    held.release()
    t.join(timeout=5)
    assert done.is_set()
    assert set(cache.keys()) == {"c", "d"}


def test_working_set_above_budget_fails_at_once() -> None:
    # a wait for room that can never come would outlast pytest-timeout: failing at all
    # is failing at once
    cache = ChunkCache(250, readahead_workers=0, wait_timeout_s=3600)
    loads = Loads()
    with pytest.raises(WindpipeError) as info:
        cache.acquire([loads.req("a"), loads.req("b"), loads.req("c")])
    assert info.value.type == ErrorType.RESOURCE_EXHAUSTED
    assert info.value.details == {"working_set_bytes": 300, "budget_bytes": 250}
    assert "--cache-bytes" in info.value.message
    assert not loads.calls


def test_load_error_reaches_every_waiter_and_frees_the_slot() -> None:
    cache = ChunkCache(1000, readahead_workers=0)
    loads = Loads(delay_s=0.05)
    errors: list[str] = []

    def worker() -> None:
        try:
            cache.acquire([loads.req("ok"), loads.req("bad", fail=True)])
        except WindpipeError as exc:
            errors.append(exc.details["path"])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["bad"] * 4
    stats = cache.stats()
    assert stats.pinned_bytes == 0
    assert stats.resident_bytes == 100  # "ok" stays cached, "bad" holds nothing
    assert stats.reserved_bytes == 0
    assert cache.keys() == ["ok"]


def _wait_for(cond: Callable[[], bool]) -> bool:
    """Until ``cond()`` holds (pytest-timeout bounds a wait that never ends)."""
    while not cond():
        time.sleep(0.01)
    return True


def test_prefetch_loads_in_background_within_limits() -> None:
    cache = ChunkCache(1000, readahead_workers=1, readahead_bytes=250)
    gate = threading.Event()  # loads stay in flight until the prefetch call returns
    loads = Loads(gate=gate)
    started = cache.prefetch([loads.req(k) for k in "abcd"])
    assert started == 2  # 250 bytes of read-ahead in flight allowed: a and b
    gate.set()
    assert _wait_for(lambda: cache.stats().loads_in_flight == 0)
    assert set(cache.keys()) == {"a", "b"}
    with cache.acquire([loads.req("a")]):
        pass
    assert loads.calls["a"] == 1  # served from the prefetched copy
    stats = cache.stats()
    assert stats.prefetches == 2
    assert stats.hits == 1
    assert stats.pinned_bytes == 0
    cache.close()


def test_prefetch_never_evicts_pinned_chunks() -> None:
    cache = ChunkCache(200, readahead_workers=1, readahead_bytes=200)
    loads = Loads()
    with cache.acquire([loads.req("a"), loads.req("b")]):
        assert cache.prefetch([loads.req("c")]) == 0
    assert cache.prefetch([loads.req("c")]) == 1
    assert _wait_for(lambda: cache.contains("c"))
    assert cache.stats().peak_bytes <= 200
    cache.close()
