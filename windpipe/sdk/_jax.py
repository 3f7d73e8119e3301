"""A plan's batches as ``jax.Array`` s: the same batches as torch's, for JAX training loops.

:class:`JaxLoader` iterates one rank's pass over a plan like ``plan.loader`` and
``plan.torch_dataset`` do, from the same source (the same-host tier or Flight, the
same bytes), through the numpy form of ``windpipe.sdk._arrays``: torch is never imported.

* Placement: one runtime call per array, the one under ``jax.device_put`` without its
  ~0.1 ms of Python per array (``_direct_put``; ``jax.device_put`` itself where this
  jax lacks that call, for other dtypes and for a ``sharding``). On the CPU a
  ``jax.Array`` is the numpy buffer itself when that starts on a 64-byte boundary
  (always ``inputs``, ``targets`` and ``target_valid``, made so here, and the same-host
  path's full-window mask and ``has_channel``, built into
  :class:`~sdk._arrays.AlignedMemory`); a buffer that is not aligned (a streamed batch's
  mask, in gRPC's buffer; a batch whose lanes end early) is copied once: by XLA in the call
  below 100 KiB, by ``ArrayBatch.dense`` into aligned memory from there on (XLA's
  copy of a large buffer goes through its transfer thread, ~30 us more per array). On
  an accelerator each array is one host-to-device copy. With ``sharding`` (a
  ``jax.sharding.Sharding``) the batch is placed across its devices
  (``jax.device_put``; with several processes ``jax.make_array_from_process_local_data``,
  each process giving its rank's lanes).
* ``inputs`` and ``targets`` (views of one window block on the host, which XLA cannot
  take) are copied once into aligned arrays of their own, and ``target_valid`` computed,
  on the host (``ArrayBatch.dense``): no device call compiled per batch
  shape. Provenance (``state``) and the resume cursor stay on the host.
* Ranks: ``jax.process_index()`` of ``jax.process_count()`` unless ``rank`` and
  ``world_size`` are given; every rank gets the same number of batches when the plan
  trims distributed tails (SEMANTICS section 7).
* Read-ahead: with ``prefetch`` >= 1 a background thread reads, converts and places at
  most ``prefetch`` batches ahead of the consumer, so host-to-device copies overlap the
  consumer's steps; the default on an accelerator (the plan's ``read_ahead``, as
  ``plan.loader``). On the CPU the default is 0: each batch is made when asked for, in
  the consumer's thread. There the thread overlapped nothing (the host work holds the
  GIL) and cost ~15% of a batch in hand-offs, while XLA's asynchronous dispatch already
  runs a step alongside the next batch's host work.
* Resumption: :meth:`JaxLoader.state` is ``{"plan_id", "epoch", "batch"}`` (the torch
  dataset's ``state_dict`` format: either loader resumes the other's state);
  :meth:`JaxLoader.load_state` makes the next iteration yield exactly the rest of that
  epoch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from windpipe.sdk._arrays import AlignedArrays, AlignedMemory, ArrayBatch, array_batches
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.sdk._jax_batch import (
    JAX_HINT,
    JaxAlignedBatch,
    JaxBatch,
    JaxMissing,
    Placed,
    on_cpu,
    place,
    place_array,
    require_jax,
)
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.options import SourceOptions
from windpipe.services.contract.ranks import check_rank

if TYPE_CHECKING:
    from windpipe.sdk._handles import Plan

__all__ = ["JAX_HINT", "JaxAlignedBatch", "JaxBatch", "JaxLoader", "JaxMissing", "place",
           "place_array", "require_jax"]


@dataclass
class _Item:
    batch: Placed | None = None
    error: BaseException | None = None
    done: bool = False


class JaxLoader:
    """One rank's pass over a plan as :class:`JaxBatch` es (:class:`JaxAlignedBatch` es for
    an aligned plan), placed as read (read ahead in a thread with ``prefetch`` >= 1).

    ``options``: ``transport``, ``data_access`` and ``input_valid``, else the plan's
    config's (any other option is :class:`InvalidConfig`). ``device``: a ``jax.Device``
    (default: the first local device); ``sharding``: a ``jax.sharding.Sharding`` for the
    batch instead (not both).
    """

    def __init__(self, plan: Plan, epoch: int = 0, *, rank: int | None = None,
                 world_size: int | None = None, device: Any = None, sharding: Any = None,
                 prefetch: int | None = None, progress: bool | None = None,
                 **options: Any) -> None:
        self._jax = require_jax()
        if device is not None and sharding is not None:
            msg = "give a device or a sharding, not both"
            raise InvalidConfig(msg)
        if sharding is not None and not isinstance(sharding, self._jax.sharding.Sharding):
            msg = f"sharding must be a jax.sharding.Sharding, got {type(sharding).__name__}"
            raise InvalidConfig(msg)
        self.plan = plan
        self.plan_id = plan.id
        self._source_options: SourceOptions = plan._options("plan.batches", options).source
        self.target = sharding if sharding is not None else (
            self._jax.local_devices()[0] if device is None else device)
        if prefetch is None:
            prefetch = 0 if on_cpu(self.target) else plan.config.merged().read_ahead
        if not isinstance(prefetch, int) or prefetch < 0:
            msg = f"prefetch must be an int >= 0, got {prefetch!r}"
            raise InvalidConfig(msg)
        self.prefetch = prefetch
        self._rank, self._world_size = rank, world_size
        self._progress = progress
        self.epoch = 0
        self.set_epoch(epoch)

    @property
    def rank(self) -> int:
        """This process's rank (``jax.process_index()`` unless given)."""
        return self._rank_world()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks (``jax.process_count()`` unless given)."""
        return self._rank_world()[1]

    def _rank_world(self) -> tuple[int, int]:
        rank = self._jax.process_index() if self._rank is None else self._rank
        world = self._jax.process_count() if self._world_size is None else self._world_size
        try:
            check_rank(rank, world)
        except WindpipeError as exc:  # the loader's own settings: a config problem
            raise InvalidConfig(exc.message, details=exc.details) from None
        return rank, world

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration streams (from its first batch)."""
        if not isinstance(epoch, int) or epoch < 0:
            msg = f"epoch must be an int >= 0, got {epoch!r}"
            raise InvalidConfig(msg)
        self.epoch, self._start, self._cursor = epoch, 0, 0

    def state(self) -> dict[str, Any]:
        """``{"plan_id", "epoch", "batch"}``: ``batch`` is the rank-local index of the next
        batch to hand out (the batches read ahead but not handed out are not counted)."""
        return {"plan_id": self.plan_id, "epoch": self.epoch, "batch": self._cursor}

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields the rest of ``state``'s epoch."""
        if state.get("plan_id") != self.plan_id:
            msg = (f"this state belongs to plan {state.get('plan_id')!r}, "
                   f"not to {self.plan_id!r}")
            raise InvalidConfig(msg)
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            msg = f"invalid state: epoch {epoch}, batch {batch}"
            raise InvalidConfig(msg)
        self.epoch, self._start, self._cursor = epoch, batch, batch

    def __len__(self) -> int:
        """Batches the next iteration yields (the rank's pass from the resume point on)."""
        rank, world = self._rank_world()
        return self.plan.pass_length(self.epoch, rank=rank, world_size=world,
                                     start_batch=self._start)

    def host_batches(self) -> Iterator[ArrayBatch | AlignedArrays]:
        """The next iteration's batches as numpy (:mod:`windpipe.sdk._arrays`), unplaced and not
        read ahead: the loader's own input, for comparisons and benchmarks."""
        rank, world = self._rank_world()
        start, self._start = self._start, 0
        opts = self._source_options
        source = self.plan._open(opts, epoch=self.epoch, progress=self._progress)
        records = source.records(epoch=self.epoch, rank=rank, world_size=world,
                                 start_batch=start, memory=AlignedMemory())
        return array_batches(records)

    def __iter__(self) -> Iterator[Placed]:
        host = self.host_batches()  # checks the ranks and opens the source here
        if self.prefetch == 0:
            return self._inline(host)
        q: queue.Queue[_Item] = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def put(item: _Item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                except queue.Full:
                    continue
                return True
            return False

        def reader() -> None:
            try:
                for batch in host:
                    if stop.is_set() or not put(_Item(batch=place(batch, self.target))):
                        return
                put(_Item(done=True))
            except BaseException as exc:
                put(_Item(error=exc))
            finally:
                close = getattr(host, "close", None)
                if close is not None:
                    close()

        thread = threading.Thread(target=reader, name="windpipe-jax-loader", daemon=True)
        thread.start()
        return self._consume(q, stop, thread)

    def _inline(self, host: Iterator[ArrayBatch | AlignedArrays]) -> Iterator[Placed]:
        try:
            for batch in host:
                placed = place(batch, self.target)
                self._cursor = placed.batch_idx + 1
                yield placed
        finally:
            close = getattr(host, "close", None)
            if close is not None:
                close()

    def _consume(self, q: queue.Queue[_Item], stop: threading.Event,
                 thread: threading.Thread) -> Iterator[Placed]:
        try:
            while True:
                item = q.get()
                if item.error is not None:
                    raise item.error
                if item.done or item.batch is None:
                    return
                self._cursor = item.batch.batch_idx + 1
                yield item.batch
        finally:
            stop.set()
            thread.join(timeout=2)  # it stops at its next put; a stalled read is a daemon's

    def __repr__(self) -> str:
        return (f"JaxLoader(plan={self.plan_id!r}, epoch={self.epoch}, "
                f"target={self.target}, prefetch={self.prefetch})")
