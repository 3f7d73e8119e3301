"""Batch rebuilt from a hand-built wire record batch (windpipe/services/contract/wire.py),
without copies."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from tests.sdk.wire_toys import make_record
from windpipe.sdk import Batch, BatchSegmentRef, InvalidConfig, batch_from_arrow
from windpipe.sdk._batch import batch_from_arrays
from windpipe.services.contract.configs import DatasetProtocolId
from windpipe.services.contract.wire import BatchMetadata, batch_arrays


def _arrays(b=3, t=5, c_in=2, c_out=1, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, t, c_in)).astype(np.float32)
    y = rng.normal(size=(b, t, c_out)).astype(np.float32)
    m = np.ones((b, t), np.uint8)
    return x, y, m


def test_tensors_equal_the_wire_and_share_its_memory():
    x, y, m = _arrays()
    record, meta = make_record(x, y, m, batch_idx=4, global_batch=9)
    batch = batch_from_arrow(record, meta.encode())
    assert batch.inputs.dtype == torch.float32
    assert batch.mask.dtype == torch.bool
    assert tuple(batch.inputs.shape) == (3, 5, 2)
    assert tuple(batch.targets.shape) == (3, 5, 1)
    np.testing.assert_array_equal(batch.inputs.numpy(), x)
    np.testing.assert_array_equal(batch.targets.numpy(), y)
    assert batch.mask.all()
    assert batch.all_valid
    # zero copy: the tensors are views of the Arrow values buffer of the window block
    values = record.column("windows").values
    assert batch.inputs.data_ptr() == values.buffers()[1].address + values.offset * 4
    assert batch.targets.data_ptr() == batch.inputs.data_ptr() + (2 + 1 + 2) * 4  # row 1, col 2
    assert batch.tensors().keys() == {"windows", "mask", "has_channel"}
    ref = batch_arrays(record, meta)
    np.testing.assert_array_equal(ref.inputs, batch.inputs.numpy())
    np.testing.assert_array_equal(ref.targets, batch.targets.numpy())


def test_a_v1_record_batch_gives_the_same_batch():
    x, y, m = _arrays()
    v1, meta = make_record(x, y, m, wire=1)
    v2, _ = make_record(x, y, m)
    a, b = batch_from_arrow(v1, meta), batch_from_arrow(v2, meta)
    for name in ("inputs", "targets", "mask", "has_channel"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert a.inputs.is_contiguous()
    assert not b.inputs.is_contiguous()
    assert a.tensors().keys() == {"inputs", "targets", "mask", "has_channel"}
    values = v1.column("inputs").values
    assert a.inputs.data_ptr() == values.buffers()[1].address + values.offset * 4


def test_sliced_record_batches_are_honoured():
    x, y, m = _arrays(b=4)
    record, meta = make_record(x, y, m)
    batch = batch_from_arrow(record.slice(1, 2), meta)
    np.testing.assert_array_equal(batch.inputs.numpy(), x[1:3])
    assert batch.state.manifest_row_ids == (101, 102)


def test_all_valid_false_on_mask_or_nan():
    x, y, m = _arrays()
    m[1, 4] = 0
    batch = batch_from_arrow(*make_record(x, y, m))
    assert not batch.all_valid
    assert batch.mask[1].tolist() == [True, True, True, True, False]
    x, y, m = _arrays()
    y[0, 0, 0] = np.nan
    assert not batch_from_arrow(*make_record(x, y, m)).all_valid


def test_state_carries_provenance():
    x, y, m = _arrays(b=2, t=3)
    record, meta = make_record(
        x, y, m, batch_idx=7, global_batch=15, split="val", protocols=["cycling", "hppc"],
        stateful=(3, 1, 4),
    )
    state = batch_from_arrow(record, meta).state
    assert (state.split, state.batch_idx, state.global_batch) == ("val", 7, 15)
    assert state.protocols == ("cycling", "hppc")
    assert state.group_keys == (("s", "c0", 1, "cycling"), ("s", "c1", 1, "hppc"))
    assert state.alignment_keys[1] == ("s", "c1", 1)
    assert state.window_offsets == (0, 3)
    assert state.manifest_paths == ("seg/0.parquet", "seg/1.parquet")
    assert (state.stateful_group_idx, state.stateful_step_idx, state.stateful_steps) == (3, 1, 4)
    assert state.segments_of(1) == (BatchSegmentRef(1, "seg/1.parquet", 3, 4, 0, 4),)
    assert state.input_columns == ("in0", "in1")


def test_is_protocol_to_and_repr():
    x, y, m = _arrays()
    batch = batch_from_arrow(*make_record(x, y, m, protocols=["cycling", "cycling", "eis"]))
    assert batch.is_protocol("eis")
    assert batch.is_protocol(DatasetProtocolId.CYCLING)
    assert not batch.is_protocol(DatasetProtocolId.HPPC)
    moved = batch.to("cpu", non_blocking=True)
    assert isinstance(moved, Batch)
    assert moved.state is batch.state
    assert batch.tokens == 15
    assert batch.nbytes == 3 * 5 * 2 * 4 + 3 * 5 * 4 + 3 * 5
    assert "inputs=(3, 5, 2)" in repr(batch)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_pin_memory_needs_cuda():
    x, y, m = _arrays()
    batch = batch_from_arrow(*make_record(x, y, m))
    with pytest.raises(InvalidConfig, match="pin_memory needs CUDA: page-locked memory"):
        batch.pin_memory()  # ours, not torch's raw RuntimeError


def test_metadata_mismatch_is_refused():
    x, y, m = _arrays()
    record, meta = make_record(x, y, m)
    bad = type(meta)(**{**{f: getattr(meta, f) for f in meta.__dataclass_fields__}, "c_in": 3})
    with pytest.raises(ValueError, match="windows"):
        batch_from_arrow(record, bad)
    v1, _ = make_record(x, y, m, wire=1)
    with pytest.raises(ValueError, match="inputs"):
        batch_from_arrow(v1, bad)


def test_provenance_is_decoded_once_and_only_when_read():
    x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    y = np.ones((2, 3, 1), dtype=np.float32)
    m = np.ones((2, 3), dtype=bool)
    record, meta = make_record(x, y, m, batch_idx=7)
    batch = batch_from_arrow(record, meta.encode())
    assert batch._state is None  # nothing decoded yet
    assert batch.batch_idx == 7
    state = batch.state
    assert batch.state is state  # decoded once
    assert state.batch_idx == batch.batch_idx
    moved = batch.to("cpu")
    assert moved.state is state
    assert moved.all_valid is batch.all_valid is True


def test_the_fast_constructor_sets_every_slot_init_does() -> None:
    """``batch_from_arrays`` makes a ``Batch`` without ``__init__`` (the same-host path's
    per-batch cost): a slot added to ``Batch`` later must be set there too."""
    x, y, m = _arrays(b=2, t=3, c_in=1, c_out=1)
    meta = BatchMetadata(batch_idx=4, global_batch=4, split="train", seq_len=3, c_in=1,
                         c_out=1, input_columns=("a",), target_columns=("b",),
                         channels=("a", "b"))
    windows = np.zeros((2, 4, 2), np.float32)
    windows[:, :3, :1] = x
    windows[:, 1:, 1:] = y
    fast = batch_from_arrays(windows, m.astype(np.uint8), lambda: pa.record_batch([]), meta,
                             has_channel=np.ones((2, 2), np.uint8))
    assert [hasattr(fast, name) for name in Batch.__slots__] == [True] * len(Batch.__slots__)
    assert fast.batch_idx == 4
    assert fast.channels == ("a", "b")
    assert fast.mask.dtype == fast.has_channel.dtype == torch.bool
    assert fast.all_valid
    assert np.shares_memory(fast.inputs.numpy(), windows)
    assert np.shares_memory(fast.targets.numpy(), windows)
    np.testing.assert_array_equal(fast.inputs.numpy(), x)
    np.testing.assert_array_equal(fast.targets.numpy(), y)
