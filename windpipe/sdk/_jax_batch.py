"""JAX batches and their placement: :class:`JaxBatch` / :class:`JaxAlignedBatch` (the
arrays on a device, provenance on the host) and :func:`place`, which puts a numpy batch
(``windpipe.sdk._arrays``) on a device or a sharding (see ``windpipe.sdk._jax`` for what
is copied and what is shared). jax is imported on first use (:func:`require_jax`)."""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from windpipe.sdk._arrays import AlignedArrays, ArrayBatch
from windpipe.sdk._batch_state import BatchState
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.services.contract.extras import install_hint

if TYPE_CHECKING:
    import jax

__all__ = ["JAX_HINT", "JaxAlignedBatch", "JaxBatch", "JaxMissing", "Placed", "on_cpu",
           "place", "place_array", "require_jax"]

JAX_HINT = ("windpipe's JAX batches need jax: install your jax build (pip install jax, "
            f"or jax[cuda12] for NVIDIA GPUs), or {install_hint('jax')}")


class JaxMissing(ModuleNotFoundError):  # noqa: N818 - an ImportError, named as one
    """jax cannot be imported, and what was asked for needs it."""


def require_jax() -> ModuleType:
    """The jax module, or :class:`JaxMissing` saying how to install it."""
    module = sys.modules.get("jax")  # imported: a dict lookup, not an import per batch
    if module is not None:
        return module
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


_DIRECT_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.bool_, np.uint8))


@functools.cache
def _direct_put(device: Any) -> Callable[[np.ndarray], jax.Array] | None:
    """The runtime call under ``jax.device_put(array, device)`` for a numpy array, bound
    to ``device``; None where this jax does not have it (then ``jax.device_put``).

    ``jax.device_put`` spends ~0.1 ms of Python per array (pytree, sharding and dtype
    checks): a batch's five arrays cost more than its own numpy work. This call is the
    same placement (the same host-buffer semantics: on the CPU the aligned numpy memory
    itself, else one copy) in ~6 us. It is jax's internal API, hence the guard; only
    dtypes that need no canonicalization (float32, bool, uint8) take it."""
    try:
        from jax._src.core import ShapedArray  # noqa: PLC0415
        from jax._src.lib import xla_client  # noqa: PLC0415
    except ImportError:
        return None
    put = getattr(xla_client, "batched_device_put", None)
    if put is None:
        return None
    sharding = require_jax().sharding.SingleDeviceSharding(device)
    devices = [device]
    aval = functools.lru_cache(maxsize=64)(ShapedArray)  # a plan has few batch shapes

    def direct(array: np.ndarray) -> jax.Array:
        placed: jax.Array = put(aval(array.shape, array.dtype), sharding, [array], devices,
                                committed=True)
        return placed

    return direct


def _placer(target: Any) -> Callable[[np.ndarray], jax.Array]:
    """:func:`place_array` bound to ``target``, resolved once for a batch's arrays."""
    jx = require_jax()
    direct = None if isinstance(target, jx.sharding.Sharding) else _direct_put(target)
    if direct is None:
        return functools.partial(place_array, target=target)

    def put(array: np.ndarray) -> jax.Array:
        if array.dtype in _DIRECT_DTYPES:
            return direct(array)
        placed: jax.Array = jx.device_put(array, target)
        return placed

    return put


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
    direct = _direct_put(target) if array.dtype in _DIRECT_DTYPES else None
    if direct is not None:
        return direct(array)
    return jax.device_put(array, target)


def place(host: ArrayBatch | AlignedArrays, target: Any) -> Placed:
    """A numpy batch on ``target`` (a ``jax.Device`` or a ``jax.sharding.Sharding``)."""
    put = _placer(target)
    if isinstance(host, AlignedArrays):
        return JaxAlignedBatch(
            parts={p: JaxBatch(b, {k: put(a) for k, a in b.dense().items()})
                   for p, b in host.parts.items()},
            has_data={p: put(h) for p, h in host.has_data.items()},
            batch_idx=host.batch_idx)
    return JaxBatch(host, {k: put(a) for k, a in host.dense().items()})


def on_cpu(target: Any) -> bool:
    """Whether ``target`` (a device or a sharding) places on CPU devices only."""
    devices = getattr(target, "device_set", None) or {target}
    return all(getattr(d, "platform", None) == "cpu" for d in devices)
