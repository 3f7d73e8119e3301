"""A DataLoader worker's exit without an abort in torch's queue feeder.

A torch DataLoader worker hands its batches to the parent through a
``multiprocessing.Queue`` whose feeder is a daemon thread; on shutdown torch calls
``cancel_join_thread`` so the worker never waits for it. When a pass is abandoned (the
training loop breaks early) the feeder can still be pickling a prefetched batch, inside
torch's C++ storage sharing with the GIL released, as the worker's interpreter
finalizes. CPython then ends the thread with ``pthread_exit``, whose forced unwind
through that C++ frame calls ``std::terminate``: the worker dies of SIGABRT and the
parent reports it from the iterator's ``__del__`` (seen in about one abandoned pass in
ten, with ``terminate called without an active exception``).

:func:`install` registers, once per process, an exit hook that gives each feeder a
bounded time to finish before finalization; a feeder blocked on a full pipe (the parent
gone) is left, as before, since it waits in plain C, not in C++.
"""

from __future__ import annotations

import atexit
import threading
import time

__all__ = ["FEEDER_GRACE_S", "install"]

FEEDER_GRACE_S = 2.0
"""Seconds the exit hook waits, in all, for the queue feeders (the parent's shutdown
waits five for the worker before terminating it)."""

_FEEDER_NAME = "QueueFeederThread"
_installed_in: set[int] = set()


def install(pid: int) -> None:
    """Register the exit hook in process ``pid`` (the caller's), once."""
    if pid not in _installed_in:
        _installed_in.add(pid)
        atexit.register(_let_feeders_finish)


def _let_feeders_finish(grace_s: float = FEEDER_GRACE_S) -> None:
    deadline = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread.name == _FEEDER_NAME and thread.is_alive():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
