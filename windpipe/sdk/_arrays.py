"""A plan's batches as numpy arrays: the framework-neutral form every non-torch feed reads.

A :class:`~sdk._sources.BatchSource` yields records: a streamed Arrow record batch, or a
batch built in this process (:class:`~services.materialize.builder.BuiltBatch`, the
same-host path). :func:`array_batches` turns one rank's pass of them into
:class:`ArrayBatch` es (an aligned plan's parts put together as :class:`AlignedArrays`),
exactly as ``windpipe.sdk._sources.to_batch`` and ``windpipe.sdk._aligned.group_parts`` make torch
batches, but with numpy only: nothing here imports torch, so a JAX (or any other) feed
runs where torch is not installed.

No copy is made: the arrays are views on the record batch's buffers, or the arrays the
builder made. A builder writes full-window batches into the :class:`BatchMemory` it is
given; :class:`AlignedMemory` gives it mask and ``has_channel`` arrays whose data starts
on a 64-byte boundary, which is what XLA needs to use host memory in place (a CPU
``jax.Array`` over the numpy buffer, no copy; ``windpipe.sdk._jax``). XLA takes no strided views, so
:meth:`ArrayBatch.dense` copies ``inputs`` and ``targets`` (views of one window block)
once into aligned arrays of their own (a few channels: one channel at a time, the fast
way for numpy), and computes ``target_valid`` into another: on the host, in the feed's
read-ahead thread, not as device calls compiled per shape (a shuffled plan's batches
come in several shapes).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from windpipe.sdk._batch_state import BatchState, batch_state, list_values
from windpipe.sdk._parts import grouped_parts
from windpipe.services.arrow_values import to_numpy
from windpipe.services.contract.wire import INPUT_VALID_COLUMN, BatchMetadata
from windpipe.services.materialize.builder import BuiltBatch

__all__ = ["ALIGNMENT", "INLINE_COPY_BYTES", "AlignedArrays", "AlignedMemory", "ArrayBatch",
           "aligned_empty", "array_batch", "array_batches", "batch_fields"]

ALIGNMENT = 64  # bytes: XLA's CPU client aliases host memory only from such an address


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new uninitialized array whose data starts on an :data:`ALIGNMENT` boundary."""
    dt = np.dtype(dtype)
    n = math.prod(shape) * dt.itemsize  # not np.prod: this is on every batch's path
    raw = np.empty(n + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + n].view(dt).reshape(shape)


