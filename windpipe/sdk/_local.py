"""The same-host path: a plan's batches built in this process from the host's shared tier.

When a Flight server of the deployment runs on this host, it tells an authenticated
caller where its tier of decoded blocks is (``tier-info`` action: path and id; the
anonymous ``health`` action names nothing of the host). A reader that finds that tier here
asks the server to warm the plan (the server decodes each block once per host, into
the tier, or finds it there), maps the blocks read-only and builds every batch with
the same materializer the server runs: the same lanes, values, padding and
provenance, byte for byte, without the gRPC hop and without decoding anything itself.

``transport`` (``plan.batches``, ``plan.loader``, ``plan.torch_dataset``, or
``LoaderConfig.transport``): ``"flight"`` always streams; ``"local"`` requires the
same-host path; ``"auto"`` (default) takes it when a server's tier is reachable here
and the plan's blocks fit it, else streams.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from windpipe.sdk._exceptions import (
    Forbidden,
    InvalidConfig,
    InvalidRequest,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from windpipe.sdk._locations import local_host_id
from windpipe.sdk._stream import FlightStream
from windpipe.sdk._warm import warm_plan
from windpipe.services.contract.configs import TRANSPORTS
from windpipe.services.contract.wire import ACTION_TIER_INFO, BatchMetadata, batch_schema
from windpipe.services.materialize.batch_memory import BatchMemory
from windpipe.services.materialize.blocks import block_key, block_layouts, block_request
from windpipe.services.materialize.builder import BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier, TierInfo, tier_bytes
from windpipe.services.materialize.windows import WindowPass
from windpipe.services.memo import Memo, deep_nbytes
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.ranks import pass_start, rank_batches
from windpipe.services.planning.schedule import Schedule

__all__ = ["PASSES_KEPT", "PASS_BYTES_KEPT", "LocalReader", "LocalReaders"]

PASSES_KEPT = 8  # passes (epoch, rank, world size) a reader keeps ready to run again
# ... within this many bytes of schedules and rank batches: a pass of a large plan is long
# enough that setting it up again costs nothing per batch, and its schedule is large
PASS_BYTES_KEPT = 64 << 20
_READERS_KEPT = 8  # plans a Catalog keeps a same-host reader of


@dataclass(frozen=True, slots=True, eq=False)
class _Pass:
    """One rank's pass of one epoch, kept by its reader for the next pass of it: the
    schedule, the rank's batches and the window path over them (its block views and its
    latest lane tables), so a pass of a small plan starts in microseconds."""

    schedule: Schedule
    batches: np.ndarray
    windows: WindowPass


def _pass_bytes(p: _Pass) -> int:
    """What keeping a pass holds alive beyond one segment's lane tables."""
    return deep_nbytes(p.schedule) + int(p.batches.nbytes)


def _kept_passes() -> Memo[tuple[int, int, int], _Pass]:
    """A reader's kept passes, none yet."""
    return Memo(PASSES_KEPT, max_bytes=PASS_BYTES_KEPT, weigh=_pass_bytes)


