"""A small thread-safe LRU of immutable values, each made at most once at a time.

Shared by the catalog (index frames, decoded plans, epoch schedules), the Flight
server (loaded plans) and the materializer (a plan's epoch schedules): whoever asks
for a missing key makes it while concurrent askers of the same key wait for that
one result (single flight) instead of making it again. A ``make`` that raises
stores nothing, and the next asker tries again.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["Memo", "deep_nbytes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """At most ``maxsize`` values, least recently used evicted first.

    With ``max_bytes`` (and ``weigh``, a value's size in bytes) the values also stay
    within that many bytes; a value larger than the whole budget is returned to its
    asker but not kept.
    """

    def __init__(self, maxsize: int, *, max_bytes: int | None = None,
                 weigh: Callable[[V], int] | None = None) -> None:
        if maxsize < 1:
            msg = f"maxsize must be >= 1, got {maxsize}"
            raise ValueError(msg)
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._weights: dict[K, int] = {}
        self._bytes = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._making: dict[K, tuple[threading.Lock, list[int]]] = {}  # gate, waiters

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def nbytes(self) -> int:
        """Bytes held, as ``weigh`` counts them (0 without ``weigh``)."""
        with self._lock:
            return self._bytes

    @property
    def pending(self) -> int:
        """Keys being made right now (each released when its make ends, even by raising)."""
        with self._lock:
            return len(self._making)

    def _cached(self, key: K) -> V:
        """With the lock held: the value of ``key`` (now most recent), else ``KeyError``."""
        value = self._items[key]
        self._items.move_to_end(key)
        return value

    def peek(self, key: K) -> V:
        """The value of ``key`` if held (now most recent), else ``KeyError``; makes nothing."""
        with self._lock:
            return self._cached(key)

    def values(self) -> list[V]:
        """The values kept now, least recently used first (a copy: safe to act on)."""
        with self._lock:
            return list(self._items.values())

    def forget_where(self, test: Callable[[K], bool]) -> None:
        """Drop every key ``test`` holds for."""
        with self._lock:
            for key in [k for k in self._items if test(k)]:
                self._forget(key)

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
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            if self.max_bytes is not None and weight > self.max_bytes:
                return
            self._forget(key)
            self._items[key] = value
            self._weights[key] = weight
            self._bytes += weight
            while len(self._items) > self.maxsize or (
                self.max_bytes is not None and self._bytes > self.max_bytes
            ):
                self._forget(next(iter(self._items)))

    def _forget(self, key: K) -> None:
        """With the lock held: drop ``key`` if present."""
        if self._items.pop(key, None) is not None or key in self._weights:
            self._bytes -= self._weights.pop(key, 0)


_WEIGHTLESS = (str, int, float, type(None))


def deep_nbytes(value: Any, *, _depth: int = 0) -> int:
    """Bytes of the arrays a value holds: numpy arrays, polars frames (``estimated_size``),
    and those inside dataclasses, tuples, lists and dicts (a ``weigh`` for :class:`Memo`).
    Strings and numbers weigh nothing and are skipped without a call: a plan's artifact
    holds one path (and group key) per piece, tens of thousands of them, and a sequence
    whose first and last items are tuples of them is taken for a sequence of such keys."""
    if _depth > 4 or isinstance(value, _WEIGHTLESS):
        return 0
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    size = getattr(value, "estimated_size", None)
    if callable(size):
        return int(size())
    if isinstance(value, bytes | bytearray):
        return len(value)
    items: Any = ()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = (getattr(value, f.name, None) for f in dataclasses.fields(value))
    elif isinstance(value, tuple | list):
        if value and _plain_key(value[0]) and _plain_key(value[-1]):
            return 0  # a sequence of keys (tuples of plain values, one a stream): no arrays
        items = value
    elif isinstance(value, dict):
        items = value.values()
    return sum(deep_nbytes(v, _depth=_depth + 1) for v in items
               if not isinstance(v, _WEIGHTLESS))


def _plain_key(value: Any) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, _WEIGHTLESS) for v in value)
