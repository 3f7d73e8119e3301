"""Many epochs in one training process: memory stays flat, and every epoch is complete.

"Memory grows every epoch" is one of the most common data-loader complaints. Here
the catalog, a Flight server and the consumer share one process, so tracemalloc
sees the Python objects and numpy buffers of all three; a loop that kept one
epoch's batches alive anywhere (client, pipeline, cache bookkeeping) grows by
~95 KiB per epoch on this plan, while the bounded caches settle after the
first few epochs.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from tests.flight_server.helpers import cache_stats
from tests.sdk.deployment import deployment
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig

CONFIG = LoaderConfig(
    split="train", strategy="shuffled", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
)
WARM_EPOCHS = 4
MEASURED_EPOCHS = 8
GROWTH_BUDGET = 96 * 1024  # bytes over MEASURED_EPOCHS; keeping each epoch alive cost ~95 KiB


def _where(batch: Any) -> tuple[Any, ...]:
    """Pass position, global batch and what the lanes read."""
    state = batch.state
    return (state.batch_idx, state.global_batch, state.manifest_row_ids, state.window_offsets)


def test_memory_is_flat_across_epochs(tmp_path: Path, synth_dataset: Any) -> None:
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state") as dep:
        cat = Catalog(dep.url)
        try:
            ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                               manifest="manifest.parquet")
            plan = ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(CONFIG)
            epoch0_batches = plan.report()["batches"]
            dataset = plan.torch_dataset()
            orders: list[int] = []  # a digest per epoch: the test must not hold its batches

            def one_epoch(epoch: int) -> None:
                dataset.set_epoch(epoch)
                seen = [_where(b) for b in torch.utils.data.DataLoader(dataset, batch_size=None)]
                assert [_where(b) for b in plan.loader(device="cpu", epoch=epoch)] == seen
                # one rank of one: the whole epoch, each global batch once, in pass order
                assert [w[0] for w in seen] == list(range(len(seen)))
                assert [w[1] for w in seen] == list(range(len(seen)))
                if epoch == 0:
                    assert len(seen) == epoch0_batches
                orders.append(hash(tuple(w[2:] for w in seen)))

            tracemalloc.start()
            try:
                for epoch in range(WARM_EPOCHS):
                    one_epoch(epoch)
                gc.collect()
                heap_before, _ = tracemalloc.get_traced_memory()
                arrow_before = pa.total_allocated_bytes()
                cache_before = cache_stats(dep.locations[0])
                for epoch in range(WARM_EPOCHS, WARM_EPOCHS + MEASURED_EPOCHS):
                    one_epoch(epoch)
                gc.collect()
                heap_after, _ = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            arrow_after = pa.total_allocated_bytes()
            cache_after = cache_stats(dep.locations[0])
        finally:
            cat.close()

    growth = heap_after - heap_before
    assert growth < GROWTH_BUDGET, (
        f"the Python heap grew {growth} bytes over {MEASURED_EPOCHS} epochs")
    assert arrow_after - arrow_before < GROWTH_BUDGET
    # the data fits the cache: the same chunks stay resident, nothing is pinned
    for key in ("resident_bytes", "entries", "bytes_read"):
        assert cache_after[key] == cache_before[key], key
    assert cache_after["pinned_bytes"] == 0
    assert cache_after["loads_in_flight"] == 0
    # shuffled: each epoch reads its windows in its own order
    assert len(set(orders)) == len(orders)
