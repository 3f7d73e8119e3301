"""Embedded mode: ``windpipe.embedded(data_dir)`` runs the catalog in this
process with no port and no Flight server, and its batches equal the served mode's,
byte for byte, for every plan shape the tests know (``bench.identity.shapes``)."""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

import windpipe
from bench.identity import _digest, shapes
from tests.fixtures.servers import embedded_services
from windpipe._embedded import embedded as embedded_function
from windpipe.sdk import (
    Catalog,
    Conflict,
    InvalidConfig,
    LoaderConfig,
    Plan,
    Unavailable,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.synth import write_synthetic_dataset

ONE = {"inputs": {"cycling": ("current_a", "temperature_c")},
       "targets": {"cycling": ("voltage_v",)}}
PASSES = [(epoch, rank, world) for epoch in (0, 1) for world in (1, 2) for rank in range(world)]


def _listening() -> set[Any]:
    return {c.laddr for c in psutil.Process().net_connections(kind="all")
            if c.status == psutil.CONN_LISTEN}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of parquet (and zarr) segments as ``windpipe synth`` writes them: the
    identity benchmark's dataset (HPPC and EIS on some cycles, a cell without a
    temperature sensor)."""
    out = tmp_path_factory.mktemp("embedded-data") / "data"
    write_synthetic_dataset(out, cells=4, cycles=4, rows_per_cycle=400, hppc_every=2,
                            eis_every=2, missing_channel="temperature_c", missing_cells=1)
    return out


def _split(cat: Catalog, data: Path) -> Any:
    with warnings.catch_warnings():  # the synthetic nulls are reported: not the subject here
        warnings.simplefilter("ignore", UserWarning)
        ver = cat.register("identity", root=data.resolve().as_uri(),
                           manifest="manifest.parquet")
    return ver.split(ValidationConfig.sample(fraction=0.25, seed=3))


@pytest.fixture(scope="module")
def embedded_split(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[Any]:
    cat = windpipe.embedded(tmp_path_factory.mktemp("embedded-state"))
    yield _split(cat, data)
    cat.close()


def test_the_public_name_is_the_function() -> None:
    assert windpipe.embedded is embedded_function
    assert "embedded" in windpipe.__all__


def test_embedded_reaches_a_training_step_with_no_server(tmp_path: Path, data: Path) -> None:
    listening, threads = _listening(), {t.name for t in threading.enumerate()}
    with windpipe.embedded(tmp_path / "state") as cat:
        assert repr(cat) == f"Catalog('embedded:{(tmp_path / 'state').resolve()}')"
        split = _split(cat, data)
        plan = split.plan(LoaderConfig(**ONE, default_window=WindowConfig(batch_size=4,
                                                                          seq_len=64)))
        assert plan.transport() == "local"  # built in this process
        model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        before = [p.detach().clone() for p in model.parameters()]
        steps = 0
        for batch in plan.loader(device="cpu", progress=False):
            valid = batch.target_valid
            if not valid.any():
                continue
            loss = torch.nn.functional.mse_loss(model(batch.inputs)[valid],
                                                batch.targets[valid])
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert math.isfinite(loss.item())
            steps += 1
        assert steps > 0
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(),
                                                           strict=True))
        # no port was opened, no server thread started, and there is no Flight server
        assert _listening() - listening == set()
        started = {t.name for t in threading.enumerate()} - threads
        assert not [n for n in started if "uvicorn" in n.lower() or "flight" in n.lower()]
        with pytest.raises(Unavailable, match="runs in this process"):
            cat.flight()
    assert (tmp_path / "state" / "catalog.db").is_file()  # SQLite under the data dir


@pytest.fixture(scope="module")
def served_split(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[Any]:
    with embedded_services(tmp_path_factory.mktemp("served-state")) as url:
        cat = Catalog(url)
        yield _split(cat, data)
        cat.close()


def _plans(served: Any, embedded: Any, name: str) -> tuple[Plan, Plan]:
    config = LoaderConfig(**shapes()[name])
    a, b = served.plan(config), embedded.plan(config)
    assert a.id == b.id  # the same content: the same version, split and plan
    return a, b


@pytest.mark.parametrize("name", list(shapes()))
def test_embedded_batches_equal_served_ones(served_split: Any, embedded_split: Any,
                                            name: str) -> None:
    served, embedded = _plans(served_split, embedded_split, name)
    assert served.report(world_size=2).raw == embedded.report(world_size=2).raw
    compared = 0
    for epoch, rank, world in PASSES:
        kw = {"epoch": epoch, "rank": rank, "world_size": world, "progress": False}
        a = [_digest(x) for x in served.batches(transport="flight", **kw)]
        b = [_digest(x) for x in embedded.batches(**kw)]
        assert a == b, (name, epoch, rank, world)
        compared += len(a)
    assert compared > 0


def test_embedded_resumes_and_holds_the_split_whole_alike(served_split: Any,
                                                          embedded_split: Any) -> None:
    served, embedded = _plans(served_split, embedded_split, "two_protocols_shuffled")
    whole = [_digest(x) for x in served.batches(epoch=1, transport="flight")]
    assert [_digest(x) for x in embedded.batches(epoch=1, start_batch=3)] == whole[3:]
    [(where, warmed)] = embedded.warm(progress=False).items()
    assert where.startswith("embedded:")  # this process's cache, not a Flight server's
    assert warmed["bytes"] > 0
    assert [_digest(x) for x in embedded.batches(epoch=1, data_access="full_in_mem",
                                                 progress=False)] == whole


def test_embedded_has_no_flight_transport_and_refuses_retired_plans(
        embedded_split: Any) -> None:
    plan = embedded_split.plan(LoaderConfig(**ONE, default_window=WindowConfig(
        batch_size=2, seq_len=16), seed=11))
    with pytest.raises(InvalidConfig, match="transport='flight' needs a Flight server"):
        plan.batches(transport="flight")
    plan.retire()
    with pytest.raises(Conflict):
        next(iter(plan.batches()))


def _loop_threads() -> int:
    return sum(t.name == "windpipe-embedded" for t in threading.enumerate())


def test_closing_an_embedded_catalog_ends_its_app(tmp_path: Path) -> None:
    before = _loop_threads()
    cat = windpipe.embedded(tmp_path / "state")
    assert cat.datasets() == []
    assert _loop_threads() == before + 1
    cat.close()
    assert _loop_threads() == before


@pytest.mark.slow
def test_spawned_dataloader_workers_open_their_own_embedded_catalog(
        embedded_split: Any) -> None:
    plan = embedded_split.plan(LoaderConfig(**shapes()["shuffled"]))
    alone = [_digest(b) for b in plan.batches(epoch=0)]
    loader = plan.dataloader(num_workers=1, multiprocessing_context="spawn", progress=False)
    assert [_digest(b) for b in loader] == alone
