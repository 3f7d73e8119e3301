"""A small thread-safe LRU of immutable values, each made at most once at a time.

Shared by the catalog (index frames, decoded plans, epoch schedules), the Flight
server (loaded plans) and the materializer (a plan's epoch schedules): whoever asks
for a missing key makes it while concurrent askers of the same key wait for that
one result (single flight) instead of making it again. A ``make`` that raises
stores nothing, and the next asker tries again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Memo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """At most ``maxsize`` values, least recently used evicted first."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            msg = f"maxsize must be >= 1, got {maxsize}"
            raise ValueError(msg)
        self.maxsize = maxsize
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._making: dict[K, tuple[threading.Lock, list[int]]] = {}  # gate, waiters

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def _cached(self, key: K) -> V:
        """With the lock held: the value of ``key`` (now most recent), else ``KeyError``."""
        value = self._items[key]
        self._items.move_to_end(key)
        return value

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make`` (outside the lock) on a miss."""
        with self._lock:
            try:
                return self._cached(key)
            except KeyError:
                gate, waiters = self._making.setdefault(key, (threading.Lock(), [0]))
                waiters[0] += 1
        try:
            with gate:
                with self._lock:
                    try:
                        return self._cached(key)
                    except KeyError:
                        pass
                made = make()
                self.put(key, made)
                return made
        finally:
            with self._lock:
                waiters[0] -= 1
                if waiters[0] == 0:
                    del self._making[key]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` (evicting the least recently used beyond the size)."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
