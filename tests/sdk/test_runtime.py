"""LoaderConfig runtime fields against a real deployment: full_in_mem warming, the
DataLoader convenience, and the bearer token on Flight calls."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest
import torch

import windpipe.sdk as sdk
from tests.flight_server.helpers import cache_stats
from tests.sdk.deployment import deployment
from windpipe.sdk import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig
from windpipe.sdk._state import ClientSettings, ClientState
from windpipe.sdk._torch import dataloader_options
from windpipe.services.contract.wire import ACTION_HEALTH

CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
)


def _key(batch: sdk.Batch) -> tuple[Any, ...]:
    return (batch.state.batch_idx, batch.inputs.numpy().tobytes(),
            batch.targets.numpy().tobytes(), batch.mask.numpy().tobytes())


def _plan(url: str, synth: Any, config: LoaderConfig = CONFIG, **kw: Any) -> Any:
    cat = Catalog(url, **kw)
    ver = cat.register("synth", root=synth.path.resolve().as_uri(), manifest="manifest.parquet")
    return cat, ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(config)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-runtime")
    # windowed passes read chunks here (auto_blocks off), so a warm visibly adds the split
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", n_flight=2,
                    endpoint_batches=3, auto_blocks=False) as d:
        cat, plan = _plan(d.url, synth_dataset)
        d.extra.update(cat=cat, plan=plan)
        yield d
        cat.close()


def test_full_in_mem_warms_every_location_first_with_progress(
    dep: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    plan = dep.extra["plan"]
    assert all(cache_stats(loc)["entries"] == 0 for loc in dep.locations)
    windowed = [_key(b) for b in plan.batches(epoch=0)]
    cold = [cache_stats(loc) for loc in dep.locations]
    in_mem = dataclasses.replace(plan, config=CONFIG.model_copy(
        update={"data_access": "full_in_mem"}))
    batches = in_mem.batches(epoch=0, progress=True)
    # warmed before the first batch is read: the split's blocks (every chunk of it, end to
    # end) resident everywhere, on top of what the windowed pass left
    warmed = [cache_stats(loc) for loc in dep.locations]
    added = [w["resident_bytes"] - c["resident_bytes"] for w, c in zip(warmed, cold, strict=True)]
    assert len(set(added)) == 1
    assert added[0] > 0
    assert all(w["entries"] > c["entries"] for w, c in zip(warmed, cold, strict=True))
    assert [_key(b) for b in batches] == windowed
    after = [cache_stats(loc) for loc in dep.locations]
    assert sum(a["misses"] for a in after) == sum(w["misses"] for w in warmed)
    err = capsys.readouterr().err
    assert f"warming {plan.id}" in err
    assert "100%" in err

    result = plan.warm(progress=False)
    assert set(result) == set(dep.locations)
    for loc in dep.locations:
        assert result[loc]["chunks"] > 0
        assert result[loc]["bytes"] == added[0]
        assert result[loc]["seconds"] >= 0.0
    # the override works on a windowed plan too, for the loader and the dataset
    assert [_key(b) for b in plan.loader(device="cpu", data_access="full_in_mem",
                                         progress=False)] == windowed
    with pytest.raises(sdk.InvalidConfig, match="data_access"):
        plan.batches(data_access="everything")


def test_full_in_mem_larger_than_the_cache_budget(tmp_path: Path, synth_dataset: Any) -> None:
    budget = 16 << 10
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state",
                    cache_bytes=budget) as d:
        cat, plan = _plan(d.url, synth_dataset,
                          CONFIG.model_copy(update={"data_access": "full_in_mem"}))
        with pytest.raises(sdk.ResourceExhausted,
                           match=rf"needs \d+ bytes .* cache budget is {budget} bytes") as exc:
            plan.batches(epoch=0, progress=False)
        assert exc.value.details["budget_bytes"] == budget
        assert exc.value.details["needed_bytes"] > budget
        with pytest.raises(sdk.ResourceExhausted):
            plan.torch_dataset(progress=False)
        cat.close()


def test_dataloader_applies_the_runtime_fields(dep: Any) -> None:
    plan = dep.extra["plan"]
    serial = plan.dataloader(epoch=1)
    assert serial.num_workers == 0
    assert serial.batch_size is None
    assert serial.pin_memory is torch.cuda.is_available()
    want = [_key(b) for b in serial]
    assert len(want) > 4
    workers = dataclasses.replace(plan, config=plan.config.model_copy(
        update={"num_workers": 2, "prefetch_factor": 3}))
    loader = workers.dataloader(epoch=1)
    assert loader.num_workers == 2
    assert loader.prefetch_factor == 3
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert [_key(b) for b in loader] == want
    assert isinstance(loader.dataset, sdk.WindpipeIterableDataset)

    opts = dataloader_options(plan.config, num_workers=1, persistent_workers=True,
                              multiprocessing_context="forkserver", timeout=7)
    assert opts == {"batch_size": None, "num_workers": 1, "pin_memory": torch.cuda.is_available(),
                    "prefetch_factor": plan.config.prefetch_factor,
                    "persistent_workers": True, "multiprocessing_context": "forkserver",
                    "timeout": 7}
    with pytest.raises(sdk.InvalidConfig, match="batch_size=None"):
        plan.dataloader(batch_size=8)
    with pytest.raises(sdk.InvalidConfig, match="num_workers > 0"):
        plan.dataloader(persistent_workers=True)


def test_flight_calls_carry_the_token(tmp_path: Path, synth_dataset: Any) -> None:
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state",
                    token="s3cret") as d:
        cat, plan = _plan(d.url, synth_dataset, token="s3cret")
        good = [_key(b) for b in plan.batches(epoch=0)]
        assert good
        assert set(plan.warm(progress=False)) == set(d.locations)
        bad = ClientState(ClientSettings(url=d.url, token="wrong",
                                         flight_locations=tuple(d.locations)))
        refused = dataclasses.replace(plan, _state=bad)
        with pytest.raises(sdk.Unauthenticated, match="bearer token"):
            list(refused.batches(epoch=0))
        with pytest.raises(sdk.Unauthenticated, match="bearer token"):
            refused.warm(progress=False)
        anonymous = dataclasses.replace(plan, _state=ClientState(
            ClientSettings(url=d.url, flight_locations=tuple(d.locations))))
        with pytest.raises(sdk.Unauthenticated, match="requires a bearer token"):
            list(anonymous.batches(epoch=0))
        client = fl.connect(d.locations[0])
        assert list(client.do_action(fl.Action(ACTION_HEALTH, b"")))  # probes need no token
        client.close()
        bad.close()
        cat.close()
