"""Masked losses that cannot turn NaN: select the valid positions first, then subtract.

A batch's targets are NaN where a real row has a null target and in padding, so the
obvious ``((pred - batch.targets) ** 2)[valid].mean()`` computes NaN first and keeps it
out of the value only: its gradient is still NaN, and ``.mean()`` of an empty
selection (a batch whose lanes are all padding, an aligned key without HPPC data) is
NaN too. These index with ``target_valid`` *before* any arithmetic, and answer
``None`` when nothing is valid (skip that step)::

    loss = batch.masked_mse(model(batch.inputs))      # Batch: pred (B, T, C_out)
    if loss is not None:
        loss.backward()

    loss = batch.masked_mse({p: heads[p](batch.inputs[p]) for p in batch.protocols})
                                                      # AlignedBatch: the sum over
                                                      # protocols of each one's mean

``Batch`` and ``AlignedBatch`` have them as methods (``batch.masked_mse(pred)``,
``batch.masked_mae(pred)``); :func:`masked_mse` and :func:`masked_mae` here take the
batch as an argument. ``reduction="sum"`` gives the sum of the errors (a validation
loop divides the total by ``int(batch.target_valid.sum())`` summed over its batches).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from windpipe.sdk._aligned import AlignedBatch
    from windpipe.sdk._batch import Batch

__all__ = ["AlignedLosses", "BatchLosses", "Reduction", "masked_error", "masked_mae",
           "masked_mse"]

Reduction = Literal["mean", "sum"]


def masked_error(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, *,
                 power: Literal[1, 2] = 2, reduction: Reduction = "mean",
                 ) -> torch.Tensor | None:
    """``|pred - target| ** power`` over the ``(B, T)`` positions where ``valid`` is True,
    reduced by ``reduction``; ``None`` when no position is valid. ``pred`` and
    ``target`` are ``(B, T, C)`` (or ``(B, T)``); both are indexed before the subtraction,
    so a NaN target outside ``valid`` never reaches the value or the gradient."""
    if tuple(pred.shape) != tuple(target.shape):
        msg = (f"pred has shape {tuple(pred.shape)}, the targets {tuple(target.shape)}: "
               "the model must predict every target channel of every time step")
        raise ValueError(msg)
    if reduction not in ("mean", "sum"):
        msg = f"reduction must be 'mean' or 'sum', got {reduction!r}"
        raise ValueError(msg)
    if not bool(valid.any()):
        return None
    diff = pred[valid] - target[valid]
    err = diff.square() if power == 2 else diff.abs()
    return err.mean() if reduction == "mean" else err.sum()


class _Masked(Protocol):
    @property
    def targets(self) -> torch.Tensor: ...

    @property
    def target_valid(self) -> torch.Tensor: ...


class BatchLosses:
    """``masked_mse`` and ``masked_mae`` of a :class:`~sdk.Batch`."""

    __slots__ = ()

    def masked_mse(self: _Masked, pred: torch.Tensor, *, reduction: Reduction = "mean",
                   ) -> torch.Tensor | None:
        """Squared error of ``pred`` ``(B, T, C_out)`` against the targets where
        ``target_valid`` (mean, or ``reduction="sum"``); ``None`` when nothing is valid."""
        return masked_error(pred, self.targets, self.target_valid, power=2,
                            reduction=reduction)

    def masked_mae(self: _Masked, pred: torch.Tensor, *, reduction: Reduction = "mean",
                   ) -> torch.Tensor | None:
        """Absolute error of ``pred`` against the targets where ``target_valid``;
        ``None`` when nothing is valid."""
        return masked_error(pred, self.targets, self.target_valid, power=1,
                            reduction=reduction)


class _Parts(Protocol):
    @property
    def parts(self) -> Mapping[str, _Masked]: ...


def _over_parts(batch: _Parts, pred: Mapping[str, torch.Tensor], *, power: Literal[1, 2],
                reduction: Reduction) -> torch.Tensor | None:
    unknown = sorted(set(pred) - set(batch.parts))
    if unknown:
        msg = f"pred names protocols {unknown} this batch does not have: {sorted(batch.parts)}"
        raise KeyError(msg)
    total: torch.Tensor | None = None
    for p, out in pred.items():
        part = batch.parts[p]
        err = masked_error(out, part.targets, part.target_valid, power=power,
                           reduction=reduction)
        if err is not None:
            total = err if total is None else total + err
    return total


class AlignedLosses:
    """``masked_mse`` and ``masked_mae`` of an :class:`~sdk.AlignedBatch`: ``pred`` maps
    protocols to their predictions; the sum over them of each protocol's error (a
    protocol without a valid target in this batch adds nothing; ``None`` when none has)."""

    __slots__ = ()

    def masked_mse(self: _Parts, pred: Mapping[str, torch.Tensor], *,
                   reduction: Reduction = "mean") -> torch.Tensor | None:
        """The sum over ``pred``'s protocols of each one's masked squared error."""
        return _over_parts(self, pred, power=2, reduction=reduction)

    def masked_mae(self: _Parts, pred: Mapping[str, torch.Tensor], *,
                   reduction: Reduction = "mean") -> torch.Tensor | None:
        """The sum over ``pred``'s protocols of each one's masked absolute error."""
        return _over_parts(self, pred, power=1, reduction=reduction)


def masked_mse(pred: torch.Tensor | Mapping[str, torch.Tensor], batch: Batch | AlignedBatch,
               *, reduction: Reduction = "mean") -> torch.Tensor | None:
    """``batch.masked_mse(pred)``: a :class:`~sdk.Batch` takes a tensor, an
    :class:`~sdk.AlignedBatch` a mapping of protocols to tensors."""
    return batch.masked_mse(pred, reduction=reduction)  # type: ignore[arg-type]


def masked_mae(pred: torch.Tensor | Mapping[str, torch.Tensor], batch: Batch | AlignedBatch,
               *, reduction: Reduction = "mean") -> torch.Tensor | None:
    """``batch.masked_mae(pred)`` (see :func:`masked_mse`)."""
    return batch.masked_mae(pred, reduction=reduction)  # type: ignore[arg-type]
