"""A plan's batches as ``jax.Array`` s: the same batches as torch's, for JAX training loops.

:class:`JaxLoader` iterates one rank's pass over a plan like ``plan.loader`` and
``plan.torch_dataset`` do, from the same source (the same-host tier or Flight, the
same bytes), through the numpy form of ``windpipe.sdk._arrays``: torch is never imported.

* Placement: on the CPU, each array becomes a ``jax.Array`` over the numpy buffer itself
  (DLPack; XLA aliases host memory that starts on a 64-byte boundary: always
  ``inputs``, ``targets`` and ``target_valid``, made so here, and the same-host path's
  mask and ``has_channel``, built into :class:`~sdk._arrays.AlignedMemory`); a buffer
  that is not aligned (a streamed batch's mask, in gRPC's buffer) is copied once, one
  that is read-only goes through ``jax.device_put``. On an accelerator each array takes
  one ``jax.device_put``. With ``sharding`` (a ``jax.sharding.Sharding``) the batch is
  placed across its devices (``jax.device_put``; with several processes
  ``jax.make_array_from_process_local_data``, each process giving its rank's lanes).
* ``inputs`` and ``targets`` (views of one window block on the host, which XLA cannot
  take) are copied once into aligned arrays of their own, and ``target_valid`` computed,
  in the read-ahead thread (``ArrayBatch.dense``): no device call compiled per batch
  shape. Provenance (``state``) and the resume cursor stay on the host.
* Ranks: ``jax.process_index()`` of ``jax.process_count()`` unless ``rank`` and
  ``world_size`` are given; every rank gets the same number of batches when the plan
  trims distributed tails (SEMANTICS section 7).
* Read-ahead: a background thread reads, converts and places at most ``prefetch``
  batches ahead of the consumer (default: the plan's ``read_ahead``, as
  ``plan.loader``), so transfers overlap the consumer's steps.
* Resumption: :meth:`JaxLoader.state` is ``{"plan_id", "epoch", "batch"}`` (the torch
  dataset's ``state_dict`` format: either loader resumes the other's state);
  :meth:`JaxLoader.load_state` makes the next iteration yield exactly the rest of that
  epoch.
"""

from __future__ import annotations

import importlib
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from windpipe.sdk._arrays import AlignedArrays, AlignedMemory, ArrayBatch, array_batches
from windpipe.sdk._batch_state import BatchState
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.extras import install_hint
from windpipe.services.contract.options import SourceOptions
from windpipe.services.contract.ranks import check_rank

if TYPE_CHECKING:
    import jax

    from windpipe.sdk._handles import Plan

__all__ = ["JAX_HINT", "JaxAlignedBatch", "JaxBatch", "JaxLoader", "JaxMissing", "place",
           "place_array", "require_jax"]

JAX_HINT = ("windpipe's JAX batches need jax: install your jax build (pip install jax, "
            f"or jax[cuda12] for NVIDIA GPUs), or {install_hint('jax')}")


class JaxMissing(ModuleNotFoundError):  # noqa: N818 - an ImportError, named as one
    """jax cannot be imported, and what was asked for needs it."""


def require_jax() -> ModuleType:
    """The jax module, or :class:`JaxMissing` saying how to install it."""
    try:
        return importlib.import_module("jax")
    except ImportError as exc:
        raise JaxMissing(f"{JAX_HINT} ({exc})", name="jax") from exc


class JaxBatch:
    """One batch as ``jax.Array`` s (the fields and shapes of :class:`~sdk.Batch`).

    ``inputs`` float32 ``(B, T, C_in)``, ``targets`` float32 ``(B, T, C_out)``, ``mask``
    bool ``(B, T)``, ``target_valid`` bool ``(B, T)`` (the mask AND every target finite:
    the mask of a loss), ``has_channel`` bool ``(B, C)`` over :attr:`channels`,
    ``input_valid`` bool ``(B, T, C_in)`` or None; ``state`` (provenance) and
    ``batch_idx`` on the host. :meth:`arrays` is the dict a jitted step takes.
    """

    __slots__ = ("_state", "_state_factory", "batch_idx", "channels", "has_channel",
                 "input_valid", "inputs", "mask", "target_valid", "targets")

    def __init__(self, host: ArrayBatch, placed: dict[str, jax.Array]) -> None:
        self.inputs: jax.Array = placed["inputs"]
        self.targets: jax.Array = placed["targets"]
        self.mask: jax.Array = placed["mask"]
        self.target_valid: jax.Array = placed["target_valid"]
        self.has_channel: jax.Array = placed["has_channel"]
        self.input_valid: jax.Array | None = placed.get("input_valid")
        self.channels = host.channels
        self.batch_idx = host.batch_idx
        self._state, self._state_factory = host._state, host._state_factory

    @property
    def state(self) -> BatchState:
        """Provenance of the batch (host memory, decoded when first read)."""
        if self._state is None:
            assert self._state_factory is not None
            self._state = self._state_factory()
            self._state_factory = None
        return self._state

    @property
    def batch_size(self) -> int:
        """Lanes in this batch (B)."""
        return int(self.mask.shape[0])

    @property
    def seq_len(self) -> int:
        """Time steps per lane (T)."""
        return int(self.mask.shape[1])

    @property
    def tokens(self) -> int:
        """``B * T``."""
        return self.batch_size * self.seq_len

    def arrays(self) -> dict[str, jax.Array]:
        """``inputs``, ``targets``, ``mask``, ``target_valid``, ``has_channel`` (and
        ``input_valid`` when present): a pytree a jitted training step takes."""
        out = {"inputs": self.inputs, "targets": self.targets, "mask": self.mask,
               "target_valid": self.target_valid, "has_channel": self.has_channel}
        if self.input_valid is not None:
            out["input_valid"] = self.input_valid
        return out

    def __repr__(self) -> str:
        where = next(iter(self.mask.devices()))
        return (f"JaxBatch(idx={self.batch_idx}, inputs={tuple(self.inputs.shape)}, "
                f"targets={tuple(self.targets.shape)}, device={where})")


