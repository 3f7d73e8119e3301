"""The ``warm`` action: a plan's blocks loaded into the server's cache and its host's tier.

``data_access="full_in_mem"`` and every in-process reader ask for it. The plan's
blocks (``windpipe.services.materialize.blocks``: all rows of each protocol, decoded and scaled,
end to
end) are loaded one by one in a helper thread, through the tier when the server has
one, so each block is decoded once per host; batches of a warmed plan then take the
block path (one gather per batch). Progress results are sent about every 1/20 of the
chunks, as they load (:class:`~services.contract.reports.WarmProgress`); the last result
also names the blocks and the tier that holds them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

from windpipe.services.contract.errors import ResourceExhausted
from windpipe.services.contract.reports import TierStatus, WarmProgress
from windpipe.services.materialize.blocks import block_layouts, block_request
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier
from windpipe.services.storage.store import Storage

__all__ = ["warm_results"]

_STEPS = 20


def warm_results(plan: PlanContext, storage: Storage, cache: ChunkCache,
                 tier: Tier | None) -> Iterator[WarmProgress]:
    """Load every block of ``plan``; yields progress results (see the module docstring).

    A plan larger than the tier's budget (without a tier: the cache's) is refused at
    once, before anything loads: with a tier the blocks are mapped files, which the
    cache charges only their mapping (:func:`windpipe.services.materialize.tier.mapping_charge`).
    """
    layouts = block_layouts(plan)
    total_bytes = sum(layout.nbytes for layout in layouts)
    if tier is not None and not tier.fits(total_bytes, blocks=len(layouts)):
        raise ResourceExhausted(
            f"plan {plan.plan_id} needs {total_bytes} bytes in the host tier but its budget "
            f"is {tier.budget_bytes} bytes: raise --tier-bytes or use data_access='windowed'",
            details={"needed_bytes": total_bytes, "budget_bytes": tier.budget_bytes},
        )
    if tier is None and total_bytes > cache.budget_bytes:
        raise ResourceExhausted(
            f"plan {plan.plan_id} needs {total_bytes} bytes in memory but the cache budget is "
            f"{cache.budget_bytes} bytes: raise --cache-bytes or use data_access='windowed'",
            details={"needed_bytes": total_bytes, "budget_bytes": cache.budget_bytes},
        )
    return _progress(plan, storage, cache, tier)


def _progress(plan: PlanContext, storage: Storage, cache: ChunkCache,
              tier: Tier | None) -> Iterator[WarmProgress]:
    layouts = block_layouts(plan)
    total_bytes = sum(layout.nbytes for layout in layouts)
    total = sum(int(layout.chunks.shape[0]) for layout in layouts)
    events: queue.Queue[tuple[int, int] | BaseException | None] = queue.Queue()

    def run() -> None:
        chunks = done = 0
        try:
            for layout in layouts:
                def progress(k: int, nbytes: int, c0: int = chunks, b0: int = done) -> None:
                    events.put((c0 + k, b0 + nbytes))

                request = block_request(plan, layout, storage=storage, tier=tier,
                                        progress=progress)
                cache.acquire([request]).release()
                chunks += int(layout.chunks.shape[0])
                done += layout.nbytes
                events.put((chunks, done))
        except BaseException as exc:
            events.put(exc)
            return
        events.put(None)

    t0 = time.perf_counter()

    def result(loaded: int, nbytes: int) -> WarmProgress:
        return WarmProgress(loaded=loaded, total=total, bytes=nbytes, total_bytes=total_bytes,
                            seconds=round(time.perf_counter() - t0, 6), time=time.time())

    threading.Thread(target=run, name="windpipe-warm", daemon=True).start()
    step = max(1, total // _STEPS)
    sent = -1
    loaded = nbytes = 0
    while True:
        item = events.get()
        if item is None:
            break
        if isinstance(item, BaseException):
            raise item
        loaded, nbytes = item
        if loaded - sent >= step and loaded < total:
            sent = loaded
            yield result(loaded, nbytes)
    yield result(total, total_bytes).model_copy(update={
        "blocks": [layout.key for layout in layouts],
        "tier": TierStatus.model_validate(tier.info().as_dict()) if tier is not None else None,
    })
