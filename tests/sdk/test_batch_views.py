"""``Batch.contiguous()``: the escape from strided tensor views (docs/types.md)."""

from __future__ import annotations

import torch

from windpipe.sdk import Batch, BatchState


def _no_state() -> BatchState:
    raise AssertionError("provenance is not read here")


def _batch(inputs: torch.Tensor, targets: torch.Tensor) -> Batch:
    b, t = inputs.shape[:2]
    return Batch(inputs=inputs, targets=targets, mask=torch.ones((b, t), dtype=torch.bool),
                 channels=("a", "b", "y"), batch_idx=3, state_factory=_no_state)


def test_strided_views_become_contiguous_copies_with_the_same_values() -> None:
    window = torch.arange(2 * 6 * 3, dtype=torch.float32).view(2, 6, 3)  # T+1 rows, C = 3
    batch = _batch(window[:, :-1, :2], window[:, 1:, 2:])  # one copy, shifted views
    assert not batch.inputs.is_contiguous()
    assert not batch.targets.is_contiguous()
    flat = batch.contiguous()
    assert flat.inputs.is_contiguous()
    assert flat.targets.is_contiguous()
    assert torch.equal(flat.inputs, batch.inputs)
    assert torch.equal(flat.targets, batch.targets)
    assert flat.inputs.data_ptr() != window.data_ptr()
    assert flat.batch_idx == 3
    assert flat.channels == batch.channels


def test_contiguous_tensors_are_kept_as_they_are() -> None:
    batch = _batch(torch.zeros(2, 5, 2), torch.zeros(2, 5, 1))
    flat = batch.contiguous()
    assert flat.inputs is batch.inputs
    assert flat.targets is batch.targets
    assert flat.mask is batch.mask
    assert flat.has_channel is batch.has_channel
