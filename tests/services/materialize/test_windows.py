"""The window path (windpipe/services/materialize/windows.py): full-window batches built with one
copy
are byte for byte the general builder's, and write no byte twice."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flight_server.helpers import Dataset, StreamSpec, write_dataset
from tests.flight_server.test_batches import CONFIGS, SPECS, _config
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize import windows as windows_module
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.materialize.builder import BLOCK_BATCHES, BatchBuilder, BuiltBatch
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier
from windpipe.services.materialize.windows import WindowPass
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.storage.store import Storage


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("windows-ds"), SPECS, fmt="mixed",
                         chunk_rows=16, seed=3)


def _builder(plan: PlanContext, tier: Tier | None) -> BatchBuilder:
    return BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20),
                        batch_schema(plan_id=plan.plan_id, version_id="v-test"), tier=tier,
                        blocks="always", lazy_provenance=True)


def _same(a: BuiltBatch, b: BuiltBatch) -> None:
    for name in ("inputs", "targets", "mask", "has_channel"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes(), name
    assert a.meta.encode() == b.meta.encode()
    assert a.provenance().serialize().to_pybytes() == b.provenance().serialize().to_pybytes()


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("with_tier", [False, True])
def test_window_batches_equal_the_general_builders(dataset: Dataset, tmp_path: Path,
                                                   name: str, with_tier: bool) -> None:
    tier = Tier(tmp_path / "tier", budget_bytes=64 << 20) if with_tier else None
    plan = dataset.plan(_config(name), plan_id=name)
    general, windows = _builder(plan, tier), _builder(plan, tier)
    fast = 0
    for epoch in (0, 1):
        schedule = plan.schedule(epoch)
        batches = rank_batches(schedule, rank=0, world_size=1,
                               drop_incomplete_distributed=False)
        start = 1 if batches.shape[0] > 2 else 0  # a resumed pass starts mid-segment
        path = windows.window_pass(schedule, batches, start=start, end=int(batches.shape[0]))
        assert path is not None
        for i in range(start, int(batches.shape[0])):
            built = path.build(i)
            if built is None:
                continue
            fast += 1
            _same(built, general.build_arrays(schedule, int(batches[i]), batch_idx=i))
    assert fast > 0  # every config has batches of full windows


def _padded_batches(plan: PlanContext) -> int:
    """Epoch 0's window-path batches of ``plan`` checked against the general builder's;
    how many of them hold a lane that ends early."""
    general, windows = _builder(plan, None), _builder(plan, None)
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    path = windows.window_pass(schedule, batches, start=0, end=int(batches.shape[0]))
    assert path is not None
    padded = 0
    for i in range(int(batches.shape[0])):
        built = path.build(i)
        if built is None:
            continue
        padded += int(built.mask.min() == 0)
        _same(built, general.build_arrays(schedule, int(batches[i]), batch_idx=i))
    return padded


@pytest.mark.parametrize("name", ["sequential", "shuffled", "stateful-all-shuffled"])
def test_lanes_that_end_early_take_the_window_path_padded_as_the_general_builder_pads(
        dataset: Dataset, name: str) -> None:
    # some batches of the window path hold lanes that end early
    assert _padded_batches(dataset.plan(_config(name), plan_id=name)) > 0


def test_both_ways_of_padding_a_batch_agree_with_the_general_builder(
        dataset: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    # a padded batch is one copy then the pad row, unless a lane starts too near the
    # end of its block for a whole window: that one takes short_lanes. Both happen here.
    fallback: list[int] = []
    real = windows_module.short_lanes

    def counted(*args: Any, **kwargs: Any) -> None:
        fallback.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(windows_module, "short_lanes", counted)
    padded = _padded_batches(dataset.plan(_config("sequential"), plan_id="padding-ways"))
    assert 0 < len(fallback) < padded


@pytest.mark.parametrize("name", ["sequential", "shuffled", "chain"])
def test_a_pass_is_the_same_with_and_without_the_window_path(dataset: Dataset,
                                                             name: str) -> None:
    plan = dataset.plan(_config(name), plan_id=name)
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    end = int(batches.shape[0])

    class _General(BatchBuilder):
        def window_pass(self, schedule: Any, batches: Any, *, start: int,
                        end: int) -> WindowPass:
            return WindowPass(self.plan, self.tables, block_layouts(self.plan), schedule,
                              batches, start=start, end=end, block=lambda _code: None,
                              provenance=self._assembler.lane_provenance)  # no block: general

    plain = _General(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20),
                     batch_schema(plan_id=name, version_id="v-test"), blocks="always",
                     lazy_provenance=True)
    got = list(BatchPipeline(_builder(plan, None), schedule, batches, start=0, end=end,
                             readahead_batches=0))
    want = list(BatchPipeline(plain, schedule, batches, start=0, end=end, readahead_batches=0))
    assert [i for i, _ in got] == [i for i, _ in want] == list(range(end))
    for (_, a), (_, b) in zip(got, want, strict=True):
        _same(a, b)


def _one_copy_plan(tmp_path: Path, *, b: int = 16, t: int = 128) -> PlanContext:
    ds = write_dataset(tmp_path / "ds", [StreamSpec("cycling", "c1", 1, (4000,))],
                       fmt="parquet", chunk_rows=512, seed=1)
    config = LoaderConfig(
        inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
        default_window=WindowConfig(batch_size=b, seq_len=t, drop_incomplete=True),
        strategy="shuffled", drop_incomplete_batches=True)
    return ds.plan(config, plan_id="one-copy")


def test_a_full_window_batch_writes_each_byte_once(tmp_path: Path) -> None:
    """Bytes allocated while building a batch of B full windows: its inputs and targets
    (each window one contiguous run, copied once from the block), its mask and
    ``has_channel`` (copied from the segment's table), and nothing the size of a second
    copy; nothing is copied per lane."""
    b, t = 16, 128
    plan = _one_copy_plan(tmp_path, b=b, t=t)
    builder = _builder(plan, Tier(tmp_path / "tier", budget_bytes=64 << 20))
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    path = builder.window_pass(schedule, batches, start=0, end=int(batches.shape[0]))
    assert path is not None
    assert path.build(0) is not None  # the block is loaded, the lane tables computed
    c_in, c_out = len(plan.specs[0].input_columns), len(plan.specs[0].target_columns)
    window_block = b * t * (c_in + c_out) * 4  # T rows of every channel of B windows
    small = b * t + b * len(plan.specs[0].channels)  # the mask and has_channel (uint8)
    tracemalloc.start()
    try:
        for i in range(1, int(batches.shape[0])):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            built = path.build(i)
            peak = tracemalloc.get_traced_memory()[1] - before
            assert built is not None
            assert built.inputs.flags.owndata
            assert built.targets.flags.owndata
            assert built.mask.flags.owndata
            assert built.has_channel.flags.owndata
            assert built.inputs.nbytes + built.targets.nbytes == window_block
            # a few hundred bytes of Python objects (metadata, the batch, its handles)
            assert window_block + small <= peak < window_block + small + 4096, i
            del built
    finally:
        tracemalloc.stop()


def test_no_two_batches_share_memory_and_an_edit_stays_in_its_batch(tmp_path: Path) -> None:
    """Every batch owns its bytes, each time it is built: writing into one batch (torch
    lets a user write through any tensor) changes no other batch, built before or after,
    nor the same batch of a second pass from the same tables (what a same-host reader
    keeps between passes)."""
    plan = _one_copy_plan(tmp_path)
    tier = Tier(tmp_path / "tier", budget_bytes=64 << 20)
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    n = int(batches.shape[0])
    path = _builder(plan, tier).window_pass(schedule, batches, start=0, end=n)
    assert path is not None
    first = [path.build(i) for i in range(n)]
    assert all(x is not None for x in first)
    built = [x for x in first if x is not None]
    for name in ("inputs", "targets", "mask", "has_channel"):
        spans = sorted((a.__array_interface__["data"][0], a.nbytes)
                       for a in (getattr(x, name) for x in built))
        for (lo, size), (nxt, _) in itertools.pairwise(spans):
            assert lo + size <= nxt, name  # disjoint memory
    want = [_builder(plan, tier).build_arrays(schedule, int(batches[i]), batch_idx=i)
            for i in range(n)]
    for x in built:  # a user writing into every batch it got
        x.inputs[:] = -1.0
        x.targets[:] = -1.0
        x.mask[:] = 0
        x.has_channel[:] = 0
    again = [path.build(i) for i in range(n)]  # the same pass object, built again
    for got, expected in zip(again, want, strict=True):
        assert got is not None
        _same(got, expected)
        assert got.meta == expected.meta  # field by field, as the general builder's


def test_metadata_is_the_general_builders_field_by_field(dataset: Dataset) -> None:
    """The window path makes its metadata positionally from per-shape fields; each field
    equals the general builder's (stateful fields included)."""
    for name in ("stateful-k2", "stateful-all-shuffled", "sequential", "chain"):
        plan = dataset.plan(_config(name), plan_id=name)
        schedule = plan.schedule(0)
        batches = rank_batches(schedule, rank=0, world_size=1,
                               drop_incomplete_distributed=False)
        path = _builder(plan, None).window_pass(schedule, batches, start=0,
                                                end=int(batches.shape[0]))
        assert path is not None
        general = _builder(plan, None)
        for i in range(int(batches.shape[0])):
            built = path.build(i)
            if built is not None:
                want = general.build_arrays(schedule, int(batches[i]), batch_idx=i).meta
                assert built.meta == want, (name, i)


def test_a_server_reads_a_block_only_while_its_cache_holds_it(tmp_path: Path) -> None:
    """Without a tier a block is memory the cache owns: once the cache lets it go, the
    window path stops reading it (the general path loads it again, within the budget) and
    the batches stay the same; a Flight server's window path takes the provenance it
    sends from the prepared blocks, as the general path does."""
    plan = _one_copy_plan(tmp_path, b=4, t=64)
    schema = batch_schema(plan_id=plan.plan_id, version_id="v-test")
    cache = ChunkCache(64 << 20)
    builder = BatchBuilder(plan, Storage.from_uri(plan.root_uri), cache, schema, blocks="auto")
    general = BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20), schema,
                           blocks="auto")
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1, drop_incomplete_distributed=False)
    assert batches.shape[0] >= 4
    path = builder.window_pass(schedule, batches, start=0, end=int(batches.shape[0]))
    first = path.build(0)
    assert first is not None
    assert first.provenance_bytes > 0  # sent on the wire: computed with the batch
    general.prepare(schedule, batches[:BLOCK_BATCHES])  # as a stream's pipeline does
    want = general.build_arrays(schedule, int(batches[0]), batch_idx=0)
    assert first.provenance().equals(want.provenance())
    wire = builder.record_batch(first).serialize().to_pybytes()
    assert wire == general.record_batch(want).serialize().to_pybytes()  # NaN: bytes
    assert path.build(1) is not None
    cache.clear()  # the block is evicted
    assert path.build(2) is None  # not read from memory the cache no longer owns
    again = builder.build_arrays(schedule, int(batches[2]), batch_idx=2)  # loads it again
    _same(again, general.build_arrays(schedule, int(batches[2]), batch_idx=2))
    assert path.build(3) is not None  # held again: the window path reads it
