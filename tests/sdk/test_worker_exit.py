"""A DataLoader worker of an abandoned pass exits cleanly (windpipe.sdk._worker_exit): the exit
hook gives its queue feeders a bounded time, so no worker dies of SIGABRT.

A module of its own: its spawned workers make it one of the longest test modules.
"""

from __future__ import annotations

import threading
import time

import pytest
from torch.utils.data import DataLoader

from tests.sdk.spawned import SPAWN, toy_dataset
from tests.sdk.wire_toys import ToyFlightServer
from windpipe.sdk import _worker_exit as worker_exit


@pytest.fixture(scope="module")
def toy():
    # batches of 64 lanes x 1024 steps (~0.75 MB): a feeder is still pickling one when
    # the pass is abandoned far more often than with the toy's default 2 x 4
    server = ToyFlightServer(n_batches=11, lanes=64, seq_len=1024)
    yield server
    server.shutdown()



@pytest.mark.slow
@pytest.mark.timeout(600)  # 20 fresh interpreters importing torch: minutes of CPU when busy
def test_workers_of_abandoned_passes_exit_cleanly(toy):
    """Breaking out of a pass leaves the workers' queue feeders mid-pickle; each
    worker still exits with status 0. Without sdk._worker_exit's hook a worker dies of
    SIGABRT (terminate called without an active exception): measured with these
    batches, 9 passes of 40 lost one (with the toy's default 2 x 4 batches, 1 pass of
    22), so 10 passes miss a lost hook about one time in twelve, where 16 passes of
    the small batches missed it about every other time."""
    codes = []
    for _ in range(10):
        batches = iter(DataLoader(toy_dataset(toy), **SPAWN))
        for _ in range(3):
            next(batches)
        workers = list(batches._workers)  # type: ignore[attr-defined]
        batches._shutdown_workers()  # type: ignore[attr-defined]
        codes += [w.exitcode for w in workers]
    assert codes == [0] * 20


def test_the_exit_hook_waits_for_queue_feeders_within_its_grace():
    release = threading.Event()
    quick = threading.Thread(target=time.sleep, args=(0.3,), name="QueueFeederThread",
                             daemon=True)
    stuck = threading.Thread(target=release.wait, name="QueueFeederThread", daemon=True)
    quick.start()
    stuck.start()
    worker_exit._let_feeders_finish(grace_s=1.0)
    left = stuck.is_alive()
    release.set()
    assert not quick.is_alive()  # waited for the one that finished within the grace
    assert left  # and returned with the stuck one still running: left after the grace
