"""What a windpipe process sets before Arrow loads, and imports before its first request.

**Small pages for Arrow's allocator.** pyarrow's default memory pool (mimalloc 3 in
pyarrow 26) asks the kernel for transparent huge pages on every arena it reserves (its
option ``allow_thp``, 1 GiB arenas). Where the kernel grants huge pages on request
(``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise``, the default of many
distributions), each first touch of a 2 MiB page zeroes all of it. Measured on the
2-core CI machines: the first Arrow hash of a Flight stream's thread
(``pyarrow.compute.index_in`` of a plan's 6,704 paths in a pack of 14,633) cost
31-47 ms of system time in 22-28 page faults, against 3-5 ms with the option off; a
cold epoch over small segments paid that before its first batch.
:func:`prefer_small_pages` turns the option off unless the environment sets it.
mimalloc reads it once, when pyarrow loads, so the entry points call it before they
import anything that loads pyarrow: the ``windpipe`` command's ``main`` (every server
starts through it: ``windpipe serve``, in docker-compose and Kubernetes alike) and the
benchmarks' package (``bench/__init__.py``, which runs before each ``python -m
bench...`` script's own imports); ``MIMALLOC_ALLOW_THP=1`` in their environment keeps
the allocator's default. Importing a package sets nothing: a program of its own (a
notebook, a training script) keeps the default unless its environment sets
``MIMALLOC_ALLOW_THP=0``.

**Imports a first request would pay.** anyio loads its asyncio backend on its first
thread hop (``anyio.to_thread``, and FastAPI's with it), on the event loop: 50-175 ms
inside a fresh catalog's first registration. :func:`warm_imports` makes that import
when a catalog starts, so no request waits on it. pyarrow imports pandas (when
installed) the first time it converts a Python or numpy value (``pyarrow.array``,
``to_numpy``): 0.45 s and ~46 MiB of RSS a process. Nothing warms it: registering,
splitting, planning, the pages and streaming convert through
:mod:`windpipe.services.arrow_values`, which never loads it, so a server (and a
training process) holds pandas only where a job needs it (an instrument file's
conversion).

**Full collections.** CPython's oldest-generation collection walks every tracked object
while it holds the GIL, on whichever thread allocates: the catalog's event loop (and
``/healthz``) waits it out. A started catalog holds ~200,000 objects from its imports;
walking them took 110-280 ms on 2 busy cores (``python -m bench.healthz
--no-gc-freeze``: ``/healthz`` up to 285 ms during splits, statistics or schedule
pages). :func:`freeze_startup_heap` collects once and then leaves what is alive out of
later collections (``gc.freeze``); ``windpipe serve`` calls it once its servers are up,
and the longest collection under the same load is then at most 78 ms. Only that
process is affected: importing windpipe or embedding a catalog freezes nothing.
"""

from __future__ import annotations

import gc
import os

__all__ = ["ALLOCATOR_DEFAULTS", "freeze_startup_heap", "prefer_small_pages", "warm_imports"]

ALLOCATOR_DEFAULTS = {"MIMALLOC_ALLOW_THP": "0"}


def prefer_small_pages() -> None:
    """Set :data:`ALLOCATOR_DEFAULTS` in the environment where it does not say otherwise
    (effective only before pyarrow is imported)."""
    for name, value in ALLOCATOR_DEFAULTS.items():
        os.environ.setdefault(name, value)


def warm_imports() -> None:
    """Import anyio's asyncio backend (a catalog's first thread hop would)."""
    import anyio._backends._asyncio  # noqa: F401, PLC0415


def freeze_startup_heap() -> None:
    """Collect once, then keep every object alive now out of later collections (a
    server's process, once started; what is frozen is never freed)."""
    gc.collect()
    gc.freeze()
