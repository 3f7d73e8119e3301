"""``Batch``, ``BatchState`` and ``BatchSegmentRef`` (docs/types.md), rebuilt from the wire.

A batch arriving over Flight is one Arrow record batch (one row per lane, see
``windpipe/services/contract/wire.py``). :func:`batch_from_arrow` turns it into torch tensors
WITHOUT
copying on the CPU: ``inputs``/``targets``/``mask`` are DLPack views on the Arrow
value buffers, reshaped to ``(B, T, C)``; the mask's uint8 values are viewed as bool.
Such tensors share memory with the record batch (which they keep alive); treat them
as read-only, or ``.clone()`` before writing in place. A batch built in this process
(the same-host path) skips Arrow: :func:`batch_from_arrays` wraps the built arrays
the same way, with the same provenance columns, so both paths give the same batch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from windpipe.sdk._batch_state import BatchSegmentRef, BatchState, batch_state, list_values
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.sdk._html import html_table, human_bytes
from windpipe.sdk._plots import plot_batch
from windpipe.sdk._torch_import import PIN_MEMORY_NEEDS_CUDA, torch
from windpipe.sdk.losses import BatchLosses
from windpipe.services.contract.configs import DatasetProtocolId, ScalingSpec
from windpipe.services.contract.wire import INPUT_VALID_COLUMN, BatchMetadata

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Batch", "BatchSegmentRef", "BatchState", "batch_from_arrays", "batch_from_arrow"]


class Batch(BatchLosses):
    """One training batch: tensors in model space plus its provenance.

    ``inputs`` float32 ``(B, T, C_in)``; ``targets`` float32 ``(B, T, C_out)`` (the rows
    one ahead); ``mask`` bool ``(B, T)``, True where the target row is a real source
    row; ``has_channel`` bool ``(B, C)`` over :attr:`channels` (the inputs, then the
    targets that are not inputs): False where the lane's stream lacks that column, so
    its values are absent, not merely null (SEMANTICS 5); ``target_valid`` bool
    ``(B, T)``: the mask AND every target channel finite (the mask of a loss: a real row
    whose target is null is NaN, not padding); ``all_valid``: every ``target_valid``
    entry True; ``state``: the :class:`BatchState`. ``masked_mse(pred)`` /
    ``masked_mae(pred)`` are the loss over ``target_valid`` (``windpipe.sdk.losses``).
    ``input_valid`` bool ``(B, T, C_in)`` when the pass was asked for it
    (``input_valid=True``), else None: True where the input is a real value of the
    data, False where it is the ``-2.0`` fill (null, NaN, infinite, an absent channel,
    padding; SEMANTICS 5b), so a model can tell a missing value from a real ``-2.0``.

    A batch from the wire computes ``state`` and ``all_valid`` when first read
    (decoding provenance costs about as much as receiving the batch, and a training
    step often needs neither); ``batch_idx`` is always at hand. Treat a batch as
    immutable.
    """

    __slots__ = ("_all_valid", "_state", "_state_factory", "_windows", "batch_idx",
                 "channels", "has_channel", "input_valid", "inputs", "mask", "targets")

    def __init__(
        self, *, inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
        has_channel: torch.Tensor | None = None, channels: tuple[str, ...] = (),
        all_valid: bool | None = None, state: BatchState | None = None,
        state_factory: Callable[[], BatchState] | None = None, batch_idx: int | None = None,
        input_valid: torch.Tensor | None = None,
    ) -> None:
        if state is None and (state_factory is None or batch_idx is None):
            msg = "a Batch needs its state (or a state_factory and its batch_idx)"
            raise TypeError(msg)
        self.inputs = inputs
        self.targets = targets
        self.mask = mask
        if has_channel is None:  # a batch made by hand: every channel present
            n_channels = len(channels) or inputs.shape[2] + targets.shape[2]
            has_channel = torch.ones((inputs.shape[0], n_channels), dtype=torch.bool,
                                     device=inputs.device)
        self.has_channel = has_channel
        self.input_valid: torch.Tensor | None = input_valid
        self.channels = channels
        self._all_valid = all_valid
        self._state = state
        self._state_factory = state_factory
        self._windows: torch.Tensor | None = None  # the window block inputs/targets view
        self.batch_idx: int = state.batch_idx if state is not None else int(batch_idx or 0)

    @property
    def all_valid(self) -> bool:
        """Every mask entry True and every target finite."""
        if self._all_valid is None:
            self._all_valid = _all_valid(self.mask, self.targets)
        return self._all_valid

    @property
    def target_valid(self) -> torch.Tensor:
        """bool ``(B, T)``: the mask AND every target channel finite, on the batch's device.

        The mask of a loss: ``mask`` alone stays True where the source row is real but
        its target is null (NaN), and one NaN makes the whole masked loss NaN::

            valid = batch.target_valid
            loss = ((pred - batch.targets) ** 2)[valid].mean()
        """
        finite = torch.isfinite(self.targets)
        finite = finite.all(dim=-1) if finite.dim() == 3 else finite
        return self.mask & finite

    @property
    def state(self) -> BatchState:
        """Provenance of the batch (stays on the CPU)."""
        if self._state is None:
            assert self._state_factory is not None
            self._state = self._state_factory()
            self._state_factory = None
        return self._state

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (DataLoader workers, ``torch.save``) with its provenance resolved: the
        lazy factory may hold the builder of the process that made the batch."""
        state = self.state
        return {"inputs": self.inputs, "targets": self.targets, "mask": self.mask,
                "has_channel": self.has_channel, "channels": self.channels,
                "_all_valid": self._all_valid, "_state": state, "batch_idx": self.batch_idx,
                "_windows": self._windows, "input_valid": self.input_valid}

    def __setstate__(self, values: dict[str, Any]) -> None:
        self._windows = None
        self.input_valid = None
        for name, value in values.items():
            setattr(self, name, value)
        self._state_factory = None

    def with_tensors(self, *, inputs: torch.Tensor, targets: torch.Tensor,
              mask: torch.Tensor, has_channel: torch.Tensor | None = None,
              input_valid: torch.Tensor | None = None) -> Batch:
        """The same batch over other tensors (same values, another place); a tensor
        left None keeps the batch's."""
        return Batch(
            inputs=inputs, targets=targets, mask=mask,
            has_channel=self.has_channel if has_channel is None else has_channel,
            channels=self.channels, all_valid=self._all_valid,
            state=self._state, state_factory=self._state_factory, batch_idx=self.batch_idx,
            input_valid=self.input_valid if input_valid is None else input_valid,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensors that hold the batch's values, by name: what a device loader pins and
        copies. A batch over a window block (docs/types.md) names ``windows`` (``(B, T + 1,
        C_in + C_out)``, of which ``inputs`` and ``targets`` are views), ``mask`` and
        ``has_channel``, so a copy moves the block once; any other batch ``inputs``,
        ``targets``, ``mask`` and ``has_channel``. Then ``input_valid``, when the batch
        has it."""
        out = ({"windows": self._windows, "mask": self.mask, "has_channel": self.has_channel}
               if self._windows is not None else
               {"inputs": self.inputs, "targets": self.targets, "mask": self.mask,
                "has_channel": self.has_channel})
        if self.input_valid is not None:
            out["input_valid"] = self.input_valid
        return out

    def replace_tensors(self, tensors: Mapping[str, torch.Tensor]) -> Batch:
        """The same batch over ``tensors`` (named as :meth:`tensors` names them; a name
        left out keeps its tensor). A ``windows`` block gives ``inputs`` and ``targets``
        as its views."""
        windows = tensors.get("windows")
        if windows is None:
            return self.with_tensors(
                inputs=tensors.get("inputs", self.inputs),
                targets=tensors.get("targets", self.targets),
                mask=tensors.get("mask", self.mask),
                has_channel=tensors.get("has_channel", self.has_channel),
                input_valid=tensors.get("input_valid"),
            )
        t, c_in = self.inputs.shape[1], self.inputs.shape[2]
        out = self.with_tensors(
            inputs=windows[:, :t, :c_in], targets=windows[:, 1:, c_in:],
            mask=tensors.get("mask", self.mask),
            has_channel=tensors.get("has_channel", self.has_channel),
            input_valid=tensors.get("input_valid"),
        )
        out._windows = windows
        return out

    @property
    def batch_size(self) -> int:
        """Lanes in this batch (B; a stream's last window can have fewer)."""
        return int(self.inputs.shape[0])

    @property
    def seq_len(self) -> int:
        """Time steps per lane (T)."""
        return int(self.inputs.shape[1])

    @property
    def tokens(self) -> int:
        """``B * T``: one token is one time step of one lane."""
        return self.batch_size * self.seq_len

    @property
    def nbytes(self) -> int:
        """Bytes of the three tensors (and of ``input_valid``, when the batch has it)."""
        tensors = (self.inputs, self.targets, self.mask) if self.input_valid is None else (
            self.inputs, self.targets, self.mask, self.input_valid)
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return self.inputs.device

    def input_has_channel(self) -> torch.Tensor:
        """bool ``(B, C_in)``: ``has_channel`` of each input channel (the first ``C_in``)."""
        return self.has_channel[:, : self.inputs.shape[2]]

    def target_has_channel(self, target_columns: tuple[str, ...] | None = None) -> torch.Tensor:
        """bool ``(B, C_out)``: ``has_channel`` of each target channel (a per-channel loss
        mask is ``mask[:, :, None] & target_has_channel()[:, None, :]``)."""
        columns = self.state.target_columns if target_columns is None else target_columns
        where = {c: i for i, c in enumerate(self.channels)}
        return self.has_channel[:, [where[c] for c in columns]]

    def is_protocol(self, protocol: str | DatasetProtocolId) -> bool:
        """True when any lane belongs to ``protocol``."""
        name = protocol.value if isinstance(protocol, DatasetProtocolId) else str(protocol)
        return name in self.state.protocols

    def contiguous(self) -> Batch:
        """The same batch over contiguous tensors: a copy of each tensor that is a strided
        view, the others as they are (docs/types.md says which may be views).

        For a library that needs contiguous memory; to write into a batch, ``.clone()``
        its tensors instead (they may share memory with what they were read into).
        """
        return self.with_tensors(inputs=self.inputs.contiguous(),
                                 targets=self.targets.contiguous(),
                                 mask=self.mask.contiguous(),
                                 has_channel=self.has_channel.contiguous(),
                                 input_valid=None if self.input_valid is None
                                 else self.input_valid.contiguous())

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory (needs CUDA; the state stays as is): the window
        block copied once when the batch has one."""
        if not torch.cuda.is_available():
            raise InvalidConfig(PIN_MEMORY_NEEDS_CUDA)
        return self.replace_tensors({k: t.pin_memory() for k, t in self.tensors().items()})

    def to(self, device: str | torch.device, *, non_blocking: bool = False) -> Batch:
        """The tensors on ``device``; ``state`` stays on the CPU. A batch over a window
        block moves it in one copy, ``inputs`` and ``targets`` views of it there."""
        return self.replace_tensors({k: t.to(device, non_blocking=non_blocking)
                                     for k, t in self.tensors().items()})

    def plot(self, *, lane: int = 0, scaling: tuple[ScalingSpec, ...] = ()) -> Figure:
        """Lane ``lane``'s inputs and targets in model space; padding, null inputs and
        null targets marked; ``scaling`` (``plan.config.scaling``) names each channel's
        map in the legend (``windpipe.sdk._plots``; needs ``windpipe[plot]``)."""
        return plot_batch(self, lane=lane, scaling=scaling)

    def _rows(self) -> list[tuple[str, Any]]:
        state = self.state
        valid = self.target_valid
        padded = sum(1 for o in state.window_offsets if o < 0)
        rows: list[tuple[str, Any]] = [
            ("split", state.split),
            ("inputs", f"{tuple(self.inputs.shape)} {', '.join(state.input_columns)}"),
            ("targets", f"{tuple(self.targets.shape)} {', '.join(state.target_columns)}"),
            ("protocols", sorted(set(state.protocols))),
            ("padded lanes", padded),
            ("mask True", f"{int(self.mask.sum())} of {self.mask.numel()}"),
            ("target_valid True", f"{int(valid.sum())} of {valid.numel()}"),
            *([] if self.input_valid is None else [(
                "input_valid True",
                f"{int(self.input_valid.sum())} of {self.input_valid.numel()}")]),
            ("device", str(self.device)),
            ("bytes", human_bytes(self.nbytes)),
        ]
        if state.stateful_steps is not None:
            rows.append(("stateful", f"group {state.stateful_group_idx}, step "
                                     f"{state.stateful_step_idx} of {state.stateful_steps}"))
        return rows

    def _repr_html_(self) -> str:
        return html_table(f"Batch {self.batch_idx}", self._rows())

    def __repr__(self) -> str:
        protos = ",".join(sorted(set(self.state.protocols)))
        stateful = ""
        if self.state.stateful_steps is not None:
            stateful = (
                f", group={self.state.stateful_group_idx} "
                f"step={self.state.stateful_step_idx}/{self.state.stateful_steps}"
            )
        return (
            f"Batch(idx={self.state.batch_idx}, split={self.state.split!r}, "
            f"inputs={tuple(self.inputs.shape)}, targets={tuple(self.targets.shape)}, "
            f"protocols={protos}, all_valid={self.all_valid}, device={self.device}{stateful})"
        )


_ZEROS: dict[int, np.ndarray] = {}
_ZEROS_KEPT = 16  # distinct target sizes kept (a plan has a few: B*T*C_out, a short last batch)


def _all_valid(mask: torch.Tensor, targets: torch.Tensor) -> bool:
    """Every mask entry True and every target finite, without a temporary per element.

    ``dot(targets, 0)`` is NaN exactly when some target is NaN or infinite and 0
    otherwise (it cannot overflow); numpy does both reductions several times faster
    than torch on the unaligned buffers Flight delivers.
    """
    if mask.device.type != "cpu" or targets.device.type != "cpu":
        return bool(mask.all()) and bool(torch.isfinite(targets).all())
    if mask.numel() and not int(mask.view(torch.uint8).numpy().min()):
        return False
    flat = targets.numpy().reshape(-1)
    zeros = _ZEROS.get(flat.shape[0])
    if zeros is None:
        if len(_ZEROS) >= _ZEROS_KEPT:
            _ZEROS.clear()
        zeros = _ZEROS.setdefault(flat.shape[0], np.zeros(flat.shape[0], dtype=np.float32))
    return math.isfinite(float(np.dot(flat, zeros)))


def _tensor(values: pa.Array, shape: tuple[int, ...], what: str) -> torch.Tensor:
    expected = 1
    for dim in shape:
        expected *= dim
    if len(values) != expected:
        msg = f"{what}: the record batch holds {len(values)} values, its metadata says {shape}"
        raise ValueError(msg)
    if expected == 0:
        dtype = torch.uint8 if pa.types.is_uint8(values.type) else torch.float32
        return torch.empty(shape, dtype=dtype)
    return torch.from_dlpack(values).view(shape)


def batch_from_arrow(batch: pa.RecordBatch, meta: BatchMetadata | bytes | Any) -> Batch:
    """Rebuild a :class:`Batch` from one wire record batch and its ``app_metadata``.

    No CPU copy: the tensors are views on the record batch's buffers.
    """
    info = meta if isinstance(meta, BatchMetadata) else BatchMetadata.decode(meta)
    lanes, t, c_in = batch.num_rows, info.seq_len, info.c_in
    windows = None
    if batch.schema.names[0] == "windows":  # wire v2: inputs and targets views of one body
        windows = _tensor(list_values(batch.column(0)), (lanes, t + 1, c_in + info.c_out),
                          "windows")
        stride = windows.stride()  # as_strided: a third of the cost of slicing twice
        inputs = windows.as_strided((lanes, t, c_in), stride)
        targets = windows.as_strided((lanes, t, info.c_out), stride,
                                     windows.storage_offset() + stride[1] + c_in)
    else:
        inputs = _tensor(list_values(batch.column("inputs")), (lanes, t, c_in), "inputs")
        targets = _tensor(list_values(batch.column("targets")), (lanes, t, info.c_out),
                          "targets")
    mask = _tensor(list_values(batch.column("mask")), (lanes, t), "mask").view(torch.bool)
    has = _tensor(list_values(batch.column("has_channel")), (lanes, len(info.channels)),
                  "has_channel").view(torch.bool)
    valid = None
    if INPUT_VALID_COLUMN in batch.schema.names:
        valid = _tensor(list_values(batch.column(INPUT_VALID_COLUMN)), (lanes, t, c_in),
                        INPUT_VALID_COLUMN).view(torch.bool)
    out = Batch(
        inputs=inputs, targets=targets, mask=mask, has_channel=has, channels=info.channels,
        batch_idx=info.batch_idx,
        state_factory=functools.partial(batch_state, batch, info), input_valid=valid,
    )
    out._windows = windows
    return out


def batch_from_arrays(windows: np.ndarray, mask: np.ndarray,
                      provenance: Callable[[], pa.RecordBatch], meta: BatchMetadata, *,
                      has_channel: np.ndarray, input_valid: np.ndarray | None = None) -> Batch:
    """A :class:`Batch` over arrays built in this process: the window block ``windows``
    float32 ``(B, T + 1, C_in + C_out)`` (``inputs`` and ``targets`` are its views,
    docs/types.md), ``mask`` uint8 ``(B, T)``, ``has_channel`` uint8 ``(B, C)``,
    ``input_valid`` uint8 ``(B, T, C_in)`` or None; ``provenance`` returns the wire's
    provenance columns, called when ``Batch.state`` is first read.

    No copy: the tensors share the arrays' memory (and keep them alive). The uint8
    arrays are viewed as bool on the numpy side (a numpy view costs a third of a torch
    one), the views are cut on the numpy side too, and the batch is made without
    :meth:`Batch.__init__`'s checks: this is the same-host path's per-batch work, a few
    microseconds in all.
    """
    batch = _new_batch(Batch)
    c_in = meta.c_in
    batch._windows = torch.from_numpy(windows)
    batch.inputs = torch.from_numpy(windows[:, :-1, :c_in])  # numpy slices: 1/3 of torch's
    batch.targets = torch.from_numpy(windows[:, 1:, c_in:])
    batch.mask = torch.from_numpy(mask.view(np.bool_))
    batch.has_channel = torch.from_numpy(has_channel.view(np.bool_))
    batch.input_valid = None if input_valid is None else torch.from_numpy(
        input_valid.view(np.bool_))
    batch.channels = meta.channels
    batch.batch_idx = meta.batch_idx
    batch._all_valid = None
    batch._state = None
    batch._state_factory = functools.partial(_state_of, provenance, meta)
    return batch


_new_batch = object.__new__


def _state_of(provenance: Callable[[], pa.RecordBatch], meta: BatchMetadata) -> BatchState:
    return batch_state(provenance(), meta)
