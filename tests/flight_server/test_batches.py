"""Every batch streamed over Flight equals the independent numpy reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    StreamSpec,
    assert_pass_equal,
    consume,
    expected_pass,
    start_server,
    write_dataset,
)
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.contract.wire import FlightCommand

SPECS = [
    StreamSpec("cycling", "c1", 1, (37, 50)),
    StreamSpec("cycling", "c1", 2, (1,)),
    StreamSpec("cycling", "c2", 1, (64,)),
    StreamSpec("cycling", "c2", 2, (9, 30)),
    StreamSpec("hppc", "c1", 1, (45,)),
    StreamSpec("hppc", "c2", 1, (20, 21)),
    StreamSpec("hppc", "c2", 2, (2,)),
]

INPUTS = {"cycling": COLUMNS["cycling"], "hppc": ("current_a", "voltage_v")}
TARGETS = {"cycling": ("voltage_v",), "hppc": ("voltage_v", "soc_pct")}
SCALING = (
    ScalingSpec(column="current_a", input_min=-3, input_max=8),
    ScalingSpec(column="voltage_v", input_min=0.0, input_max=6.0, clip=True),
    ScalingSpec(column="soc_pct", input_min=0.0, input_max=60.0, transform="log1p"),
)

CONFIGS: dict[str, dict[str, Any]] = {
    "sequential": {"default_window": WindowConfig(batch_size=3, seq_len=5)},
    "sequential-step-drop": {
        "default_window": WindowConfig(batch_size=2, seq_len=7, step_rows=4,
                                       drop_incomplete=True),
        "window_by_protocol": {"hppc": WindowConfig(batch_size=4, seq_len=3)},
    },
    "shuffled": {"strategy": "shuffled", "default_window": WindowConfig(batch_size=3, seq_len=6),
                 "seed": 5},
    "stateful-k2": {"stateful_n_windows": 2,
                    "default_window": WindowConfig(batch_size=2, seq_len=6)},
    "stateful-all-shuffled": {"stateful_n_windows": -1, "strategy": "shuffled",
                              "default_window": WindowConfig(batch_size=3, seq_len=8),
                              "drop_incomplete_batches": True},
    "chain": {"stateful_n_windows": 2, "cross_protocol_state_carry": "chain",
              "protocol_order": ("hppc", "cycling"),
              "alignment_key": ("set_id", "cell_id", "cidx"),
              "default_window": WindowConfig(batch_size=2, seq_len=5)},
    "no-dist-drop": {"strategy": "shuffled", "drop_incomplete_distributed": False,
                     "default_window": WindowConfig(batch_size=2, seq_len=9)},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("flight-ds"), SPECS, fmt="mixed",
                         chunk_rows=16, seed=3)


def _config(name: str) -> LoaderConfig:
    return LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING, **CONFIGS[name])


@pytest.fixture(scope="module")
def server(dataset: Dataset) -> Any:
    plans = {name: dataset.plan(_config(name), plan_id=name) for name in CONFIGS}
    running = start_server(plans)
    yield running
    running.stop(grace_s=5)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize(("epoch", "world_size"), [(0, 1), (1, 2), (0, 3)])
def test_every_batch_equals_reference(dataset: Dataset, server: Any, name: str, epoch: int,
                                      world_size: int) -> None:
    config = _config(name)
    total = 0
    for rank in range(world_size):
        got = consume(server.location, FlightCommand(name, epoch=epoch, rank=rank,
                                                     world_size=world_size))
        want = expected_pass(dataset, config, epoch=epoch, rank=rank, world_size=world_size)
        assert_pass_equal(got, want, dataset, config)
        total += len(got)
    if world_size == 1:
        assert total > 0


def test_parquet_and_zarr_give_identical_bytes(tmp_path: Path) -> None:
    specs = [StreamSpec("cycling", "c1", 1, (40, 33)), StreamSpec("cycling", "c2", 1, (50,))]
    pq_ds = write_dataset(tmp_path / "pq", specs, fmt="parquet", chunk_rows=16, seed=9)
    zarr_ds = write_dataset(tmp_path / "zarr", specs, fmt="zarr", chunk_rows=16, seed=9)
    config = LoaderConfig(inputs={"cycling": COLUMNS["cycling"]},
                          targets={"cycling": ("voltage_v",)}, scaling=SCALING[:2],
                          default_window=WindowConfig(batch_size=2, seq_len=7))
    running = start_server({"pq": pq_ds.plan(config, "pq"), "zarr": zarr_ds.plan(config, "zarr")})
    try:
        a = consume(running.location, FlightCommand("pq"))
        b = consume(running.location, FlightCommand("zarr"))
    finally:
        running.stop(grace_s=5)
    assert len(a) == len(b) > 3
    for x, y in zip(a, b, strict=True):
        # null parquet values and NaN zarr values are the same "missing" value
        assert x.inputs.tobytes() == y.inputs.tobytes()
        np.testing.assert_array_equal(x.targets, y.targets)
        assert x.mask.tobytes() == y.mask.tobytes()


def test_tiled_batches_take_the_contiguous_copy_and_match_the_reference(tmp_path: Path) -> None:
    """Lanes that are back-to-back windows of one chunk are copied in one slice per matrix;
    the result equals the reference and the general per-lane gather."""
    from windpipe.services.materialize.builder import BatchBuilder  # noqa: PLC0415

    ds = write_dataset(tmp_path, [StreamSpec("cycling", "c1", 1, (200,)),
                                  StreamSpec("cycling", "c2", 1, (90,))],
                       fmt="parquet", chunk_rows=128, seed=11)
    config = LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING,
                          default_window=WindowConfig(batch_size=3, seq_len=8))
    running = start_server({"tiled": ds.plan(config, plan_id="tiled")})
    try:
        got = consume(running.location, FlightCommand("tiled"))
        assert_pass_equal(got, expected_pass(ds, config, epoch=0, rank=0, world_size=1), ds)
        server = running.server
        plan = server.plans.get("tiled")
        schedule, batches = server._rank_pass(plan, 0, 0, 1)
        builder = BatchBuilder(plan, server.storage_for(plan.root_uri), server.cache,
                               server._schema(plan))
        plans = builder.lane_plans(schedule, batches)
        tiled = [lp for lp in plans if lp.tiled_src >= 0]
        assert tiled  # both paths are exercised
        assert len(tiled) < len(plans)
        for lp in tiled:
            fast, _ = builder.build(schedule, lp.global_batch, batch_idx=0, lp=lp)
            fast_bytes = fast.serialize().to_pybytes()
            general = dataclasses.replace(lp, tiled_src=-1)
            slow, _ = builder.build(schedule, lp.global_batch, batch_idx=0, lp=general)
            assert slow.serialize().to_pybytes() == fast_bytes
    finally:
        running.stop(grace_s=5)