@dataclass(eq=False)
class LocalReader:
    """Builds one plan's batches in this process from blocks in a shared tier.

    ``location`` is the Flight server that shares the tier (and warms the plan into
    it); the reader itself never reads storage. It keeps the last :data:`PASSES_KEPT`
    passes it made (per epoch, rank and world size: the schedule, the rank's batches,
    the window path's lane tables and block views; within :data:`PASS_BYTES_KEPT`), so
    passes over a small plan, epoch after epoch, cost no setup beyond the first.
    """

    plan: PlanContext
    tier: Tier
    location: str
    cache: ChunkCache  # the mapped blocks, shared by every pass of this reader
    _passes: Memo[tuple[int, int, int], _Pass] = field(
        default_factory=_kept_passes, init=False, repr=False)
    _mapped: bool = field(default=False, init=False, repr=False)
    _wire_schema: pa.Schema | None = field(default=None, init=False, repr=False)
    # the builder every kept window path reads blocks and provenance through (neither
    # changes it; a pass's other batches get a builder of their own, :meth:`records`)
    _windows: BatchBuilder | None = field(default=None, init=False, repr=False)

    @classmethod
    def create(cls, artifact: PlanArtifact, tier: Tier, location: str, *,
               input_valid: bool = False) -> LocalReader:
        """A reader of ``artifact`` over ``tier`` (``input_valid``: of the plan as read
        with it, whose blocks are its own: ``PlanContext.with_input_valid``)."""
        plan = PlanContext.from_artifact(artifact)
        if input_valid:
            plan = plan.with_input_valid()
        blocks = sum(layout.nbytes for layout in block_layouts(plan))
        return cls(plan=plan, tier=tier, location=location,
                   cache=ChunkCache(max(1, blocks), readahead_workers=0))

    @property
    def block_bytes(self) -> int:
        """Bytes of every block of the plan (what the tier must hold)."""
        return self.cache.budget_bytes

    def holds_its_blocks(self) -> bool:
        """Whether every block is mapped here already (then nothing needs warming). Once
        true it stays true: the cache's budget is every block's bytes, so none is evicted."""
        if not self._mapped:
            self._mapped = all(self.cache.contains(block_key(x))
                               for x in block_layouts(self.plan))
        return self._mapped

    def map_blocks(self) -> None:
        """Map every block from the tier into this reader's cache (after the server
        warmed them), so the first pass need not ask the server to warm them again; and
        make the window paths' builder (its plan tables), so the first pass does not."""
        plan = self.plan
        for layout in block_layouts(plan):
            with self.cache.acquire([block_request(plan, layout, storage=None,
                                                   tier=self.tier)]):
                pass
        self._window_builder()  # with the blocks (~2-4 ms once), not in the first pass

    def release(self) -> None:
        """Drop the kept passes and the mapped blocks (the catalog that made this reader
        closed). Their cycles would hold every mapping, and a descriptor each, until the
        collector found them: a process that reconnects after each error (a renewed
        token) grew by a plan's blocks each time. A pass still running maps what it
        needs again."""
        self._passes = _kept_passes()
        self._windows = None
        self._mapped = False
        self.cache.clear()

    def records(self, *, epoch: int, rank: int, world_size: int, start_batch: int,
                memory: BatchMemory | None = None,
                ) -> Iterator[tuple[BuiltBatch, BatchMetadata]]:
        """One rank's pass from ``start_batch`` on: the batches the Flight server would
        stream, before Arrow (:func:`sdk.batch_from_arrays` makes them ``Batch``es).

        Full-window batches come from the pass's kept window path (written into
        ``memory`` when given: a GPU feed's page-locked buffer); from the first batch
        that is not one (padding, a short stream, aligned parts), the rest of the pass is
        built by a :class:`BatchPipeline` of its own (a builder per pipeline, as the
        Flight server has one per stream; its full-window batches still from the kept
        window path), which is byte for byte the same.
        """
        p = self._passes.get((epoch, rank, world_size),
                             lambda: self._new_pass(epoch, rank, world_size))
        # positions count parts (aligned: one per protocol); past the end: refused
        start = pass_start(p.schedule, p.batches, start_batch=start_batch, rank=rank,
                           world_size=world_size)
        end = int(p.batches.shape[0])
        windows = p.windows
        i = start
        while i < end:
            built = windows.build(i, memory=memory)
            if built is None:
                break
            yield built, built.meta
            i += 1
        if i < end:
            pipeline = BatchPipeline(self._builder(), p.schedule, p.batches, start=i, end=end,
                                     readahead_batches=0, windows=windows, memory=memory)
            for _, built in pipeline:
                yield built, built.meta

    def _new_pass(self, epoch: int, rank: int, world_size: int) -> _Pass:
        plan = self.plan
        schedule = plan.schedule(epoch)
        batches = rank_batches(schedule, rank=rank, world_size=world_size,
                               drop_incomplete_distributed=plan.spec.drop_incomplete_distributed)
        windows = self._window_builder().window_pass(schedule, batches, start=0,
                                                     end=int(batches.shape[0]))
        return _Pass(schedule=schedule, batches=batches, windows=windows)

    def _window_builder(self) -> BatchBuilder:
        """The one builder the window paths read blocks and provenance through."""
        if self._windows is None:
            self._windows = self._builder()
        return self._windows

    def _builder(self) -> BatchBuilder:
        if self._wire_schema is None:  # made once per reader (~50 us each time)
            self._wire_schema = batch_schema(plan_id=self.plan.plan_id,
                                             version_id=self.plan.version_id,
                                             input_valid=self.plan.input_valid)
        return BatchBuilder(
            self.plan, None, self.cache, self._wire_schema, tier=self.tier, blocks="always",
            lazy_provenance=True,
        )


