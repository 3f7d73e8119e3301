"""The GPU feed's one host copy, counted on the CPU: a same-host batch gathered straight into
the memory a device loader gives (``windpipe.sdk._pinned``), and moved as one window block.

CUDA is not needed to count copies: the memory is a plain uint8 tensor here (the loader's
is page-locked), every torch operation is seen by a dispatch mode, and numpy's
allocations by ``tracemalloc``. ``bench/gpu_check.py`` runs the same path on a GPU.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.sdk.deployment import deployment
from windpipe.sdk import Batch, Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.sdk._pinned import PinnedBatchMemory, batch_nbytes

CONFIG = LoaderConfig(
    default_window=WindowConfig(batch_size=8, seq_len=96, drop_incomplete=True),
    strategy="shuffled", seed=3,
    inputs={"cycling": ("current_a", "voltage_v", "temperature_c")},
    targets={"cycling": ("voltage_v",)},
)


class _Ops(TorchDispatchMode):
    """Every aten operation run under it: (name, output bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        size = out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0
        self.ops.append((str(func.overloadpacket.__name__), size))
        return out


@contextmanager
def _ops() -> Iterator[_Ops]:
    with _Ops() as mode:
        yield mode


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-pinned")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", n_flight=1,
                    tier_bytes=256 << 20) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        yield ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(CONFIG)
        cat.close()


def _inside(t: torch.Tensor, buf: torch.Tensor) -> bool:
    lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
    return lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= hi


def test_a_same_host_batch_is_one_copy_into_the_given_memory(plan: Any) -> None:
    want = list(plan.batches(epoch=1, transport="local"))
    buffers: list[torch.Tensor] = []

    def take(nbytes: int) -> torch.Tensor:
        buffers.append(torch.empty(nbytes, dtype=torch.uint8))
        return buffers[-1]

    memory = PinnedBatchMemory(take)
    source = plan._source(transport="local")
    args = {"epoch": 1, "rank": 0, "world_size": 1, "start_batch": 0}
    batches = source.batches(**args, memory=memory)
    counted = source.batches(**args, memory=PinnedBatchMemory(
        lambda n: torch.empty(n, dtype=torch.uint8)))  # the same pass, its torch ops counted
    plain = source.batches(**args)  # the same pass in new memory, for contrast
    gathered = peaks = 0
    for k, ref in enumerate(want):
        tracemalloc.start()
        batch = next(batches)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fresh = next(plain)
        _, fresh_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        with _ops() as seen:
            next(counted)
        buf = memory.taken()
        for name in ("inputs", "targets", "mask", "has_channel"):
            assert torch.equal(getattr(batch, name).nan_to_num(9.0),
                               getattr(ref, name).nan_to_num(9.0)), name
        assert batch.state == ref.state
        if buf is None:  # a batch of the general builder (a lane that ends early): pinned after
            continue
        gathered += 1
        windows = batch.tensors()["windows"]
        b, t1, c = windows.shape
        assert buf.numel() == batch_nbytes(b, t1 - 1, c)
        for t in (windows, batch.inputs, batch.targets, batch.mask, batch.has_channel):
            assert _inside(t, buf)  # every tensor is a view of the one buffer
        # the window block was written once, by one gather, and nothing else copied it
        copies = [(op, n) for op, n in seen.ops if op in {"index_select", "copy_", "clone",
                                                          "_to_copy", "contiguous"}]
        assert copies == [("index_select", windows.numel() * 4)]
        if k and b == 8:  # a full batch (the first also computes the pass's lane tables)
            assert peak < windows.numel() * 4 // 2  # no numpy temporary of the batch's size
            assert fresh_peak >= windows.numel() * 4  # where new memory holds the windows
            peaks += 1
        assert torch.equal(fresh.tensors()["windows"].nan_to_num(9.0), windows.nan_to_num(9.0))
    assert gathered >= len(want) // 2 > 0
    assert peaks > 0
    assert len(buffers) == gathered  # one buffer a gathered batch, none for the others


def test_a_window_block_moves_in_one_copy(plan: Any) -> None:
    batch: Batch = next(iter(plan.batches(epoch=0, transport="local")))
    assert set(batch.tensors()) == {"windows", "mask", "has_channel"}
    assert not batch.inputs.is_contiguous()  # a view of the window block (docs/types.md)
    windows = batch.tensors()["windows"]
    with _ops() as seen:
        moved = batch.to("meta")
    copies = [(op, n) for op, n in seen.ops if op == "_to_copy"]
    assert copies == [("_to_copy", windows.numel() * 4), ("_to_copy", batch.mask.numel()),
                      ("_to_copy", batch.has_channel.numel())]
    assert moved.inputs.device.type == "meta"
    assert moved.inputs._base is moved.tensors()["windows"]
    assert moved.targets._base is moved.tensors()["windows"]
    assert moved.inputs.shape == batch.inputs.shape
    assert moved.targets.shape == batch.targets.shape
    flat = batch.contiguous()
    assert flat.inputs.is_contiguous()
    assert flat.targets.is_contiguous()
    assert torch.equal(flat.inputs, batch.inputs)
    np.testing.assert_array_equal(flat.targets.numpy(), batch.targets.numpy())
