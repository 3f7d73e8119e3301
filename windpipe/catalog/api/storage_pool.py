"""The catalog's own threads for work that waits on storage (registrations).

A registration reads its manifest and inspects every segment: on a slow or hung
object store it waits up to the store's timeouts. Run on the threads that serve the
other routes, a few dozen of them would leave none for ``GET /v1/datasets``.
:class:`StoragePool` runs them on a dedicated :class:`ThreadPoolExecutor`
(``WINDPIPE_STORAGE_WORKERS`` threads) behind a bounded queue
(``WINDPIPE_STORAGE_QUEUE`` waiting calls); a call arriving when both are full is
refused at once with ``unavailable`` (503, ``details.retryable``) instead of waiting.
The route awaits the result without holding a thread of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from windpipe.services.contract.errors import Unavailable

__all__ = ["StoragePool"]

T = TypeVar("T")


class StoragePool:
    """``workers`` threads and at most ``queue`` calls waiting for one."""

    def __init__(self, *, workers: int, queue: int,
                 name: str = "windpipe-storage") -> None:
        self.workers = workers
        self.queue = queue
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._lock = threading.Lock()
        self._admitted = 0

    @property
    def admitted(self) -> int:
        """Calls running or waiting now."""
        with self._lock:
            return self._admitted

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` on the pool; ``unavailable`` at once when the pool and its queue are
        full (the call is not started)."""
        if not self._slots.acquire(blocking=False):
            raise Unavailable(
                f"the catalog is busy with registrations ({self.workers} running, "
                f"{self.queue} waiting: WINDPIPE_STORAGE_WORKERS, WINDPIPE_STORAGE_QUEUE); "
                "retry later",
                details={"workers": self.workers, "queue": self.queue},
            )
        with self._lock:
            self._admitted += 1
        try:
            future = self._executor.submit(fn, *args, **kwargs)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(lambda _f: self._release())
        return future

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1
        self._slots.release()

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Await ``fn(*args, **kwargs)`` run on the pool (see :meth:`submit`)."""
        return await asyncio.wrap_future(self.submit(fn, *args, **kwargs))

    def shutdown(self) -> None:
        """Stop taking calls; waiting ones are cancelled, running ones end on their own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
