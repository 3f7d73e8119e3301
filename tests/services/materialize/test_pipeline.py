"""The pipeline's read-ahead: in a ``block_shuffled`` pass the next shuffle block's chunks
are asked for from the start of the current block, and the batches do not change."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tests.flight_server.helpers import StreamSpec, write_dataset
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.storage.store import Storage

SHUFFLE_BLOCK = 24 << 10


def _plan(tmp_path: Path) -> PlanContext:
    ds = write_dataset(tmp_path / "ds", [StreamSpec("cycling", f"c{i}", 1, (1024,))
                                         for i in range(6)], chunk_rows=128, seed=2)
    config = LoaderConfig(
        inputs={"cycling": ("current_a", "voltage_v")}, targets={"cycling": ("voltage_v",)},
        default_window=WindowConfig(batch_size=4, seq_len=16), strategy="block_shuffled",
        shuffle_block_bytes=SHUFFLE_BLOCK, seed=3)
    return ds.plan(config, plan_id="blocks")


def _builder(plan: PlanContext, cache: ChunkCache) -> BatchBuilder:
    return BatchBuilder(plan, Storage.from_uri(plan.root_uri), cache,
                        batch_schema(plan_id="blocks", version_id="v-test"), blocks="cached")


def test_the_next_blocks_chunks_are_asked_for_at_the_start_of_a_block(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    assert schedule.batch_block is not None
    block = schedule.batch_block[batches]
    starts = np.flatnonzero(block[1:] != block[:-1]) + 1
    assert starts.shape[0] >= 2  # several blocks, each of several batches
    assert int(np.diff(np.concatenate([[0], starts])).min()) >= 3
    cache = ChunkCache(64 << 20, readahead_workers=1, readahead_bytes=64 << 20)
    builder = _builder(plan, cache)
    first_of_next = builder.lane_plans(schedule, batches[starts[0]:starts[0] + 1])[0]
    wanted = {r.key for r in builder.read_ahead_requests(first_of_next)}
    items = iter(BatchPipeline(builder, schedule, batches, start=0, end=int(batches.shape[0]),
                               readahead_batches=1))
    next(items)  # batch 0: the read-ahead of batch 1 and of the next block's first batch
    while cache.stats().loads_in_flight:  # until the read-ahead landed (pytest-timeout)
        time.sleep(0.01)
    assert wanted <= set(cache.keys())  # asked for a block early, not one batch ahead
    rest = list(items)
    # the same batches as a pass without any read-ahead
    plain = list(BatchPipeline(_builder(plan, ChunkCache(64 << 20)), schedule, batches,
                               start=0, end=int(batches.shape[0]), readahead_batches=0))
    assert len(rest) + 1 == len(plain)
    for (i, got), (j, want) in zip(rest, plain[1:], strict=True):
        assert i == j
        np.testing.assert_array_equal(got.inputs, want.inputs)
        np.testing.assert_array_equal(got.targets, want.targets)

