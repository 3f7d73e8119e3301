"""Fitted scaling reaches the batches: over a real Flight server, on every plan shape of
``test_batches``, a standardized (and a robust and a min-max) channel equals the values
computed by hand from the files (``(x - mean) / std``, ``tests/reference``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.flight_server.helpers import (
    Dataset,
    StreamSpec,
    assert_pass_equal,
    consume,
    expected_pass,
    start_server,
    write_dataset,
)
from tests.flight_server.test_batches import CONFIGS, INPUTS, SPECS, TARGETS
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec
from windpipe.services.contract.stats import ColumnStats, SplitStatsData
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.materialize.blocks import block_layouts

# one more cycling stream without a temperature sensor (a missing channel, SEMANTICS 5a)
FITTED_SPECS = [*SPECS, StreamSpec("cycling", "c3", 1, (30, 12), lacks=("temperature_c",))]


def _file_stats(ds: Dataset) -> SplitStatsData:
    """Statistics of every stream's values, read straight from the files (numpy)."""
    entries = []
    for protocol in ("cycling", "hppc"):
        for column in ("current_a", "voltage_v", "soc_pct", "temperature_c"):
            parts = [d[column] for s, d in enumerate(ds.data)
                     if ds.streams.protocols[int(ds.streams.protocol[s])] == protocol
                     and column in d]
            if not parts:
                continue
            v = np.concatenate(parts)
            v = v[np.isfinite(v)]
            p1, p50, p99 = np.quantile(v, [0.01, 0.5, 0.99])
            entries.append(ColumnStats(
                protocol=protocol, column=column, rows=v.size, count=v.size, nulls=0,
                non_finite=0, min=float(v.min()), max=float(v.max()), mean=float(v.mean()),
                std=float(v.std()), p1=float(p1), p50=float(p50), p99=float(p99)))
    return SplitStatsData(split_id="s-test", version_id="v-test", side="train", columns=None,
                      rows=0, stats=entries)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("fitted-ds"), FITTED_SPECS, fmt="mixed",
                         chunk_rows=16, seed=21)


def _scaling(ds: Dataset) -> tuple[ScalingSpec, ...]:
    stats = _file_stats(ds)
    return (
        ScalingSpec.from_stats(stats, "current_a", kind="standard",
                               protocol=["cycling", "hppc"]),
        ScalingSpec.from_stats(stats, "voltage_v", kind="robust", protocol="cycling"),
        ScalingSpec.from_stats(stats, "soc_pct", kind="minmax", protocol="hppc"),
        ScalingSpec.from_stats(stats, "temperature_c", kind="standard"),
    )


def _config(ds: Dataset, name: str) -> LoaderConfig:
    return LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=_scaling(ds), **CONFIGS[name])


@pytest.fixture(scope="module")
def server(dataset: Dataset) -> Any:
    plans = {name: dataset.plan(_config(dataset, name), plan_id=name) for name in CONFIGS}
    running = start_server(plans)
    yield running
    running.stop(grace_s=5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_standardized_values_reach_every_plan_shape(dataset: Dataset, server: Any,
                                                    name: str) -> None:
    config = _config(dataset, name)
    assert config.scaling_for("current_a").transform == "standard"  # type: ignore[union-attr]
    for world_size in (1, 2):
        total = 0
        for rank in range(world_size):
            got = consume(server.location, FlightCommand(name, epoch=1, rank=rank,
                                                         world_size=world_size))
            want = expected_pass(dataset, config, epoch=1, rank=rank, world_size=world_size)
            assert_pass_equal(got, want, dataset, config)
            total += len(got)
        assert total > 0


def test_a_standardized_input_is_x_minus_mean_over_std(dataset: Dataset, server: Any) -> None:
    """One lane checked without the reference: the first input channel of the first
    sequential batch is the file's current_a, standardized by hand."""
    spec = _config(dataset, "sequential").scaling_for("current_a")
    assert spec is not None
    assert spec.mean is not None
    assert spec.std is not None
    got = consume(server.location, FlightCommand("sequential"))[0]
    raw = dataset.data[0]["current_a"][:5]
    want = np.where(np.isfinite(raw), (raw - spec.mean) / spec.std, -2.0).astype(np.float32)
    np.testing.assert_allclose(got.inputs[0, :, 0], want, rtol=1e-6, atol=1e-6)


def test_a_refit_gets_new_tier_blocks(dataset: Dataset) -> None:
    config = _config(dataset, "shuffled")
    refit = config.model_copy(update={"scaling": (
        ScalingSpec(column="current_a", transform="standard",
                    mean=config.scaling[0].mean, std=float(config.scaling[0].std) * 1.001),
        *config.scaling[1:])})
    keys = {layout.protocol: layout.key for layout in block_layouts(dataset.plan(config))}
    again = {layout.protocol: layout.key for layout in block_layouts(dataset.plan(config))}
    other = {layout.protocol: layout.key for layout in block_layouts(dataset.plan(refit))}
    assert keys == again
    assert all(keys[p] != other[p] for p in keys)  # both protocols read current_a
