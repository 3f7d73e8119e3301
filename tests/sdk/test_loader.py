"""DeviceLoader on the CPU: same batches as its source, bounded read-ahead, errors, stats."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from tests.sdk.wire_toys import toy_record
from windpipe.sdk import Batch, DeviceLoader, InvalidConfig, batch_from_arrow, resolve_device


def _batches(n: int) -> list[Batch]:
    return [batch_from_arrow(*toy_record(0, g, g)) for g in range(n)]


def test_auto_without_cuda_yields_the_same_cpu_batches():
    source = _batches(9)
    loader = DeviceLoader(lambda: iter(source), device="auto", read_ahead=2)
    got = list(loader)
    want_device = "cuda" if torch.cuda.is_available() else "cpu"
    assert [b.state.batch_idx for b in got] == list(range(9))
    for a, b in zip(got, source, strict=True):
        assert a.device.type == want_device
        torch.testing.assert_close(a.inputs.cpu(), b.inputs)
        assert torch.equal(a.mask.cpu(), b.mask)
    stats = loader.stats
    assert stats is not None
    assert stats.batches == 9
    assert stats.tokens == 9 * 2 * 4
    assert stats.wall_s > 0
    assert stats.tokens_per_s > 0
    assert stats.verdict.split(":")[0] in {"input-bound", "consumer-bound"}
    assert "verdict" in str(stats)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_explicit_cuda_without_cuda_is_an_error(device):
    with pytest.raises(InvalidConfig, match="CUDA is not available"):
        DeviceLoader(lambda: iter(()), device=device)
    with pytest.raises(InvalidConfig, match="pin_memory needs CUDA: page-locked memory"):
        DeviceLoader(lambda: iter(()), device="cpu", pin_memory=True)


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InvalidConfig, match=r"not supported|unknown device"):
        resolve_device("tpu")


def test_read_ahead_is_bounded():
    produced = []

    def source():
        for b in _batches(30):
            produced.append(b.state.batch_idx)
            yield b

    loader = DeviceLoader(source, device="cpu", read_ahead=3)
    it = iter(loader)
    next(it)
    time.sleep(0.3)
    # one yielded + 3 queued + at most one held by the reader waiting to put
    assert len(produced) <= 1 + 3 + 1
    rest = list(it)
    assert len(rest) == 29


def test_consumer_and_server_time_are_told_apart():
    def slow_source():
        for b in _batches(5):
            time.sleep(0.03)
            yield b

    loader = DeviceLoader(slow_source, device="cpu", read_ahead=2)
    assert sum(1 for _ in loader) == 5
    assert loader.stats is not None
    assert loader.stats.input_bound
    assert loader.stats.verdict.startswith("input-bound")

    fast = DeviceLoader(lambda: iter(_batches(5)), device="cpu", read_ahead=4)
    for _ in fast:
        time.sleep(0.03)
    assert fast.stats is not None
    assert not fast.stats.input_bound
    assert fast.stats.consumer_s >= 0.1


def test_errors_reach_the_consumer_and_early_break_stops_the_reader():
    def broken():
        yield from _batches(2)
        raise RuntimeError("stream broke at batch 2")

    with pytest.raises(RuntimeError, match="batch 2"):
        list(DeviceLoader(broken, device="cpu"))

    closed = threading.Event()

    def endless():
        try:
            g = 0
            while True:
                yield batch_from_arrow(*toy_record(0, g, g))
                g += 1
        finally:
            closed.set()

    for i, _ in enumerate(DeviceLoader(endless, device="cpu", read_ahead=2)):
        if i == 3:
            break
    assert closed.wait(5)


def test_batches_are_not_copied_on_cpu():
    source = _batches(3)
    got = list(DeviceLoader(lambda: iter(source), device="cpu"))
    assert [b.inputs.data_ptr() for b in got] == [b.inputs.data_ptr() for b in source]
    assert np.all(got[2].inputs.numpy() == 2.0)
