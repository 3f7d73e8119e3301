"""A catalog run in this process: its REST calls in process, its batches built here.

``windpipe.embedded(data_dir)`` (the top layer, which may import the catalog) makes an
:class:`InProcess` and hands it to :class:`~sdk.Catalog`: a picklable description of
the catalog it runs (``open_transport`` builds the catalog's app in this process and
returns an ``httpx`` transport that calls it without a socket) and of how this
process reads the data (storage options, chunk cache and tier budgets). The SDK
itself never imports the catalog: it only calls ``open_transport``.

The batches are built here with the materializer a Flight server runs
(:class:`~services.materialize.builder.BatchBuilder` over the dataset's storage, the
chunk cache, and the host's tier of decoded blocks, by default ``data_dir/tier``, which
any other process of this host shares): the same plan gives the same batches, byte for byte, as
a served catalog and its Flight server. This process decodes blocks and chunks from
storage itself: in embedded mode the user is the operator, and reads with their own
permissions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from windpipe.sdk._exceptions import ResourceExhausted
from windpipe.sdk._html import bar_disabled, progress_bar
from windpipe.sdk._warm import WarmResult
from windpipe.services.contract.wire import BatchMetadata, batch_schema
from windpipe.services.materialize.batch_memory import BatchMemory
from windpipe.services.materialize.blocks import block_layouts, block_request
from windpipe.services.materialize.builder import BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier
from windpipe.services.memo import Memo
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.ranks import pass_start, rank_batches
from windpipe.services.storage.packs import PackStore
from windpipe.services.storage.store import StorageOptions, StorageRoots

if TYPE_CHECKING:
    import httpx

__all__ = ["IN_PROCESS_URL", "InProcess", "InProcessReader", "InProcessReaders"]

IN_PROCESS_URL = "http://windpipe.embedded"  # the REST base URL; no request leaves the process


@dataclass(frozen=True, kw_only=True)
class InProcess:
    """A catalog that runs in this process (see the module docstring); picklable, so a
    DataLoader worker opens one of its own from it.

    ``open_transport(self)``: the catalog's REST app in this process, as an ``httpx``
    transport (a module-level function, so that it pickles by name). ``storage``: how
    dataset roots are opened (``allowed=None``: any root the user names).
    ``cache_bytes``: the chunk cache budget; ``tier_dir`` and ``tier_bytes``: the tier
    of decoded blocks and its budget (``tier_dir`` None or ``tier_bytes`` 0: no tier);
    ``readahead_batches``: batches whose chunks are loaded ahead of the one being built;
    ``pack_dir``: where the catalog writes packs (:mod:`windpipe.services.storage.packs`; None:
    every segment read from its file).
    """

    data_dir: Path
    open_transport: Callable[[InProcess], httpx.BaseTransport]
    storage: StorageOptions = field(default_factory=StorageOptions)
    cache_bytes: int = 1 << 30
    tier_dir: Path | None = None
    tier_bytes: int = 4 << 30
    readahead_batches: int = 2
    pack_dir: Path | None = None

    @property
    def url(self) -> str:
        """What the catalog is called in reprs: ``embedded:<data_dir>``."""
        return f"embedded:{self.data_dir}"


@dataclass(eq=False)
class InProcessReader:
    """Builds one plan's batches in this process from its dataset's storage (through the
    chunk cache and the tier), as the Flight server's ``DoGet`` would."""

    plan: PlanContext
    readers: InProcessReaders

    def records(self, *, epoch: int, rank: int, world_size: int, start_batch: int,
                memory: BatchMemory | None = None,
                ) -> Iterator[tuple[BuiltBatch, BatchMetadata]]:
        """One rank's pass from ``start_batch`` on, before Arrow (what a Flight server
        streams, byte for byte). ``memory`` is not used: these batches come from the
        general builder, and a GPU feed pins them after (``windpipe.sdk._loader``)."""
        plan = self.plan
        schedule = plan.schedule(epoch)
        batches = rank_batches(schedule, rank=rank, world_size=world_size,
                               drop_incomplete_distributed=plan.spec.drop_incomplete_distributed)
        # positions count parts (aligned: one per protocol); past the end: refused
        start = pass_start(schedule, batches, start_batch=start_batch, rank=rank,
                           world_size=world_size)
        readers = self.readers
        builder = BatchBuilder(
            plan, readers.roots.open(plan.root_uri), readers.cache,
            batch_schema(plan_id=plan.plan_id, version_id=plan.version_id,
                         input_valid=plan.input_valid),
            tier=readers.tier, blocks="auto", lazy_provenance=True,
        )
        pipeline = BatchPipeline(builder, schedule, batches, start=start,
                                 end=int(batches.shape[0]),
                                 readahead_batches=readers.spec.readahead_batches)
        for _, built in pipeline:
            yield built, built.meta


