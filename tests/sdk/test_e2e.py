"""The SDK's whole surface, end to end against the real catalog and Flight servers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import torch

import windpipe.sdk as sdk
from tests.fixtures.servers import free_ports
from tests.sdk.deployment import deployment
from windpipe._serving import serve_flight
from windpipe.sdk import (
    Catalog,
    LoaderConfig,
    LoaderOptions,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.sdk._sources import FlightSource
from windpipe.services.contract.wire import FlightCommand

CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
)


def _key(batch: sdk.Batch) -> tuple[Any, ...]:
    return (batch.state.batch_idx, batch.state.global_batch, batch.inputs.numpy().tobytes(),
            batch.targets.numpy().tobytes(), batch.mask.numpy().tobytes())


@pytest.mark.postgres
def test_surface_as_written(database_url: str, tmp_path: Path, synth_dataset: Any) -> None:
    root = synth_dataset.path.resolve().as_uri()
    with deployment(database_url, tmp_path / "state") as dep:
        cat = Catalog(dep.url)
        ver = cat.register("demo", root=root, manifest="manifest.parquet")
        assert ver.created
        again = cat.register("demo", root=root, manifest="manifest.parquet")
        assert again.id == ver.id
        assert not again.created
        assert [d.name for d in cat.datasets()] == ["demo"]
        assert [v.id for v in cat.versions("demo")] == [ver.id]
        assert cat.version(ver.id).raw["n_rows"] == synth_dataset.n_rows
        frame = ver.index().frame
        assert isinstance(frame, pl.DataFrame)
        assert frame.height == ver.raw["n_manifest_rows"]
        split = ver.split(ValidationConfig.sample(fraction=0.2, seed=69))
        sframe = split.index().frame
        assert set(sframe.get_column("split").unique()) <= {"train", "val"}
        val = split.index().filter_split("val").frame
        assert val.height == int((sframe.get_column("split") == "val").sum())
        with pytest.raises(sdk.InvalidRequest, match="no 'split' column"):
            ver.index().filter_split("val")
        plan = split.plan(CONFIG)
        assert split.plan(CONFIG).id == plan.id
        report = plan.report()
        assert "PlanReport" in repr(report)
        assert "<table>" in report._repr_html_()
        assert "DatasetVersion" in repr(ver)
        assert "<table>" in split._repr_html_()
        assert "<table>" in plan._repr_html_()
        assert plan.id in repr(plan)
        batches = list(plan.batches(epoch=0, rank=0, world_size=1, start_batch=0))
        assert [len(batches)] == report["batches_per_rank"]
        assert len(batches) == report["batches"] == plan.n_batches
        for batch in batches:
            assert batch.inputs.shape[1:] == (32, 2)
            assert batch.targets.shape[2] == 1
            assert batch.mask.dtype == torch.bool
            assert isinstance(batch.all_valid, bool)
            assert batch.state.split == "train"
            assert batch.is_protocol("cycling")
        loader = plan.loader(device="auto", epoch=0)
        got = list(loader)
        assert [_key(b) for b in got] == [_key(b) for b in batches]
        assert loader.stats is not None
        assert loader.stats.batches == len(batches)
        assert loader.stats.tokens == sum(b.tokens for b in batches)
        cat.close()


def test_the_whole_workflow_as_one_block_line_for_line(tmp_path: Path, synth_dataset: Any) -> None:
    """The whole workflow (register, list, index, split, plan, report, batches, loader) as
    a user writes it in one block, line for line (only the URL and the root differ)."""
    root = synth_dataset.path.resolve().as_uri()
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state") as dep:
        from windpipe.sdk import (  # noqa: PLC0415 - the block's own import line
            Catalog,
            LoaderConfig,
            ScalingSpec,
            ValidationConfig,
            WindowConfig,
        )

        cat = Catalog(dep.url)                     # token=... optional
        ver = cat.register("demo", root=root, manifest="manifest.parquet")  # idempotent
        cat.datasets(); cat.versions("demo")  # noqa: E702
        frame = ver.index().frame                  # polars.DataFrame; .filter_split("val")
        split = ver.split(ValidationConfig.sample(fraction=0.2, seed=69))
        split_frame = split.index().frame          # with a "split" column
        plan = split.plan(LoaderConfig(
            split="train", default_window=WindowConfig(batch_size=8, seq_len=256),
            inputs={"cycling": ("current_a", "temperature_c")},
            targets={"cycling": ("voltage_v",)},
            scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
        ))
        report = plan.report()
        seen = []
        for batch in plan.batches(epoch=0, rank=0, world_size=1, start_batch=0):
            seen.append((batch.inputs, batch.targets, batch.mask, batch.all_valid, batch.state))
        loader = plan.loader(device="auto", epoch=0)  # CUDA + pinned prefetch when available
        loaded = list(loader)

        assert cat.register("demo", root=root, manifest="manifest.parquet").id == ver.id
        assert [d.name for d in cat.datasets()] == ["demo"]
        assert [v.id for v in cat.versions("demo")] == [ver.id]
        assert isinstance(frame, pl.DataFrame)
        assert frame.height == ver.raw["n_manifest_rows"] > 0
        assert "split" in split_frame.columns
        val = split.index().filter_split("val").frame
        assert val.height == int((split_frame.get_column("split") == "val").sum()) > 0
        assert set(val.get_column("split").unique()) == {"val"}
        assert report["batches"] == len(seen) > 0
        for inputs, targets, mask, all_valid, state in seen:
            assert inputs.dtype == targets.dtype == torch.float32
            assert inputs.shape[0] <= 8
            assert inputs.shape[1:] == (256, 2)
            assert targets.shape[1:] == (256, 1)
            assert mask.shape == inputs.shape[:2]
            assert mask.dtype == torch.bool
            assert all_valid == bool(mask.all() and not targets.isnan().any())
            assert isinstance(state, sdk.BatchState)
            assert state.split == "train"
        assert [state.batch_idx for *_, state in seen] == list(range(len(seen)))
        want_device = "cuda" if torch.cuda.is_available() else "cpu"
        assert [b.inputs.device.type for b in loaded] == [want_device] * len(seen)
        assert [b.state.batch_idx for b in loaded] == list(range(len(seen)))
        for b, (inputs, *_rest) in zip(loaded, seen, strict=True):
            assert torch.equal(b.inputs.cpu(), inputs)
        cat.close()


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-e2e")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", n_flight=2,
                    endpoint_batches=3) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.3, seed=1))
        d.extra.update(cat=cat, version=ver, split=split, plan=split.plan(CONFIG))
        yield d
        cat.close()


def test_loader_equals_batches_and_resumption(dep: Any) -> None:
    plan = dep.extra["plan"]
    full = list(plan.batches(epoch=1))
    assert len(full) > 6
    assert [_key(b) for b in plan.loader(device="cpu", epoch=1, prefetch_factor=2)] == [
        _key(b) for b in full
    ]
    tail = list(plan.batches(epoch=1, start_batch=5))
    assert [_key(b) for b in tail] == [_key(b) for b in full[5:]]
    ds = plan.torch_dataset(epoch=1)
    seen = []
    for batch in torch.utils.data.DataLoader(ds, batch_size=None):
        seen.append(_key(batch))
        if len(seen) == 3:
            break
    state = ds.state_dict()
    assert state == {"plan_id": plan.id, "epoch": 1, "batch": 3}
    resumed = plan.torch_dataset()
    resumed.load_state_dict(state)
    assert seen + [_key(b) for b in resumed] == [_key(b) for b in full]


def test_a_call_s_options_override_the_config_and_nothing_else(dep: Any) -> None:
    base = dep.extra["plan"]
    plan = dataclasses.replace(base, config=base.config.merged(
        num_workers=2, prefetch_factor=3, non_blocking=True, device="cpu"))
    # prefetch_factor is per worker everywhere: plan.loader holds it times the workers
    assert plan.loader(progress=False).read_ahead == 6
    assert plan.loader(prefetch_factor=1, progress=False).read_ahead == 2
    explicit = plan.loader(num_workers=0, non_blocking=False, progress=False)
    assert (explicit.read_ahead, explicit.non_blocking) == (3, False)  # 0 and False win
    assert plan.dataloader().prefetch_factor == 3  # torch's DataLoader, per worker
    assert plan.dataloader(num_workers=0).num_workers == 0
    with pytest.raises(sdk.InvalidConfig, match="unknown loader option 'prefetch'"):
        plan.loader(prefetch=2)  # type: ignore[call-arg]
    with pytest.raises(sdk.InvalidConfig, match="prefetch_factor"):
        plan.loader(prefetch_factor=0)
    with pytest.raises(sdk.InvalidConfig,
                       match=r"plan\.batches does not use the option 'device'"):
        plan.batches(device="cpu")
    with pytest.raises(sdk.InvalidConfig, match=r"'persistent_workers': it steers "
                                                r"plan\.dataloader"):
        plan.loader(persistent_workers=True)
    with pytest.raises(sdk.InvalidConfig, match=r"plan\.dataloader does not use the option "
                                                "'prefetch_to_device'"):
        plan.dataloader(prefetch_to_device=True)
    with pytest.raises(sdk.InvalidConfig, match="did you mean 'num_workers'"):
        plan.dataloader(num_worker=1)
    with pytest.raises(sdk.InvalidConfig, match="epoch must be an int"):
        plan.loader("cpu")  # type: ignore[arg-type]


def test_a_plan_spec_plans_the_same_plan_with_default_options(dep: Any) -> None:
    plan = dep.extra["plan"]
    again = dep.extra["split"].plan(CONFIG.plan_spec())
    assert again.id == plan.id
    assert not again.created
    assert isinstance(again.config, LoaderConfig)
    assert again.config.options() == LoaderOptions()
    assert again.config.plan_spec() == CONFIG.plan_spec()


def test_ranks_disjoint_with_equal_counts(dep: Any) -> None:
    plan = dep.extra["plan"]
    world = 3
    passes = [list(plan.batches(epoch=0, rank=r, world_size=world)) for r in range(world)]
    counts = {len(p) for p in passes}
    assert len(counts) == 1
    assert counts.pop() > 0
    globals_ = [b.state.global_batch for p in passes for b in p]
    assert len(globals_) == len(set(globals_))
    trimmed = plan.report(world_size=world)["dropped"]["distributed_trimmed_batches"]
    assert len(globals_) + trimmed == len(list(plan.batches(epoch=0)))


def test_failover_when_a_flight_server_dies_mid_epoch(dep: Any, tmp_path: Path) -> None:
    plan = dep.extra["plan"]
    reference = [_key(b) for b in plan.batches(epoch=2)]
    assert len(reference) > 6
    # a fresh pair of servers so the module's deployment stays intact

    ports = free_ports(2)
    locs = [f"grpc://127.0.0.1:{p}" for p in ports]
    settings = dep.settings.model_copy(update={"flight_locations": tuple(locs),
                                               "endpoint_batches": 3})
    servers = [serve_flight(settings, port=p) for p in ports]
    try:
        cat = Catalog(dep.url, flight_locations=locs)
        stream = cat.flight()
        info, _ = stream.flight_info(FlightCommand(plan.id, epoch=2))
        first_home = info.endpoints[0].locations[0].uri.decode()
        victim = servers[locs.index(first_home)]
        got = []
        for batch in cat.plan(plan.id).batches(epoch=2):
            got.append(_key(batch))
            if len(got) == 2:
                victim.stop(grace_s=2.0)
        assert got == reference
        assert stream.counters.failovers >= 1
        cat.close()
    finally:
        for s in servers:
            s.stop(grace_s=2.0)


def test_errors_surface_as_the_tree(dep: Any, tmp_path: Path, synth_dataset: Any) -> None:
    cat: Catalog = dep.extra["cat"]
    with pytest.raises(sdk.NotFound):
        cat.version("v-does-not-exist")
    with pytest.raises(sdk.NotFound):
        cat.versions("no-such-dataset")
    with pytest.raises(sdk.InvalidManifest) as bad:
        cat.register("broken", root=synth_dataset.path.resolve().as_uri(),
                     rows=[{"set_id": "s", "cell_id": "c", "cidx": 0, "protocol": "cycling",
                            "segment_path": "missing/segment.parquet"}])
    assert "missing/segment.parquet" in str(bad.value.details)
    split = dep.extra["split"]
    with pytest.raises(sdk.InvalidConfig, match="no_such_column"):
        split.plan(LoaderConfig(inputs={"cycling": ("no_such_column",)},
                                targets={"cycling": ("voltage_v",)}))
    with pytest.raises(sdk.NotFound):
        list(FlightSource("p-unknown", cat.flight).batches(epoch=0, rank=0, world_size=1,
                                                           start_batch=0))
    plan = dep.extra["plan"]
    with pytest.raises(sdk.InvalidRequest, match="rank 2"):
        list(plan.batches(rank=2, world_size=2))
    with pytest.raises(sdk.InvalidRequest, match=">= 0"):
        list(plan.batches(epoch=-1))
    if not torch.cuda.is_available():
        with pytest.raises(sdk.InvalidConfig, match="CUDA is not available"):
            dep.extra["plan"].loader(device="cuda")
    with Catalog("http://127.0.0.1:9", retries=1) as down, \
            pytest.raises(sdk.Unavailable, match="cannot reach the catalog"):
        down.datasets()
    with Catalog(dep.url, flight_locations=["grpc://127.0.0.1:9"]) as nowhere, \
            pytest.raises(sdk.Unavailable):
        list(nowhere.plan(dep.extra["plan"].id).batches())


def test_token_is_required_and_sent(tmp_path: Path, synth_dataset: Any) -> None:
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state",
                    token="s3cret") as d:
        with Catalog(d.url) as anonymous, \
                pytest.raises(sdk.Unauthenticated, match="bearer token"):
            anonymous.datasets()
        with Catalog(d.url, token="s3cret") as cat:
            assert cat.datasets() == []