class LocalReaders:
    """The same-host readers of one :class:`~sdk.Catalog`: the tier found on this host
    (asked once) and a reader per plan."""

    def __init__(self, stream: Callable[[], FlightStream],
                 artifact: Callable[[str], bytes]) -> None:
        self._stream = stream
        self._artifact = artifact
        self._readers: Memo[tuple[str, bool], LocalReader] = Memo(_READERS_KEPT)
        self._found: tuple[Tier, str] | None = None
        self._looked = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """Let go of every reader's mapped blocks and of the tier found (a later read
        looks again)."""
        with self._lock:
            readers, self._readers = self._readers.values(), Memo(_READERS_KEPT)
            self._found, self._looked = None, False
        for reader in readers:
            reader.release()

    def reader(self, plan_id: str, *, transport: str, progress: bool | None = None,
               input_valid: bool = False) -> LocalReader | None:
        """The local reader of ``plan_id`` with its blocks in the tier, or None to stream
        (``input_valid``: of the plan as read with it).

        ``"local"`` raises what keeps the same-host path from working; ``"auto"``
        then streams over Flight instead.
        """
        if transport not in TRANSPORTS:
            msg = f"transport must be one of {list(TRANSPORTS)}, got {transport!r}"
            raise InvalidConfig(msg)
        if transport == "flight":
            return None
        try:
            return self._ready(plan_id, progress=progress, input_valid=input_valid)
        except (Unavailable, ResourceExhausted):
            if transport == "local":
                raise
            return None

    def _ready(self, plan_id: str, *, progress: bool | None,
               input_valid: bool) -> LocalReader:
        found = self._tier()
        if found is None:
            msg = ("no Flight server of this deployment shares a tier with this host "
                   "(transport='local' needs a server on this host with --tier-dir)")
            raise Unavailable(msg)
        tier, location = found
        reader = self._readers.get((plan_id, input_valid), lambda: LocalReader.create(
            PlanArtifact.from_ipc(self._artifact(plan_id)), tier, location,
            input_valid=input_valid))
        if reader.holds_its_blocks():  # mapped by an earlier pass: eviction cannot hurt it
            return reader
        blocks = len(block_layouts(reader.plan))
        if not tier.fits(reader.block_bytes, blocks=blocks):
            needed = tier_bytes(reader.block_bytes, blocks=blocks)
            msg = (f"plan {plan_id} needs {needed} bytes of blocks but the tier holds "
                   f"{tier.budget_bytes}: raise the server's --tier-bytes")
            raise ResourceExhausted(msg, details={"needed_bytes": needed,
                                                  "tier_budget_bytes": tier.budget_bytes})
        warmed = warm_plan(self._stream(), plan_id, progress=progress, locations=[location],
                           input_valid=input_valid)
        if warmed[location].tier_id != tier.id:
            msg = f"the Flight server at {location} warmed plan {plan_id} into another tier"
            raise Unavailable(msg)
        reader.map_blocks()  # mapped now: the next pass finds them here and warms nothing
        return reader

    def _tier(self) -> tuple[Tier, str] | None:
        with self._lock:
            if self._looked:
                return self._found
        stream = self._stream()
        found = None
        host_id = local_host_id()
        for location in stream.locations:
            try:  # refused or unknown (an older server): no tier there, stream instead
                answer = next(iter(stream.action(location, ACTION_TIER_INFO)), {})
            except (Unavailable, InvalidRequest, Unauthenticated, Forbidden):
                continue
            info = TierInfo.from_dict(answer.get("tier"))
            if info is not None and host_id is not None and info.host != host_id:
                continue  # another node's tier (WINDPIPE_HOST_ID, sdk._locations)
            tier = Tier.attach(info) if info is not None else None
            if tier is not None:
                found = (tier, location)
                break
        with self._lock:
            self._found, self._looked = found, True
        return found
