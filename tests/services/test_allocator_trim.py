"""Trimming the allocators gives freed memory back: a thread frees most of 128 MiB it
allocated in 64 KiB pieces (below glibc's mmap threshold, so they live in the thread's
arena) while every sixteenth piece stays alive; the freed pages stay resident until
:func:`trim_allocators`. Run in a fresh interpreter so no other test's heap counts."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from windpipe.services.allocator_trim import AllocatorTrimmer, _malloc_trim

_FRAGMENT = """
import threading
import numpy as np
from windpipe.services.allocator_trim import trim_allocators

def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

kept = []
def churn():
    pieces = [np.ones(16384, dtype=np.float32) for _ in range(2048)]  # 2048 x 64 KiB
    kept.extend(pieces[::16])
t = threading.Thread(target=churn)
t.start(); t.join()
before = anon_kib()
released = trim_allocators()
print(before, anon_kib(), int(released), sum(a.size for a in kept))
"""


@pytest.mark.skipif(_malloc_trim() is None or not sys.platform.startswith("linux"),
                    reason="glibc's malloc_trim and /proc are Linux's")
def test_trimming_hands_a_threads_freed_pieces_back() -> None:
    out = subprocess.run([sys.executable, "-c", _FRAGMENT], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    before, after, released, kept = (int(x) for x in out)
    assert kept == 128 * 16384  # the live pieces are still there
    assert released == 1
    assert before - after > 64 << 10, (before, after)  # KiB: over half the freed 120 MiB


def test_the_trimmer_trims_until_stopped_and_never_at_zero() -> None:
    trimmer = AllocatorTrimmer(interval_s=0.01).start()
    while trimmer.trims < 2:
        time.sleep(0.01)
    trimmer.stop()
    done = trimmer.trims
    time.sleep(0.05)
    assert trimmer.trims == done
    assert not any(t.name == "windpipe-allocator-trim" for t in threading.enumerate())

    idle = AllocatorTrimmer(interval_s=0).start()
    time.sleep(0.05)
    idle.stop()
    assert idle.trims == 0
