"""The host tier filled behind a stream: a plan larger than the chunk cache but within the
tier is decoded into the tier in a background thread, so the next pass is served from it.

A stream of such a plan reads its first pass by chunks (each batch decodes only its
windows' chunks, so the first batch comes at once); once that batch is built,
:class:`TierFill` decodes the plan's blocks (``windpipe.services.materialize.blocks``) into the
tier one after the other, each block's row groups in order
(``windpipe.services.materialize.block_fill``) with the storage read-ahead. From the batch after a
block is in the tier, the stream reads that block's
protocol from the tier (``read_paths.blocks.BlockPath``: the tier counts as held), so the
rest of the first pass is neither read nor decoded again; a stream that starts once the
tier holds every block takes the block path from its first batch
(``read_paths.blocks_fit``). A ``block_shuffled`` plan is not filled here: its stream
decodes one shuffle block at a time into the tier as it goes
(``read_paths.sub_blocks``), which is the first pass's fill. Builders of one block on
this host queue on its lock in the tier, so a fill and a ``warm`` or a same-host reader
never decode it twice.
"""

from __future__ import annotations

import threading

import numpy as np

from windpipe.services.logging import get_logger
from windpipe.services.materialize.block_fill import fill_block
from windpipe.services.materialize.blocks import BlockLayout, block_layouts
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.read_paths import AUTO_SPARE
from windpipe.services.materialize.sub_blocks import sub_blocks
from windpipe.services.materialize.tier import Tier
from windpipe.services.storage.store import Storage

__all__ = ["TierFill"]

_log = get_logger("windpipe.flight.tier")


class TierFill:
    """Fills ``tier`` with the blocks of plans larger than ``cache_bytes`` (see the module
    docstring); one thread per plan at a time, stopped between blocks by :meth:`stop`."""

    def __init__(self, tier: Tier, *, cache_bytes: int) -> None:
        self.tier = tier
        self.cache_bytes = cache_bytes
        self.blocks = 0  # blocks this server decoded into the tier
        self.bytes_read = 0  # bytes those fills read from storage
        self.failures = 0  # fills that ended in an error (a full disk, a store down)
        self._filling: set[str] = set()  # block keys of fills in progress
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self, plan: PlanContext, storage: Storage | None) -> bool:
        """Start filling the tier with ``plan``'s blocks when they exceed the cache, fit the
        tier and are not all in it (and no fill of them runs); True when one started."""
        if storage is None or sub_blocks(plan) is not None:
            return False  # a block_shuffled stream fills the tier a sub-block at a time
        layouts = block_layouts(plan)
        whole = sum(x.nbytes for x in layouts)
        if whole + self.cache_bytes // AUTO_SPARE <= self.cache_bytes:
            return False  # the stream's block path loads them itself
        if not self.tier.fits(whole, blocks=len(layouts)):
            return False
        missing = [x for x in layouts if not self.tier.holds(x.key)]
        keys = {x.key for x in missing}
        with self._lock:
            if not missing or keys & self._filling or self._stop.is_set():
                return False
            self._filling |= keys
            thread = threading.Thread(target=self._fill, args=(plan, storage, missing),
                                      name="windpipe-tier-fill", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return True

    def wait(self, timeout_s: float) -> bool:
        """Wait for the fills in progress; True when none is left (tests, shutdown)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout_s)
        return not any(t.is_alive() for t in threads)

    def stop(self) -> None:
        """Start no fill and end the running ones after their current block."""
        self._stop.set()

    def _fill(self, plan: PlanContext, storage: Storage, layouts: list[BlockLayout]) -> None:
        try:
            for layout in layouts:
                if self._stop.is_set():
                    return

                def fill(rows: np.ndarray, lay: BlockLayout = layout) -> int:
                    return fill_block(plan, storage, lay, rows)

                _, read = self.tier.get_or_build(layout.key, rows=layout.rows,
                                                 c_in=layout.c_in, c_out=layout.c_out,
                                                 fill=fill)
                with self._lock:
                    self.blocks += int(read > 0)
                    self.bytes_read += read
            _log.info("flight.tier.filled", plan=plan.plan_id, blocks=len(layouts),
                      bytes=sum(x.nbytes for x in layouts))
        except Exception as exc:  # the stream goes on by chunks; the next one tries again
            with self._lock:
                self.failures += 1
            _log.warning("flight.tier.fill_failed", plan=plan.plan_id,
                         error=type(exc).__name__, message=str(exc))
        finally:
            with self._lock:
                self._filling -= {x.key for x in layouts}
