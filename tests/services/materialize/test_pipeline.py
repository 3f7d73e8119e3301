"""The pipeline's read-ahead: in a ``block_shuffled`` pass the next shuffle block (its
sub-block, or on the chunk path its chunks) is asked for from the start of the current
block, and the batches do not change."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tests.flight_server.helpers import StreamSpec, write_dataset
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize.blocks import block_key
from windpipe.services.materialize.builder import BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.read_paths.sub_blocks import _Staging
from windpipe.services.materialize.sub_blocks import sub_blocks
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.schedule import Schedule
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


def _builder(plan: PlanContext, cache: ChunkCache, *, sub_blocks: bool = True) -> BatchBuilder:
    return BatchBuilder(plan, Storage.from_uri(plan.root_uri), cache,
                        batch_schema(plan_id="blocks", version_id="v-test"), blocks="cached",
                        sub_blocks=sub_blocks)


def _pass(builder: BatchBuilder, schedule: Schedule, batches: np.ndarray, *,
          readahead: int) -> list[tuple[int, BuiltBatch]]:
    return list(BatchPipeline(builder, schedule, batches, start=0, end=int(batches.shape[0]),
                              readahead_batches=readahead))


def _assert_same(got: list[tuple[int, BuiltBatch]], want: list[tuple[int, BuiltBatch]]) -> None:
    assert len(got) == len(want)
    for (i, a), (j, b) in zip(got, want, strict=True):
        assert i == j
        np.testing.assert_array_equal(a.inputs, b.inputs)
        np.testing.assert_array_equal(a.targets, b.targets)
        np.testing.assert_array_equal(a.mask, b.mask)


def _block_starts(plan: PlanContext, *, epoch: int,
                  ) -> tuple[Schedule, np.ndarray, np.ndarray, np.ndarray]:
    """``epoch``'s schedule, rank 0's batches of it, each batch's shuffle block, and
    where among the batches a new block starts."""
    schedule = plan.schedule(epoch)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    assert schedule.batch_block is not None
    block = schedule.batch_block[batches]
    return schedule, batches, block, np.flatnonzero(block[1:] != block[:-1]) + 1


def test_the_next_blocks_chunks_are_asked_for_at_the_start_of_a_block(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    schedule, batches, _, starts = _block_starts(plan, epoch=0)
    assert starts.shape[0] >= 2  # several blocks, each of several batches
    assert int(np.diff(np.concatenate([[0], starts])).min()) >= 3
    cache = ChunkCache(64 << 20, readahead_workers=1, readahead_bytes=64 << 20)
    builder = _builder(plan, cache, sub_blocks=False)  # the chunk path
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
    plain = _pass(_builder(plan, ChunkCache(64 << 20), sub_blocks=False), schedule, batches,
                  readahead=0)
    _assert_same(rest, plain[1:])


def test_a_shuffle_block_is_one_sub_block_decoded_while_the_one_before_is_served(
        tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    schedule, batches, block, starts = _block_starts(plan, epoch=1)
    subs = sub_blocks(plan)
    assert subs is not None
    nxt = block_key(subs.layout(int(block[starts[0]])))
    cache = ChunkCache(64 << 20)
    items = iter(BatchPipeline(_builder(plan, cache), schedule, batches, start=0,
                               end=int(batches.shape[0]), readahead_batches=1))
    first = next(items)
    while cache.stats().loads_in_flight:  # until the read-ahead landed (pytest-timeout)
        time.sleep(0.01)
    # the cache holds two sub-blocks (this block's, the next one's), no chunk
    assert set(cache.keys()) == {block_key(subs.layout(int(block[0]))), nxt}
    got = [first, *items]
    assert cache.stats().misses == len(set(block.tolist()))  # each block decoded once
    # byte for byte the chunk path's batches
    _assert_same(got, _pass(_builder(plan, ChunkCache(64 << 20), sub_blocks=False), schedule,
                            batches, readahead=0))



def test_a_sub_blocks_staging_buffer_is_reused_once_nothing_holds_it() -> None:
    staging = _Staging()
    first = staging.take(10, 3)
    address = first.__array_interface__["data"][0]
    held = staging.take(8, 3)  # the first is still held: another buffer
    assert held.__array_interface__["data"][0] != address
    third = staging.take(4, 3)  # both held: a new one, not kept
    del first, third
    again = staging.take(9, 3)  # the first buffer, free again (at least 9 x 3)
    assert again.shape == (9, 3)
    assert again.__array_interface__["data"][0] == address
