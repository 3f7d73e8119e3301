"""A Flight server streams the plan the catalog stored, and never plans again.

Plans are made over REST (SQLite and PostgreSQL). Then the version's index is taken
away under the plans (its manifest rows, segments and split assignments are deleted
from the database) and the planner's builders are wrapped with call counters. Flight
servers reading plans from the database and over REST must still stream every batch
of the independent reference, while ``build_streams`` is never called and the
schedule strategies run only for the per-epoch order of the shuffled plan.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import polars as pl
import pytest
import sqlalchemy as sa

import windpipe.catalog.plans
import windpipe.services.planning.streams
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
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.strategies import STRATEGIES
from windpipe.services.settings import Settings
from windpipe.services.synth import SynthResult

_IO = {"inputs": {"cycling": ("current_a", "voltage_v"), "hppc": ("voltage_v",)},
       "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v",)}}
PLANS: dict[str, LoaderConfig] = {
    "plain": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=32), **_IO),
    "sequential": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=16),
                               stateful_n_windows=2, **_IO),
    "shuffled": LoaderConfig(
        default_window=WindowConfig(batch_size=4, seq_len=24), strategy="shuffled", seed=5,
        scaling=(ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2),), **_IO),
}


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def _counting(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return wrapped


@pytest.mark.postgres
def test_flight_streams_stored_plans_without_their_index(
    catalog_server: str, database_url: str, synth_dataset: SynthResult,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with httpx.Client(base_url=catalog_server, timeout=120) as client:
        version = _post(client, "/v1/datasets/synth/versions", {
            "root": synth_dataset.path.resolve().as_uri(), "manifest": "manifest.parquet"})
        split = _post(client, f"/v1/versions/{version['id']}/splits",
                      ValidationConfig.sample(0.3, seed=4).model_dump(mode="json"))
        ids = {name: _post(client, f"/v1/splits/{split['id']}/plans",
                           cfg.planning_dict())["id"] for name, cfg in PLANS.items()}
        index = pl.read_ipc_stream(client.get(f"/v1/splits/{split['id']}/index",
                                              params={"format": "arrow"}).content)
        artifact = PlanArtifact.from_ipc(client.get(f"/v1/plans/{ids['plain']}/artifact").content)
    # the stored streams hold the split's rows of the plan's protocols, in index order
    train = index.filter(pl.col("split") == "train", pl.col("protocol").is_in(["cycling", "hppc"]))
    assert int(artifact.streams.n_rows.sum()) == int(train["row_count"].sum()) > 0
    assert list(artifact.streams.group_keys) == [
        tuple(r) for r in train.select("set_id", "cell_id", "cidx", "protocol").iter_rows()]

    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:  # the index the plans were made from is gone
            for table in ("split_assignments", "segments", "manifest_rows"):
                conn.execute(sa.text(f"DELETE FROM {table}"))
        calls: Counter[str] = Counter()
        monkeypatch.setattr(windpipe.services.planning.streams, "build_streams", _counting(
            calls, "build_streams", windpipe.services.planning.streams.build_streams))
        monkeypatch.setattr(windpipe.catalog.plans, "build_streams", _counting(
            calls, "build_streams", windpipe.catalog.plans.build_streams))
        for name, strategy in list(STRATEGIES.items()):
            monkeypatch.setitem(STRATEGIES, name, dataclasses.replace(
                strategy, schedule=_counting(calls, name, strategy.schedule)))

        for source in ("database", "rest"):
            settings = Settings(flight_host="127.0.0.1", flight_port=0,
                                database_url=database_url,
                                catalog_url=catalog_server if source == "rest" else None)
            running = serve_flight(settings,
                                   engine=engine if source == "database" else None)
            try:
                for name, cfg in PLANS.items():
                    for epoch in (0, 1):
                        got = consume(running.location, FlightCommand(ids[name], epoch=epoch))
                        ctx = running.server.plans.get(ids[name])
                        ds = Dataset(root=synth_dataset.path, streams=ctx.streams,
                                     segments=ctx.segments)
                        ds.data = read_back(ds)
                        want = expected_pass(ds, cfg, epoch=epoch, rank=0, world_size=1)
                        assert len(got) > 0
                        assert_pass_equal(got, want, ds)
            finally:
                running.stop(grace_s=5)
    finally:
        engine.dispose()
    assert calls["build_streams"] == 0
    assert calls["plain"] == calls["sequential"] == 0  # their schedules were stored
    assert calls["shuffled"] == 4  # one per epoch (0, 1) per server: the per-epoch order