@dataclass(frozen=True, eq=False)
class JaxAlignedBatch:
    """An aligned plan's batch (SEMANTICS section 9): ``parts[p]`` a :class:`JaxBatch` per
    protocol, ``has_data[p]`` bool ``(B,)`` (False: the key has no window of ``p``)."""

    parts: dict[str, JaxBatch]
    has_data: dict[str, jax.Array]
    batch_idx: int

    @property
    def protocols(self) -> tuple[str, ...]:
        """The plan's protocols, in its protocol order."""
        return tuple(self.parts)

    def __getitem__(self, protocol: str) -> JaxBatch:
        return self.parts[protocol]

    def _each(self, name: str) -> dict[str, Any]:
        return {p: getattr(b, name) for p, b in self.parts.items()}

    @property
    def inputs(self) -> dict[str, jax.Array]:
        """float32 ``(B, T_p, C_in_p)`` per protocol."""
        return self._each("inputs")

    @property
    def targets(self) -> dict[str, jax.Array]:
        """float32 ``(B, T_p, C_out_p)`` per protocol."""
        return self._each("targets")

    @property
    def mask(self) -> dict[str, jax.Array]:
        """bool ``(B, T_p)`` per protocol."""
        return self._each("mask")

    @property
    def has_channel(self) -> dict[str, jax.Array]:
        """bool ``(B, C_p)`` per protocol."""
        return self._each("has_channel")

    @property
    def target_valid(self) -> dict[str, jax.Array]:
        """bool ``(B, T_p)`` per protocol."""
        return self._each("target_valid")

    @property
    def state(self) -> dict[str, BatchState]:
        """Provenance per protocol (host memory)."""
        return self._each("state")


Placed = JaxBatch | JaxAlignedBatch


def place_array(array: np.ndarray, target: Any) -> jax.Array:
    """``array`` on ``target`` (a ``jax.Device`` or a ``jax.sharding.Sharding``; module
    docstring): on a CPU device the numpy memory itself when it is 64-byte aligned."""
    jax = require_jax()
    if isinstance(target, jax.sharding.Sharding):
        try:
            if jax.process_count() > 1:
                return jax.make_array_from_process_local_data(target, array)
            return jax.device_put(array, target)
        except ValueError as exc:
            msg = (f"a batch array of shape {array.shape} does not fit the sharding "
                   f"{target} ({exc}): the batch size (a short last batch too) must divide "
                   "over its devices; set drop_incomplete_batches=True or change batch_size")
            raise InvalidConfig(msg) from exc
    if target.platform == "cpu" and array.flags.c_contiguous:
        try:  # in place when 64-byte aligned; XLA copies it once otherwise
            return jax.dlpack.from_dlpack(array, device=target)
        except BufferError:  # read-only memory: DLPack cannot say so, device_put can
            pass
    return jax.device_put(array, target)


def place(host: ArrayBatch | AlignedArrays, target: Any) -> Placed:
    """A numpy batch on ``target`` (a ``jax.Device`` or a ``jax.sharding.Sharding``)."""
    if isinstance(host, AlignedArrays):
        return JaxAlignedBatch(
            parts={p: JaxBatch(b, {k: place_array(a, target) for k, a in b.dense().items()})
                   for p, b in host.parts.items()},
            has_data={p: place_array(h, target) for p, h in host.has_data.items()},
            batch_idx=host.batch_idx)
    return JaxBatch(host, {k: place_array(a, target) for k, a in host.dense().items()})


@dataclass
class _Item:
    batch: Placed | None = None
    error: BaseException | None = None
    done: bool = False


class JaxLoader:
    """One rank's pass over a plan as :class:`JaxBatch` es (:class:`JaxAlignedBatch` es for
    an aligned plan), read ahead and placed in a background thread (module docstring).

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
        self.prefetch = plan.config.merged().read_ahead if prefetch is None else prefetch
        if self.prefetch < 1:
            msg = f"prefetch must be >= 1, got {self.prefetch}"
            raise InvalidConfig(msg)
        self.target = sharding if sharding is not None else (
            self._jax.local_devices()[0] if device is None else device)
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
