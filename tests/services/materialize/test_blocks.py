"""The block path builds every batch byte for byte as the chunk path does, for every plan shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flight_server.helpers import Dataset, write_dataset
from tests.flight_server.test_batches import CONFIGS, SPECS, _config
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize.blocks import block_key, block_layouts
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.tier import Tier
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.storage.store import Storage


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("blocks-ds"), SPECS, fmt="mixed",
                         chunk_rows=16, seed=3)


def _builders(ds: Dataset, name: str, tier: Tier | None) -> tuple[Any, BatchBuilder,
                                                                    BatchBuilder]:
    plan = ds.plan(_config(name), plan_id=name)
    storage = Storage.from_uri(plan.root_uri)
    schema = batch_schema(plan_id=name, version_id="v-test")
    chunks = BatchBuilder(plan, storage, ChunkCache(64 << 20), schema)
    blocks = BatchBuilder(plan, storage, ChunkCache(64 << 20), schema, tier=tier,
                          blocks="always")
    return plan, chunks, blocks


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("with_tier", [False, True])
def test_block_batches_equal_chunk_batches(dataset: Dataset, tmp_path: Path, name: str,
                                           with_tier: bool) -> None:
    tier = Tier(tmp_path / "tier", budget_bytes=64 << 20) if with_tier else None
    plan, chunks, blocks = _builders(dataset, name, tier)
    compared = 0
    for epoch in (0, 1):
        schedule = plan.schedule(epoch)
        for g in rank_batches(schedule, rank=0, world_size=1,
                              drop_incomplete_distributed=False).tolist():
            a, meta_a = chunks.build(schedule, g, batch_idx=g)
            b, meta_b = blocks.build(schedule, g, batch_idx=g)
            assert b.serialize().to_pybytes() == a.serialize().to_pybytes(), (name, epoch, g)
            assert meta_b.encode() == meta_a.encode()
            compared += 1
    assert compared > 0
    # the block path loaded blocks only, the chunk path chunks only
    keys = blocks.cache.keys()
    assert sorted(keys) == sorted(block_key(layout) for layout in block_layouts(plan))
    assert all(k not in keys for k in plan.chunk_keys)
    if tier is not None:
        assert tier.builds == len(block_layouts(plan))
        assert tier.used_bytes() == sum(64 + layout.nbytes for layout in block_layouts(plan))


def test_block_layout_rows_follow_streams(dataset: Dataset) -> None:
    plan = dataset.plan(_config("chain"), plan_id="chain")
    streams = plan.streams
    layouts = block_layouts(plan)
    assert [layout.protocol for layout in layouts] == list(range(len(streams.protocols)))
    for layout in layouts:
        mine = np.flatnonzero(streams.protocol == layout.protocol)
        assert layout.rows == int(streams.n_rows[mine].sum())
        assert layout.row0[mine].tolist() == (np.cumsum(streams.n_rows[mine])
                                              - streams.n_rows[mine]).tolist()
        assert (layout.row0[streams.protocol != layout.protocol] == -1).all()
        assert sorted(np.diff(np.append(layout.chunk_row, layout.rows)).tolist()) == sorted(
            plan.chunk_len[layout.chunks].tolist())
    # the key names the rows and channels: another plan of the same rows and spec shares it
    again = dataset.plan(_config("chain"), plan_id="chain-again")
    assert [x.key for x in block_layouts(again)] == [x.key for x in layouts]
    other = dataset.plan(_config("sequential"), plan_id="seq")
    assert {x.key for x in block_layouts(other)}.isdisjoint({x.key for x in layouts})



@pytest.mark.parametrize("spare", ["an eighth", "a sixteenth"])
def test_auto_holds_a_split_whole_when_it_leaves_an_eighth_of_the_cache(
        dataset: Dataset, spare: str) -> None:
    plan = dataset.plan(_config("sequential"), plan_id="auto")
    whole = sum(layout.nbytes for layout in block_layouts(plan))
    budget = whole * 8 // 7 + 8 if spare == "an eighth" else whole * 16 // 15
    builder = BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(budget),
                           batch_schema(plan_id="auto", version_id="v-test"), blocks="auto")
    builder.build(plan.schedule(0), 0, batch_idx=0)
    keys = builder.cache.keys()
    if spare == "an eighth":
        expected = {block_key(x) for x in block_layouts(plan)}
    else:
        expected = set(plan.chunk_keys)
    assert keys
    assert set(keys) <= expected
