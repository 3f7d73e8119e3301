"""``AlignedBatch``: the batch of an aligned plan (SEMANTICS section 9), one part per protocol.

An aligned plan (``LoaderConfig(align_by="alignment_key", ...)``) batches B alignment
keys (by default one cell and cycle) with every protocol's window of each key side by
side. On the wire an aligned batch is one record batch per protocol sharing one
``batch_idx`` (``docs/wire.md``); :func:`group_parts` puts them back together. Each
part is an ordinary :class:`~sdk.Batch` of its protocol's shape; the dict views
(``inputs[p]``, ``mask[p]``, ``has_data[p]``, ...) are what a multi-protocol model reads::

    for batch in plan.loader():
        loss = batch.masked_mse({p: heads[p](batch.inputs[p]) for p in batch.protocols})
        if loss is None:  # no protocol has a valid target in this batch
            continue
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from windpipe.sdk._batch import Batch, BatchState
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.sdk._html import html_table, human_bytes
from windpipe.sdk._parts import grouped_parts
from windpipe.sdk._torch_import import PIN_MEMORY_NEEDS_CUDA, torch
from windpipe.sdk.losses import AlignedLosses
from windpipe.services.contract.wire import BatchMetadata

__all__ = ["AlignedBatch", "group_parts"]


@dataclass(frozen=True, eq=False)
class AlignedBatch(AlignedLosses):
    """B alignment keys, every protocol's window of each (SEMANTICS section 9).

    ``parts[p]`` is protocol ``p``'s :class:`~sdk.Batch` (``(B, T_p, C)`` tensors, its
    own channels and provenance); lane b is the same key in every part.
    ``has_data[p]`` bool ``(B,)`` is False where that key has no window of ``p``: the
    lane is padding there (inputs -2.0, targets NaN, mask False, ``has_channel`` False).
    ``masked_mse(pred)`` / ``masked_mae(pred)`` take ``{protocol: prediction}`` and sum
    each protocol's loss over its ``target_valid`` (``windpipe.sdk.losses``). Treat it as immutable.
    """

    parts: dict[str, Batch]
    has_data: dict[str, torch.Tensor]
    batch_idx: int

    @property
    def protocols(self) -> tuple[str, ...]:
        """The plan's protocols, in its protocol order."""
        return tuple(self.parts)

    def __getitem__(self, protocol: str) -> Batch:
        return self.parts[protocol]

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        """float32 ``(B, T_p, C_in_p)`` per protocol."""
        return {p: b.inputs for p, b in self.parts.items()}

    @property
    def targets(self) -> dict[str, torch.Tensor]:
        """float32 ``(B, T_p, C_out_p)`` per protocol (the rows one ahead)."""
        return {p: b.targets for p, b in self.parts.items()}

    @property
    def mask(self) -> dict[str, torch.Tensor]:
        """bool ``(B, T_p)`` per protocol: the target row is a real source row."""
        return {p: b.mask for p, b in self.parts.items()}

    @property
    def has_channel(self) -> dict[str, torch.Tensor]:
        """bool ``(B, C_p)`` per protocol (SEMANTICS 5a; all False without data)."""
        return {p: b.has_channel for p, b in self.parts.items()}

    @property
    def target_valid(self) -> dict[str, torch.Tensor]:
        """bool ``(B, T_p)`` per protocol: the mask AND every target finite."""
        return {p: b.target_valid for p, b in self.parts.items()}

    @property
    def input_valid(self) -> dict[str, torch.Tensor] | None:
        """bool ``(B, T_p, C_in_p)`` per protocol: the input is a real value (SEMANTICS
        5b); None when the pass was not asked for it."""
        parts = {p: b.input_valid for p, b in self.parts.items()}
        if any(v is None for v in parts.values()):
            return None
        return {p: v for p, v in parts.items() if v is not None}

    @property
    def state(self) -> dict[str, BatchState]:
        """Provenance per protocol (stays on the CPU); a key without data of ``p`` has
        ``manifest_row_ids`` -1, an empty path and group key, its alignment key set."""
        return {p: b.state for p, b in self.parts.items()}

    @property
    def alignment_keys(self) -> tuple[tuple[Any, ...], ...]:
        """The batch's keys, lane by lane (the same in every part)."""
        return next(iter(self.parts.values())).state.alignment_keys

    @property
    def all_valid(self) -> bool:
        """Every part's mask and targets valid (False as soon as one key lacks data)."""
        return all(b.all_valid for b in self.parts.values())

    @property
    def batch_size(self) -> int:
        """Keys (lanes) in this batch."""
        return next(iter(self.parts.values())).batch_size

    @property
    def tokens(self) -> int:
        """Time steps of every lane of every part."""
        return sum(b.tokens for b in self.parts.values())

    @property
    def nbytes(self) -> int:
        """Bytes of the parts' tensors."""
        return sum(b.nbytes for b in self.parts.values())

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return next(iter(self.parts.values())).device

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by a flat name (``"cycling/inputs"``, ``"cycling/has_data"``): what
        the device loader pins and copies."""
        out: dict[str, torch.Tensor] = {}
        for p, b in self.parts.items():
            out.update({f"{p}/{name}": t for name, t in b.tensors().items()})
            out[f"{p}/has_data"] = self.has_data[p]
        return out

    def replace_tensors(self, tensors: Mapping[str, torch.Tensor]) -> AlignedBatch:
        """The same batch over ``tensors`` (named as :meth:`tensors` names them)."""
        parts = {}
        for p, b in self.parts.items():
            prefix = f"{p}/"
            mine = {k[len(prefix):]: t for k, t in tensors.items() if k.startswith(prefix)}
            mine.pop("has_data", None)
            parts[p] = b.replace_tensors(mine)
        has = {p: tensors.get(f"{p}/has_data", self.has_data[p]) for p in self.parts}
        return AlignedBatch(parts=parts, has_data=has, batch_idx=self.batch_idx)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> AlignedBatch:
        return self.replace_tensors({k: fn(t) for k, t in self.tensors().items()})

    def pin_memory(self) -> AlignedBatch:
        """A copy in page-locked memory (needs CUDA; provenance stays as is)."""
        if not torch.cuda.is_available():
            raise InvalidConfig(PIN_MEMORY_NEEDS_CUDA)
        return self._map(lambda t: t.pin_memory())

    def to(self, device: str | torch.device, *, non_blocking: bool = False) -> AlignedBatch:
        """The tensors on ``device``; provenance stays on the CPU."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def _rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("keys", self.batch_size)]
        for p, b in self.parts.items():
            rows.append((p, f"{tuple(b.inputs.shape)} -> {tuple(b.targets.shape)}, "
                            f"data for {int(self.has_data[p].sum())} of {self.batch_size}"))
        rows += [("device", str(self.device)), ("bytes", human_bytes(self.nbytes))]
        return rows

    def _repr_html_(self) -> str:
        return html_table(f"AlignedBatch {self.batch_idx}", self._rows())

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{p}={tuple(b.inputs.shape)} data={int(self.has_data[p].sum())}/{self.batch_size}"
            for p, b in self.parts.items())
        return f"AlignedBatch(idx={self.batch_idx}, {parts}, device={self.device})"


def group_parts(records: Iterable[tuple[Any, BatchMetadata]],
                to_batch: Callable[[Any, BatchMetadata], Batch]) -> Iterator[Batch | AlignedBatch]:
    """The pass's batches: each record as a :class:`~sdk.Batch`, except that the parts of
    an aligned batch (``meta.aligned``) come out as one :class:`AlignedBatch`."""
    return grouped_parts(
        records, part=to_batch, has_data=torch.from_numpy,
        whole=lambda parts, has, idx: AlignedBatch(parts=parts, has_data=has, batch_idx=idx))
