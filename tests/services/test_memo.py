"""The shared LRU: made once per key at a time, bounded, nothing kept for failures."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from windpipe.services.memo import Memo, deep_nbytes


def test_values_are_made_once_and_evicted_least_recent_first() -> None:
    memo: Memo[str, list[str]] = Memo(2)
    made: list[str] = []

    def maker(key: str) -> list[str]:
        made.append(key)
        return [key]

    a = memo.get("a", lambda: maker("a"))
    assert memo.get("a", lambda: maker("a")) is a
    memo.get("b", lambda: maker("b"))
    memo.get("a", lambda: maker("a"))  # a is now the most recent
    memo.get("c", lambda: maker("c"))  # evicts b
    assert len(memo) == 2
    memo.get("a", lambda: maker("a"))
    memo.get("b", lambda: maker("b"))
    assert made == ["a", "b", "c", "b"]
    with pytest.raises(ValueError, match="maxsize"):
        Memo(0)


def test_concurrent_askers_share_one_make() -> None:
    memo: Memo[str, object] = Memo(4)
    release = threading.Event()
    calls: list[int] = []

    def slow() -> object:
        calls.append(1)
        release.wait(10)
        return object()

    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(memo.get("k", slow)))
               for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert len(got) == 8
    assert len({id(v) for v in got}) == 1
    assert memo._making == {}


def test_a_failed_make_leaves_nothing_and_the_next_asker_retries() -> None:
    memo: Memo[int, int] = Memo(4)
    for key in range(100):
        with pytest.raises(KeyError):
            memo.get(key, lambda: {}["missing"])
    assert len(memo) == 0
    assert memo._making == {}  # no state per key that failed (unknown plan ids, say)
    assert memo.get(7, lambda: 49) == 49


def test_a_byte_budget_evicts_the_least_recent_and_skips_the_oversized():
    memo: Memo[str, np.ndarray] = Memo(100, max_bytes=1000, weigh=deep_nbytes)
    for key in "abcd":
        memo.put(key, np.zeros(40))  # 320 bytes each
    assert len(memo) == 3
    assert memo.nbytes == 960
    assert memo.get("a", lambda: np.ones(1)).shape == (1,)  # "a" went first, made again
    huge = memo.get("huge", lambda: np.zeros(1000))
    assert huge.shape == (1000,)  # handed to its asker...
    assert memo.nbytes <= 1000  # ...but not kept
    assert memo.get("huge", lambda: np.ones(2)).shape == (2,)
    assert memo.pending == 0


def test_deep_nbytes_counts_arrays_inside_values():
    @dataclasses.dataclass
    class Holder:
        a: np.ndarray
        parts: tuple[np.ndarray, ...]
        name: str

    value = Holder(np.zeros(10), (np.zeros(5, np.int32), np.zeros(3, np.int8)), "x")
    assert deep_nbytes(value) == 80 + 20 + 3
    assert deep_nbytes({"k": [np.zeros(2)]}) == 16
    assert deep_nbytes("text") == 0


def test_values_are_a_copy_least_recently_used_first():
    memo: Memo[str, int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.peek("a")  # now the most recent
    values = memo.values()
    assert values == [2, 1]
    memo.put("c", 3)  # evicts "b"; the list handed out does not change
    assert values == [2, 1]
    assert memo.values() == [1, 3]
