"""End to end: plans registered in the catalog (SQLite and PostgreSQL), read by the Flight
server from the database and over REST, stream the reference batches."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.flight_server.helpers import (
    Dataset,
    assert_pass_equal,
    consume,
    expected_pass,
    read_back,
)
from windpipe._serving import serve_flight
from windpipe.services.contract.configs import (
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.database import create_engine
from windpipe.services.settings import Settings

CONFIG = LoaderConfig(
    split="train",
    inputs={"cycling": ("current_a", "voltage_v", "temperature_c"),
            "hppc": ("current_a", "voltage_v"), "eis": ("freq_hz", "z_real_ohm")},
    targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",), "eis": ("z_imag_ohm",)},
    window_by_protocol={"eis": WindowConfig(batch_size=2, seq_len=8)},
    default_window=WindowConfig(batch_size=4, seq_len=16),
    strategy="shuffled", stateful_n_windows=2, seed=3,
    scaling=(ScalingSpec(column="freq_hz", input_min=0.01, input_max=1e4, transform="log1p"),
             ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2, clip=True)),
)


def _post(url: str, body: Any) -> dict[str, Any]:
    resp = httpx.post(url, json=body, timeout=60)
    assert resp.status_code in (200, 201), resp.text
    return dict(resp.json())


@pytest.mark.postgres
def test_plans_from_database_and_rest(catalog_server: str, database_url: str,
                                      synth_dataset: Any) -> None:
    root = synth_dataset.path
    version = _post(f"{catalog_server}/v1/datasets/synth/versions", {
        "root": root.resolve().as_uri(),
        "manifest": synth_dataset.manifest_path.relative_to(root).as_posix(),
    })
    split = _post(f"{catalog_server}/v1/versions/{version['id']}/splits",
                  ValidationConfig.sample(0.3, seed=2).model_dump(mode="json"))
    plan = _post(f"{catalog_server}/v1/splits/{split['id']}/plans",
                 CONFIG.planning_dict())
    plan_id = plan["id"]
    engine = create_engine(database_url)
    passes = []
    try:
        for source in ("database", "rest"):
            settings = Settings(
                flight_host="127.0.0.1", flight_port=0, database_url=database_url,
                catalog_url=catalog_server if source == "rest" else None,
            )
            running = serve_flight(
                settings, engine=engine if source == "database" else None
            )
            try:
                got = consume(running.location, FlightCommand(plan_id, epoch=1, rank=0,
                                                              world_size=2))
                ctx = running.server.plans.get(plan_id)
            finally:
                running.stop(grace_s=5)
            ds = Dataset(root=root, streams=ctx.streams, segments=ctx.segments)
            ds.data = read_back(ds)
            assert_pass_equal(got, expected_pass(ds, CONFIG, epoch=1, rank=0, world_size=2), ds)
            assert plan["n_batches"] > 0
            assert len(got) > 0
            passes.append(got)
    finally:
        engine.dispose()
    for a, b in zip(*passes, strict=True):
        assert a.batch.serialize().to_pybytes() == b.batch.serialize().to_pybytes()
