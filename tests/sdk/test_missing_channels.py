"""A version with a cell lacking temperature registers, plans and streams: ``has_channel``
marks that cell's lanes, its temperature inputs are absent, the same-host and Flight
paths give the same bytes, and a plan whose streams all lack a column is a 422."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.sdk.deployment import deployment
from windpipe.sdk import (
    Catalog,
    InvalidConfig,
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.synth import write_synthetic_dataset

LACKING = "cell_002"  # the last of three cells has no temperature sensor
CONFIG = LoaderConfig(
    inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a", "temperature_c")},
    targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
    default_window=WindowConfig(batch_size=4, seq_len=16), strategy="shuffled", seed=3,
    scaling=(ScalingSpec(column="current_a", input_min=-5.0, input_max=5.0),
             ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0),
             ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.3)),
)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-missing")
    data = write_synthetic_dataset(tmp / "data", cells=3, cycles=3, rows_per_cycle=120,
                                   seed=5, missing_channel="temperature_c", missing_cells=1,
                                   hppc_every=2)
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", tier_bytes=64 << 20) as d:
        cat = Catalog(d.url)
        d.extra.update(cat=cat, ver=cat.register("lacking", root=data.path.resolve().as_uri(),
                                                 manifest="manifest.parquet"))
        yield d
        cat.close()


def test_schema_records_the_rows_lacking_temperature(dep: Any) -> None:
    schema = dep.extra["ver"].raw["schema"]
    temp = next(c for c in schema["cycling"] if c["name"] == "temperature_c")
    want = sorted(manifest_row_id("set_00", LACKING, k, "cycling") for k in range(3))
    assert temp["missing"] == want
    assert all("missing" not in c for c in schema["cycling"] if c["name"] != "temperature_c")


def test_lanes_of_the_lacking_cell_have_no_temperature(dep: Any) -> None:
    split = dep.extra["ver"].split(ValidationConfig.sample(fraction=0.2, seed=1))
    plan = split.plan(CONFIG)
    assert plan.transport() == "local"
    local = list(plan.batches(epoch=1, transport="local"))
    flight = list(plan.batches(epoch=1, transport="flight"))
    assert len(local) == len(flight) > 0
    seen = {True: 0, False: 0}
    for a, b in zip(local, flight, strict=True):
        for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask),
                     (a.has_channel, b.has_channel)):
            assert x.numpy().tobytes() == y.numpy().tobytes()
        assert a.channels == ("current_a", "temperature_c", "voltage_v")
        assert a.state == b.state
        for lane, key in enumerate(a.state.group_keys):
            lacking = key[1] == LACKING
            seen[lacking] += 1
            assert a.has_channel[lane].tolist() == [True, not lacking, True]
            assert a.input_has_channel()[lane].tolist() == [True, not lacking]
            assert a.target_has_channel()[lane].tolist() == [True]
            if lacking:
                assert bool((a.inputs[lane, :, 1] == -2.0).all())
                assert a.state.window_offsets[lane] < 0 or bool(a.mask[lane, 0])
    assert seen[True] > 0
    assert seen[False] > 0


def test_a_column_no_stream_of_the_split_has_is_refused(dep: Any) -> None:
    ver = dep.extra["ver"]
    others = [{"cell_id": c} for c in ("cell_000", "cell_001")]
    split = ver.split(ValidationConfig.provide(others))  # train: only the lacking cell
    with pytest.raises(InvalidConfig, match=r"temperature_c.*no stream of 'cycling'"):
        split.plan(CONFIG)
    plan = split.plan(CONFIG.model_copy(update={
        "inputs": {"cycling": ("current_a",), "hppc": ("current_a",)},
        "scaling": CONFIG.scaling[0::2]}))
    batch = next(iter(plan.batches(transport="flight")))
    assert batch.has_channel.all()


def test_a_one_layer_model_trains_through_the_dataloader(dep: Any) -> None:
    """``plan.dataloader()`` carries ``has_channel`` (workers included) and a per-channel
    loss mask trains a 1-layer model on a version with a cell lacking temperature."""
    split = dep.extra["ver"].split(ValidationConfig.sample(fraction=0.2, seed=1))
    plan = split.plan(CONFIG)
    serial = [(b.has_channel.clone(), b.inputs.clone()) for b in plan.dataloader(epoch=1)]
    workers = dataclasses.replace(plan, config=plan.config.model_copy(
        update={"num_workers": 1}))
    spawned = [(b.has_channel, b.inputs)
               for b in workers.dataloader(epoch=1, transport="flight")]
    assert len(spawned) == len(serial) > 0
    for (h1, x1), (h2, x2) in zip(serial, spawned, strict=True):
        assert torch.equal(h1, h2)
        assert torch.equal(x1, x2)
    assert any(not bool(h.all()) for h, _ in serial)

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for epoch in range(3):
        for batch in plan.dataloader(epoch=epoch):
            x = torch.where(batch.input_has_channel()[:, None, :], batch.inputs,
                            torch.zeros_like(batch.inputs))
            keep = batch.mask[:, :, None] & batch.target_has_channel()[:, None, :]
            keep &= torch.isfinite(batch.targets)
            err = (model(x) - torch.nan_to_num(batch.targets)) ** 2
            loss = (err * keep).sum() / keep.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    assert all(map(math.isfinite, losses))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first


def test_synth_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing_channel"):
        write_synthetic_dataset(tmp_path, missing_channel="nope", missing_cells=1)
    with pytest.raises(ValueError, match="hppc_every"):
        write_synthetic_dataset(tmp_path, hppc_every=0)