class AlignedMemory:
    """A :class:`~services.materialize.batch_memory.BatchMemory` whose mask and
    ``has_channel`` arrays are fresh and 64-byte aligned, so that a device runtime takes
    them without a copy; each batch's own (no two batches share memory, docs/types.md).

    The window block is gathered as the builder does by default (a fancy index: numpy's
    memory, not aligned): ``inputs`` and ``targets`` are views of it, which
    :meth:`ArrayBatch.dense` copies out anyway. (``np.take(..., out=)`` would write it
    aligned, but it first copies its input whole when that is not contiguous, and a
    block's window views overlap: gigabytes per batch.)

    A batch some of whose lanes end early comes in new arrays from the window path
    (``short_lanes``), as without this memory, not from the general builder (about
    twice the cost per batch); its mask is then new numpy memory, not aligned: XLA
    copies it in the call, or :meth:`ArrayBatch.dense` first when it is large."""

    short_lanes = True

    def gather(self, windows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``windows[rows]``: one contiguous copy per window."""
        out: np.ndarray = windows[rows]
        return out

    def empty(self, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        """A new aligned array of ``shape`` and ``dtype``."""
        return aligned_empty(shape, dtype)


@dataclass(eq=False, slots=True)
class ArrayBatch:
    """One batch as numpy arrays (the fields and shapes of :class:`~sdk.Batch`).

    ``windows`` float32 ``(B, T + 1, C_in + C_out)`` is the window block ``inputs`` and
    ``targets`` are views of (None when they arrived as two arrays); ``mask`` bool
    ``(B, T)``; ``has_channel`` bool ``(B, C)`` over ``channels``; ``input_valid`` bool
    ``(B, T, C_in)`` or None. ``state`` (provenance) is decoded when first read. The
    arrays share memory with what they were read into: treat them as read-only.
    """

    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray
    has_channel: np.ndarray
    channels: tuple[str, ...]
    batch_idx: int
    windows: np.ndarray | None = None
    input_valid: np.ndarray | None = None
    _state_factory: Callable[[], BatchState] | None = field(default=None, repr=False)
    _state: BatchState | None = field(default=None, repr=False)

    @property
    def state(self) -> BatchState:
        """Provenance of the batch (host memory)."""
        if self._state is None:
            assert self._state_factory is not None
            self._state = self._state_factory()
            self._state_factory = None
        return self._state

    @property
    def target_valid(self) -> np.ndarray:
        """bool ``(B, T)``: the mask AND every target channel finite (a loss's mask)."""
        return self.mask & _finite_steps(self.targets)

    @property
    def c_in(self) -> int:
        """Input channels (``C_in``)."""
        return int(self.inputs.shape[2])

    def dense(self) -> dict[str, np.ndarray]:
        """``inputs``, ``targets``, ``mask``, ``target_valid``, ``has_channel`` (and
        ``input_valid`` when present) as C-contiguous arrays, what a runtime that takes no
        strided views (XLA) is given: ``inputs`` and ``targets``, views of the window
        block, copied once into new 64-byte-aligned arrays, ``target_valid`` computed
        into one; the others as they are (no copy), except a ``mask`` or ``input_valid``
        of :data:`INLINE_COPY_BYTES` or more that does not start on an :data:`ALIGNMENT`
        boundary (a batch whose lanes end early, a streamed batch), which is copied into
        aligned memory too (:func:`_realigned`)."""
        inputs, targets, valid, mask_out, valid_out = _aligned_set(
            (_strided(self.inputs), _strided(self.targets), (self.mask.shape, np.bool_),
             _realigned(self.mask), _realigned(self.input_valid)))
        inputs, targets = _dense_lanes(((self.inputs, inputs), (self.targets, targets)),
                                       windows=self.windows)
        mask = _copied(self.mask, mask_out)
        input_valid = (None if self.input_valid is None
                       else _copied(self.input_valid, valid_out))
        assert valid is not None
        if targets.shape[-1] == 1:  # the common case: no temporary
            np.isfinite(targets[..., 0], out=valid)
            np.logical_and(valid, mask, out=valid)
        else:
            np.logical_and(mask, _finite_steps(targets), out=valid)
        out = {"inputs": inputs, "targets": targets, "mask": mask,
               "target_valid": valid, "has_channel": self.has_channel}
        if input_valid is not None:
            out["input_valid"] = input_valid
        return out


# XLA's CPU client copies a host buffer it cannot alias (not 64-byte aligned) in the call
# below this size, and from it on through its transfer thread: ~30 us more at 100 KiB to
# 128 KiB (a 256 x 512 mask), where numpy's copy into aligned memory and the aliasing
# placement cost ~10 us less (measured with jax 0.10 on the CPU)
INLINE_COPY_BYTES = 100 << 10


def _copied(array: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``array`` copied into ``out``; ``array`` itself when there is no ``out``."""
    if out is None:
        return array
    np.copyto(out, array)
    return out


def _realigned(array: np.ndarray | None) -> tuple[tuple[int, ...], Any] | None:
    """``(shape, dtype)`` of the aligned copy :meth:`ArrayBatch.dense` makes of ``array``
    (at least :data:`INLINE_COPY_BYTES`, and not aligned or not C-contiguous); None when
    it is given as it is."""
    if array is None or array.nbytes < INLINE_COPY_BYTES:
        return None
    if array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0:
        return None
    return array.shape, array.dtype


_PER_CHANNEL = 4  # up to this many channels a view is copied one channel at a time


def _finite_steps(targets: np.ndarray) -> np.ndarray:
    """bool ``(B, T)``: every target channel of the step finite (one channel: no reduction,
    the same values)."""
    if targets.shape[-1] == 1:
        return np.isfinite(targets[..., 0])
    return np.isfinite(targets).all(axis=-1)


def _strided(array: np.ndarray) -> tuple[tuple[int, ...], Any] | None:
    """``(shape, dtype)`` of the dense copy ``array`` needs; None when it is dense already."""
    return None if array.flags.c_contiguous else (array.shape, array.dtype)


def _aligned_set(specs: tuple[tuple[tuple[int, ...], Any] | None, ...],
                 ) -> list[np.ndarray | None]:
    """New uninitialized arrays of the ``(shape, dtype)`` s (None: none), each starting on
    an :data:`ALIGNMENT` boundary, carved from one allocation (one per batch, not three:
    an allocation costs microseconds, a batch's numpy work tens of them), each followed by
    at least :data:`_SLACK` bytes of its allocation that no other array holds (what a
    copy by wider items writes past the end, :func:`_copy_steps`). A batch's own: no
    array here is handed out twice."""
    sizes = [0 if s is None else math.prod(s[0]) * np.dtype(s[1]).itemsize for s in specs]
    starts, total = [], 0
    for n in sizes:
        starts.append(total)
        total += -(-(n + _SLACK) // ALIGNMENT) * ALIGNMENT
    raw = np.empty(total + ALIGNMENT, dtype=np.uint8)
    base = (-raw.ctypes.data) % ALIGNMENT
    return [None if spec is None else
            raw[base + at:base + at + n].view(spec[1]).reshape(spec[0])
            for spec, at, n in zip(specs, starts, sizes, strict=True)]


# a lane group's window rows (inputs and targets read from them) stay in a core's cache
# from the first copy of them to the last: 256 x 512 batches, 4 channels, a third less
# copy time than whole-batch copies, which read the 2 MiB block once per channel
_LANE_GROUP_BYTES = 512 << 10


def _dense_lanes(parts: tuple[tuple[np.ndarray, np.ndarray | None], ...], *,
                 windows: np.ndarray | None) -> list[np.ndarray]:
    """Each ``(view, out)`` of the window block ``windows`` (None: not known): ``view``
    copied into ``out``, a group of lanes at a time (:data:`_LANE_GROUP_BYTES` of the
    block each), or ``view`` itself where ``out`` is None (it is dense already)."""
    todo = [(view, out, *_step_items(view, windows)) for view, out in parts
            if out is not None]
    if todo:
        lanes, stride = todo[0][0].shape[0], abs(todo[0][0].strides[0]) or 1
        step = max(1, _LANE_GROUP_BYTES // stride)
        for lo in range(0, lanes, step):
            for view, out, item, wider in todo:
                _copy_steps(view[lo:lo + step], out[lo:lo + step], item=item, wider=wider)
    return [view if out is None else out for view, out in parts]


def _step_items(view: np.ndarray, windows: np.ndarray | None,
                ) -> tuple[np.dtype[Any] | None, np.dtype[Any] | None]:
    """How :func:`_copy_steps` moves ``view``'s steps, decided once for all its lane
    groups: ``(item, wider)``, :func:`_step_item` and else :func:`_wider_item` (within
    the room :func:`_room` finds in ``windows``)."""
    item = _step_item(view)
    return item, None if item is not None else _wider_item(view, _room(view, windows))


def _room(view: np.ndarray, windows: np.ndarray | None) -> int:
    """Bytes from each step's first value of ``view`` (a view of the C-contiguous window
    block ``windows``) to the end of its row (the most a copy may read from there); 0
    when not known, or when ``view`` has fewer than :data:`_WIDER_MIN_STEPS` steps (then
    copying by wider items does not pay)."""
    if windows is None or view.ndim != 3 or view.shape[0] * view.shape[1] < _WIDER_MIN_STEPS:
        return 0
    if windows.ndim != 3 or not windows.flags.c_contiguous:
        return 0
    row = int(windows.strides[1])
    if view.strides[1] != row:
        return 0
    return row - (view.ctypes.data - windows.ctypes.data) % row


def _copy_steps(array: np.ndarray, out: np.ndarray, *, item: np.dtype[Any] | None,
                wider: np.dtype[Any] | None) -> None:
    """``array`` copied into the C-contiguous ``out`` (``item``, ``wider``:
    :func:`_step_items`).

    A window block's ``inputs`` / ``targets`` view has a short contiguous run per step
    (``C_in`` of ``C_in + C_out`` values), which numpy copies value by value. A step's run
    is copied as one item instead (:func:`_step_item`) where numpy has a one-move copy for
    its width, or where the run is wide. A run of another width (three float32s: 12
    bytes) is copied as the next wider one-move item where its row has room for it
    (:func:`_wider_item`): each item carries a few bytes past the run, which the next
    step's item writes over, and the last writes into the slack after ``out``
    (:func:`_aligned_set`); 2-3x faster than channel by channel, each channel one long
    strided run, which is what is left."""
    if item is not None:
        np.copyto(out.view(item)[..., 0], array.view(item)[..., 0])
    elif wider is not None:
        np.copyto(_items(out, wider), _items(array, wider))
    elif array.ndim == 3 and 1 < array.shape[2] <= _PER_CHANNEL:
        for c in range(array.shape[2]):
            np.copyto(out[:, :, c], array[:, :, c])
    else:
        np.copyto(out, array)


_ONE_MOVE: dict[int, np.dtype[Any]] = {
    2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64),
    16: np.dtype((np.void, 16))}


def _run_bytes(array: np.ndarray) -> int | None:
    """Bytes of one step's channels of a 3-d ``array`` when they are contiguous (a run),
    else None."""
    if array.ndim != 3 or array.strides[2] != array.itemsize:
        return None
    return int(array.shape[2] * array.itemsize)


def _step_item(array: np.ndarray) -> np.dtype[Any] | None:
    """The dtype that holds one step's channels of a 3-d ``array`` as one item (its bit
    patterns copied as they are, NaN payloads included), or None where copying so does
    not pay: numpy moves 2, 4, 8 and 16 bytes at once and other widths by ``memcpy``
    per item, which beats per-channel copies only past :data:`_PER_CHANNEL` channels."""
    width = _run_bytes(array)
    if width is None or array.shape[2] < 2:
        return None
    if width in _ONE_MOVE:
        return _ONE_MOVE[width]
    return np.dtype((np.void, width)) if array.shape[2] > _PER_CHANNEL else None


_SLACK = 16  # bytes after each array of _aligned_set: the widest item less the narrowest run
# the wider items' views cost ~5 us a batch: at 64x256 (16,384 steps) that is what they
# save, at 256x512 a tenth of it (copy 312 -> 239 us)
_WIDER_MIN_STEPS = 32_768


def _wider_item(array: np.ndarray, room: int) -> np.dtype[Any] | None:
    """The narrowest one-move dtype wider than a step's run of the 3-d ``array`` that its
    row has ``room`` for, else None (also for a run that is one move wide itself:
    :func:`_step_item`; :func:`_copy_steps`)."""
    width = _run_bytes(array)
    if width is None or width in _ONE_MOVE:
        return None  # not a run, or moved as it is (_step_item)
    wider = [n for n in _ONE_MOVE if width < n <= min(room, width + _SLACK)]
    return _ONE_MOVE[min(wider)] if wider else None


def _root(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` views (itself when it owns its memory)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _items(array: np.ndarray, item: np.dtype[Any]) -> np.ndarray:
    """``array`` (3-d) as ``(B, T)`` items of ``item`` starting at each step's first value,
    one step apart: wider than a step's run, so each reaches into the next one's bytes
    (the root's buffer bounds every item: numpy refuses a view past it)."""
    root = _root(array)
    return np.ndarray(array.shape[:2], dtype=item, buffer=root,
                      offset=array.ctypes.data - root.ctypes.data, strides=array.strides[:2])


@dataclass(frozen=True, eq=False)
class AlignedArrays:
    """An aligned plan's batch (SEMANTICS section 9) as numpy: one :class:`ArrayBatch` per
    protocol, and ``has_data[p]`` bool ``(B,)``, False where a key has no window of ``p``."""

    parts: dict[str, ArrayBatch]
    has_data: dict[str, np.ndarray]
    batch_idx: int


def _values(column: pa.Array, shape: tuple[int, ...], what: str) -> np.ndarray:
    values = list_values(column)
    expected = int(np.prod(shape, dtype=np.int64))
    if len(values) != expected:
        msg = f"{what}: the record batch holds {len(values)} values, its metadata says {shape}"
        raise ValueError(msg)
    if expected == 0:
        return np.empty(shape, dtype=np.uint8 if pa.types.is_uint8(values.type) else
                        np.float32)
    return to_numpy(values).reshape(shape)


def _from_arrow(batch: pa.RecordBatch, meta: BatchMetadata) -> ArrayBatch:
    lanes, t, c_in = batch.num_rows, meta.seq_len, meta.c_in
    windows = None
    if batch.schema.names[0] == "windows":  # wire v2: inputs and targets views of one body
        windows = _values(batch.column(0), (lanes, t + 1, c_in + meta.c_out), "windows")
        inputs, targets = windows[:, :-1, :c_in], windows[:, 1:, c_in:]
    else:
        inputs = _values(batch.column("inputs"), (lanes, t, c_in), "inputs")
        targets = _values(batch.column("targets"), (lanes, t, meta.c_out), "targets")
    valid = None
    if INPUT_VALID_COLUMN in batch.schema.names:
        valid = _values(batch.column(INPUT_VALID_COLUMN), (lanes, t, c_in),
                        INPUT_VALID_COLUMN).view(np.bool_)
    return ArrayBatch(
        inputs=inputs, targets=targets,
        mask=_values(batch.column("mask"), (lanes, t), "mask").view(np.bool_),
        has_channel=_values(batch.column("has_channel"), (lanes, len(meta.channels)),
                            "has_channel").view(np.bool_),
        channels=meta.channels, batch_idx=meta.batch_idx, windows=windows, input_valid=valid,
        _state_factory=functools.partial(batch_state, batch, meta),
    )


def _state_of(provenance: Callable[[], pa.RecordBatch], meta: BatchMetadata) -> BatchState:
    return batch_state(provenance(), meta)


def array_batch(record: pa.RecordBatch | BuiltBatch, meta: BatchMetadata) -> ArrayBatch:
    """A streamed record batch, or a batch built in this process, as an :class:`ArrayBatch`
    (the same values, byte for byte, as ``windpipe.sdk._sources.to_batch`` gives as tensors)."""
    if not isinstance(record, BuiltBatch):
        return _from_arrow(record, meta)
    windows, c_in = record.windows, meta.c_in
    return ArrayBatch(
        inputs=windows[:, :-1, :c_in], targets=windows[:, 1:, c_in:],
        mask=record.mask.view(np.bool_), has_channel=record.has_channel.view(np.bool_),
        channels=meta.channels, batch_idx=meta.batch_idx, windows=windows,
        input_valid=None if record.input_valid is None else record.input_valid.view(np.bool_),
        _state_factory=functools.partial(_state_of, record.provenance, meta),
    )


def array_batches(records: Iterable[tuple[Any, BatchMetadata]],
                  ) -> Iterator[ArrayBatch | AlignedArrays]:
    """A pass's records as batches: each an :class:`ArrayBatch`, except that the parts of an
    aligned batch (``meta.aligned``) come out together as one :class:`AlignedArrays`."""
    return grouped_parts(
        records, part=array_batch, has_data=lambda has: has,
        whole=lambda parts, has, idx: AlignedArrays(parts=parts, has_data=has, batch_idx=idx))


def _fields(batch: ArrayBatch) -> dict[str, Any]:
    out: dict[str, Any] = {
        "inputs": batch.inputs, "targets": batch.targets, "mask": batch.mask,
        "target_valid": batch.target_valid, "has_channel": batch.has_channel,
    }
    if batch.input_valid is not None:
        out["input_valid"] = batch.input_valid
    return out


def batch_fields(batch: ArrayBatch | AlignedArrays) -> dict[str, Any]:
    """A batch as one dict of its ``Batch`` fields (a ``tf.data`` element): ``inputs``,
    ``targets``, ``mask``, ``target_valid``, ``has_channel`` (``input_valid`` when
    asked for) and ``batch_idx`` int64; an aligned batch's fields each a dict by protocol
    (the plan's protocol order), plus ``has_data`` by protocol."""
    if isinstance(batch, ArrayBatch):
        return {**_fields(batch), "batch_idx": np.int64(batch.batch_idx)}
    parts = {p: _fields(part) for p, part in batch.parts.items()}
    names = next(iter(parts.values())).keys()
    out: dict[str, Any] = {name: {p: part[name] for p, part in parts.items()}
                           for name in names}
    out["has_data"] = batch.has_data
    out["batch_idx"] = np.int64(batch.batch_idx)
    return out
