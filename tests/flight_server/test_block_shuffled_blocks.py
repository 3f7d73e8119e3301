"""``block_shuffled`` over Flight on the sub-block path (``read_paths.sub_blocks``): a plan
larger than the cache, every batch equal to the plain-loop reference (SEMANTICS 3c,
``tests/services/planning/test_block_shuffled.py``), each shuffle block decoded once a
pass (one cache load each), and with a tier, the sub-blocks kept there for the next
epoch (nothing read from storage again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flight_server.helpers import (
    Dataset,
    StreamSpec,
    assert_pass_equal,
    cache_stats,
    consume,
    start_server,
    write_dataset,
)
from tests.reference.schedule_ref import ref_streams, reference_values
from tests.services.planning.test_block_shuffled import ref_schedule
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.materialize.sub_blocks import sub_blocks

CHUNK = 32
ROW_BYTES = 3 * 4  # two inputs and one target, float32, in both protocols
BUDGET = 3 << 10  # shuffle_block_bytes: ~8 chunks
CACHE = 8 << 10  # two sub-blocks, not a protocol's whole block
SPECS = [
    StreamSpec("cycling", "c1", 1, (300, 170)),
    StreamSpec("hppc", "c1", 1, (140,)),
    StreamSpec("cycling", "c1", 2, (9,)),  # shorter than a window: short lanes
    StreamSpec("cycling", "c2", 1, (410,)),
    StreamSpec("hppc", "c2", 1, (96, 90)),
    StreamSpec("cycling", "c3", 1, (333,)),
]
CONFIG = LoaderConfig(
    inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a", "soc_pct")},
    targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
    default_window=WindowConfig(batch_size=4, seq_len=12, drop_incomplete=False),
    strategy="block_shuffled", shuffle_block_bytes=BUDGET, seed=5)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("sub-blocks") / "ds", SPECS, chunk_rows=CHUNK,
                         seed=4)


@pytest.fixture(scope="module")
def servers(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    plans = {"blocks": dataset.plan(CONFIG, plan_id="blocks")}
    tier = tmp_path_factory.mktemp("tier")
    plain = start_server(plans, cache_bytes=CACHE)
    tiered = start_server(plans, cache_bytes=CACHE, tier_dir=tier, tier_bytes=1 << 20)
    yield plans["blocks"], plain, tiered, tier
    plain.stop(grace_s=5)
    tiered.stop(grace_s=5)


def _want(dataset: Dataset, epoch: int) -> list[tuple[Any, tuple[np.ndarray, ...]]]:
    chunks = [[CHUNK] * (rows // CHUNK) + ([rows % CHUNK] if rows % CHUNK else [])
              for spec in SPECS for rows in spec.pieces]
    per_stream: list[list[int]] = [[] for _ in SPECS]
    for p, rows in enumerate(chunks):
        per_stream[int(dataset.streams.piece_stream[p])].extend(rows)
    refs = ref_streams(dataset.streams)
    return [(b, reference_values(b, refs, dataset.data, CONFIG))
            for b in ref_schedule(dataset.streams, CONFIG, per_stream, epoch,
                                  row_bytes=ROW_BYTES)]


def test_a_block_is_larger_than_the_cache_and_its_sub_blocks_fit_twice(servers: Any) -> None:
    plan = servers[0]
    subs = sub_blocks(plan)
    assert subs is not None
    assert subs.count >= 4
    assert max(x.nbytes for x in block_layouts(plan)) > CACHE
    assert all(2 * subs.layout(b).nbytes <= CACHE for b in range(subs.count))


def test_every_batch_equals_the_reference_and_each_block_is_decoded_once(
        dataset: Dataset, servers: Any) -> None:
    plan, plain, _, _ = servers
    for epoch in (0, 1):
        before = cache_stats(plain.location)
        got = consume(plain.location, FlightCommand("blocks", epoch=epoch))
        after = cache_stats(plain.location)
        assert_pass_equal(got, _want(dataset, epoch), dataset, CONFIG)
        blocks = plan.schedule(epoch).batch_block
        assert blocks is not None
        # one load a shuffle block (a sub-block), none per chunk
        assert after["misses"] - before["misses"] <= len(set(blocks.tolist()))
        assert after["misses"] > before["misses"]
    short = [r for r in got if not r.mask.all()]
    assert short  # the short stream's lanes were read too


def test_the_tier_keeps_the_sub_blocks_for_the_next_epoch(dataset: Dataset,
                                                          servers: Any) -> None:
    plan, _, tiered, tier = servers
    got = consume(tiered.location, FlightCommand("blocks", epoch=0))
    assert_pass_equal(got, _want(dataset, 0), dataset, CONFIG)
    subs = sub_blocks(plan)
    assert subs is not None
    files = {p.stem for p in Path(tier).rglob("*.wpb")}
    assert files == {subs.layout(b).key for b in range(subs.count)}  # no whole block
    read = cache_stats(tiered.location)["bytes_read"]
    got = consume(tiered.location, FlightCommand("blocks", epoch=1))
    assert_pass_equal(got, _want(dataset, 1), dataset, CONFIG)
    assert cache_stats(tiered.location)["bytes_read"] == read  # mapped from the tier
