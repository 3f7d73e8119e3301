"""Batches materialized from S3 through the read-ahead (a block fill over moto behind the
latency proxy) are byte for byte the batches of the same data on a local disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.latency_proxy import LatencyProxy
from tests.flight_server.helpers import Dataset, write_dataset
from tests.flight_server.test_batches import SPECS, _config
from windpipe.services.contract.wire import batch_schema
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.storage.readahead import ReadAhead
from windpipe.services.storage.store import Storage, StorageOptions

pytestmark = [pytest.mark.s3, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("ahead-ds"), SPECS, fmt="mixed",
                         chunk_rows=16, seed=11)


def _batches(builder: BatchBuilder, plan: Any) -> list[tuple[bytes, bytes]]:
    out = []
    for epoch in (0, 1):
        schedule = plan.schedule(epoch)
        for g in rank_batches(schedule, rank=0, world_size=1,
                              drop_incomplete_distributed=False).tolist():
            batch, meta = builder.build(schedule, g, batch_idx=g)
            out.append((batch.serialize().to_pybytes(), meta.encode()))
    return out


@pytest.mark.parametrize("name", ["shuffled", "chain"])
def test_batches_from_s3_through_the_read_ahead_equal_local_ones(
        dataset: Dataset, s3_server: Any, name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri = s3_server.upload_dir(dataset.root, s3_server.unique_prefix("ahead"))
    local_plan = dataset.plan(_config(name), plan_id=name)
    s3_plan = dataset.plan(_config(name), plan_id=name, root_uri=uri)
    schema = batch_schema(plan_id=name, version_id="v-test")
    local = BatchBuilder(local_plan, Storage.from_uri(local_plan.root_uri),
                         ChunkCache(64 << 20), schema, blocks="always")
    started: list[ReadAhead] = []
    original = ReadAhead.start

    def spy(self: ReadAhead) -> ReadAhead:
        started.append(self)
        return original(self)

    monkeypatch.setattr(ReadAhead, "start", spy)
    with LatencyProxy(s3_server.endpoint_url, latency_s=0.01, bandwidth_bps=400e6) as proxy:
        storage = Storage.from_uri(uri, StorageOptions(s3_endpoint=proxy.endpoint,
                                                       s3_allow_http=True))
        remote = BatchBuilder(s3_plan, storage, ChunkCache(64 << 20), schema, blocks="always")
        got = _batches(remote, s3_plan)
    want = _batches(local, local_plan)
    assert len(got) == len(want) > 0
    assert got == want
    assert started, "the block fill did not read ahead"
    stats = [a.stats() for a in started]
    assert sum(s.hits for s in stats) > 0
    assert all(s.peak_held_bytes <= s.max_bytes for s in stats)


def test_local_roots_do_not_read_ahead(tmp_path: Path) -> None:
    storage = Storage.from_uri(tmp_path.as_uri())
    with storage.read_ahead([]) as ahead:
        assert ahead is None
