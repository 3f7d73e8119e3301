"""Endpoint placement across Flight servers: unit boundaries, homes, minimum lengths."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from tests.flight_server.helpers import COLUMNS, Dataset, StreamSpec, write_dataset
from windpipe.flight_server.locality import batch_homes, endpoint_ranges, rendezvous
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.planning.ranks import rank_batches

SPECS = [StreamSpec("cycling", f"c{c}", k, (60, 45)) for c in range(4) for k in range(2)]
LOCATIONS = ("grpc://a:1", "grpc://b:2", "grpc://c:3")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("loc"), SPECS, fmt="parquet", chunk_rows=16)


def test_rendezvous_is_stable_and_moves_little_when_a_server_joins() -> None:
    keys = [f"file:///data/seg-{i}.parquet" for i in range(400)]
    before = {k: rendezvous(k, LOCATIONS[:2])[0] for k in keys}
    after = {k: rendezvous(k, LOCATIONS)[0] for k in keys}
    assert before == {k: rendezvous(k, LOCATIONS[::-1][1:])[0] for k in keys}  # order-free
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == LOCATIONS[2] for k in moved)  # only to the new server
    assert 0.2 < len(moved) / len(keys) < 0.47  # about a third


@pytest.mark.parametrize("stateful", [0, 3])
@pytest.mark.parametrize("min_batches", [1, 4])
def test_endpoints_cover_the_pass_at_unit_boundaries(
    dataset: Dataset, tmp_path: Path, stateful: int, min_batches: int,
) -> None:
    config = LoaderConfig(
        inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
        default_window=WindowConfig(batch_size=2, seq_len=8), strategy="shuffled",
        stateful_n_windows=stateful, seed=3,
    )
    plan = dataset.plan(config)
    schedule = plan.schedule(0)
    for world, rank in ((1, 0), (2, 1)):
        batches = rank_batches(schedule, rank=rank, world_size=world,
                               drop_incomplete_distributed=False)
        for start in (0, 3):
            ranges = endpoint_ranges(plan, schedule, batches, start=start, locations=LOCATIONS,
                                     min_batches=min_batches)
            assert ranges[0][0] == start
            assert ranges[-1][1] == batches.shape[0]
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
            units = schedule.batch_unit[batches]
            for a, _, home in ranges[1:]:
                assert units[a] != units[a - 1]  # never inside a unit (stateful group)
                assert home == batch_homes(plan, schedule, batches[a : a + 1], LOCATIONS)[0]
            if len(ranges) > 1:
                assert all(b - a >= min_batches for a, b, _ in ranges)
            if min_batches == 1:
                # neighbours differ in home, otherwise they would have been merged
                assert all(x[2] != y[2] for x, y in itertools.pairwise(ranges))
            assert {h for *_, h in ranges} <= set(range(len(LOCATIONS)))


def test_one_location_is_one_endpoint(dataset: Dataset) -> None:
    config = LoaderConfig(inputs={"cycling": ("current_a",)}, targets={"cycling": ("voltage_v",)},
                          default_window=WindowConfig(batch_size=2, seq_len=8))
    plan = dataset.plan(config)
    schedule = plan.schedule(0)
    batches = np.arange(schedule.n_batches, dtype=np.int64)
    assert endpoint_ranges(plan, schedule, batches, start=2, locations=LOCATIONS[:1],
                           min_batches=1) == [(2, schedule.n_batches, 0)]