class InProcessReaders:
    """The in-process readers of one embedded :class:`~sdk.Catalog`: one chunk cache,
    the host's tier, the opened storage roots, and a reader per plan (``artifact(id)``:
    the stored plan's bytes, asked of the catalog)."""

    def __init__(self, spec: InProcess, artifact: Callable[[str], bytes]) -> None:
        self.spec = spec
        self._artifact = artifact
        self.roots = StorageRoots(spec.storage)
        self.tier = (Tier(spec.tier_dir, budget_bytes=spec.tier_bytes)
                     if spec.tier_dir is not None and spec.tier_bytes > 0 else None)
        self._cache: ChunkCache | None = None
        self._readers: Memo[tuple[str, bool], InProcessReader] = Memo(8)
        self._packs = None if spec.pack_dir is None else PackStore(spec.pack_dir)
        self._lock = threading.Lock()

    @property
    def cache(self) -> ChunkCache:
        """The chunk cache (made on first use: no thread starts before a batch is read)."""
        with self._lock:
            if self._cache is None:
                self._cache = ChunkCache(self.spec.cache_bytes)
            return self._cache

    def close(self) -> None:
        """Stop the cache's read-ahead threads."""
        with self._lock:
            cache, self._cache = self._cache, None
        if cache is not None:
            cache.close()

    def reader(self, plan_id: str, *, input_valid: bool = False) -> InProcessReader:
        """The reader of ``plan_id`` (its stored plan fetched once; ``input_valid``: the
        plan as read with it, ``PlanContext.with_input_valid``)."""
        return self._readers.get((plan_id, input_valid), lambda: InProcessReader(
            plan=self._plan(plan_id, input_valid=input_valid), readers=self))

    def _plan(self, plan_id: str, *, input_valid: bool) -> PlanContext:
        if input_valid:
            return self.reader(plan_id).plan.with_input_valid()
        return PlanContext.from_artifact(PlanArtifact.from_ipc(self._artifact(plan_id)),
                                         packs=self._packs)

    def warm(self, plan_id: str, *, progress: bool | None = None,
             input_valid: bool = False) -> WarmResult:
        """Load every block of ``plan_id`` into the cache (through the tier), as a Flight
        server's ``warm`` action does; a plan larger than the cache budget raises
        :class:`ResourceExhausted` naming both sizes, before anything loads."""
        reader = self.reader(plan_id, input_valid=input_valid)
        plan, cache = reader.plan, self.cache
        layouts = block_layouts(plan)
        total = sum(layout.nbytes for layout in layouts)
        if total > cache.budget_bytes:
            msg = (f"plan {plan_id} needs {total} bytes in memory but the cache budget is "
                   f"{cache.budget_bytes} bytes: raise cache_bytes= of windpipe.embedded() "
                   "or use data_access='windowed'")
            raise ResourceExhausted(msg, details={"needed_bytes": total,
                                                  "budget_bytes": cache.budget_bytes})
        storage = self.roots.open(plan.root_uri)
        t0 = time.perf_counter()
        chunks = 0
        disable = bar_disabled(progress=progress)
        with progress_bar()(desc=f"warming {plan_id}", total=total, unit="B",
                            unit_scale=True, disable=disable) as bar:
            for layout in layouts:
                request = block_request(plan, layout, storage=storage, tier=self.tier)
                cache.acquire([request]).release()
                chunks += int(layout.chunks.shape[0])
                bar.update(layout.nbytes)
        return WarmResult(chunks=chunks, bytes=total,
                          seconds=round(time.perf_counter() - t0, 6),
                          tier_id=self.tier.info().id if self.tier is not None else None)
