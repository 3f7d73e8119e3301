"""The read paths of a builder: the block path hands a stream to the chunk path when its
blocks cannot be read, and every batch stays the chunk path's, skipped lanes included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.flight_server.helpers import COLUMNS, StreamSpec, write_dataset
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize.blocks import block_key, block_layouts
from windpipe.services.materialize.builder import BadSegmentPolicy, BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.read_paths import BLOCK_USES
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.schedule import Schedule
from windpipe.services.storage.store import Storage

SPECS = [StreamSpec("cycling", f"c{c}", k, (64, 48)) for c in range(3) for k in range(2)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8), strategy="sequential",
)


def _outcome(builder: BatchBuilder, schedule: Schedule, g: int) -> bytes | ErrorType:
    try:
        batch, meta = builder.build(schedule, g, batch_idx=g)
    except WindpipeError as exc:
        return exc.type
    return batch.serialize().to_pybytes() + meta.encode()


def test_every_block_use_is_a_rule() -> None:
    assert set(BLOCK_USES) == {"always", "auto", "cached"}
    assert not BLOCK_USES["always"].chunks  # an in-process reader has no storage to fall to
    assert BLOCK_USES["auto"].if_fits
    assert BLOCK_USES["auto"].loads
    assert not BLOCK_USES["cached"].loads


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_auto_blocks_fall_back_to_chunks_after_a_bad_segment(tmp_path: Path,
                                                              policy: BadSegmentPolicy) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=5)
    plan = ds.plan(CONFIG, plan_id="p")
    (ds.root / ds.streams.piece_path[len(ds.streams.piece_path) // 2]).unlink()
    storage = Storage.from_uri(plan.root_uri)
    schema = batch_schema(plan_id="p", version_id="v-test")
    auto = BatchBuilder(plan, storage, ChunkCache(64 << 20), schema, blocks="auto",
                        on_bad_segment=policy)
    chunks = BatchBuilder(plan, storage, ChunkCache(64 << 20), schema, on_bad_segment=policy)
    schedule = plan.schedule(0)
    batches = rank_batches(schedule, rank=0, world_size=1,
                           drop_incomplete_distributed=False).tolist()
    first = auto.lane_plan(schedule, batches[0])
    assert auto.block_requests(first) is not None  # the plan fits: blocks are loaded
    outcomes = [(_outcome(auto, schedule, g), _outcome(chunks, schedule, g)) for g in batches]
    assert [a for a, _ in outcomes] == [b for _, b in outcomes]
    assert auto.block_requests(first) is None  # now blocks only when held: none is
    assert not {block_key(x) for x in block_layouts(plan)} & set(auto.cache.keys())
    if policy == "skip":
        assert all(isinstance(a, bytes) for a, _ in outcomes)
        assert auto.bad_paths == chunks.bad_paths != {}
    else:
        assert ErrorType.SEGMENT_ERROR in [a for a, _ in outcomes]


def test_always_reads_blocks_only(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=5)
    plan = ds.plan(CONFIG, plan_id="p")
    (ds.root / ds.streams.piece_path[0]).unlink()
    builder = BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20),
                           batch_schema(plan_id="p", version_id="v-test"), blocks="always",
                           on_bad_segment="skip")
    schedule = plan.schedule(0)
    lp = builder.lane_plan(schedule, 0)
    with pytest.raises(WindpipeError) as exc:
        builder.requests(lp)
    assert exc.value.type == ErrorType.INTERNAL
    with pytest.raises(WindpipeError) as exc:
        builder.build(schedule, lp.global_batch, batch_idx=0, lp=lp)
    assert exc.value.type == ErrorType.SEGMENT_ERROR  # no chunk path to fall back to
    assert builder.bad_paths == {}
