"""The typed answers over real HTTP, on SQLite and PostgreSQL: ``GET /openapi.json`` names the
fields of the plan report, the schedule items, the Flight cache counters and the configs
of splits and plans, and each answer is the JSON the catalog stored (a stored report of
an older catalog, with a key missing or one more, still loads)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from tests.catalog.api_support import write_small_dataset
from windpipe.catalog.models import PlanRow, SplitRow
from windpipe.services.contract.configs import PlanSpec, ValidationConfig
from windpipe.services.contract.reports import CacheCounters, PlanReportData, ScheduleBatch
from windpipe.services.database import create_engine

PLAN = {
    "default_window": {"batch_size": 2, "seq_len": 8},
    "inputs": {"cycling": ["voltage_v", "current_a"]}, "targets": {"cycling": ["voltage_v"]},
}
SPLIT = {"strategy": "merge", "fraction": 0.5, "seed": 7,
         "provided": [{"chemistry": "lfp", "cidx": 1}, {"cell_id": "cell0"}]}


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


def _answer(spec: dict[str, Any], path: str, method: str = "get") -> dict[str, Any]:
    """The component schema of the 200 answer of ``method path``."""
    content = spec["paths"][path][method]["responses"]["200"]["content"]
    return _component(spec, content["application/json"]["schema"])


def _component(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in schema:  # X | None
        schema = next(s for s in schema["anyOf"] if "$ref" in s)
    name = schema["$ref"].rsplit("/", 1)[-1]
    found: dict[str, Any] = spec["components"]["schemas"][name]
    return found


def test_openapi_documents_the_typed_answers(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    report = _answer(spec, "/v1/plans/{plan_id}/report")
    assert report["title"] == "PlanReportData"
    assert {"batches", "tokens", "cache_working_set_bytes", "batches_per_rank", "dropped",
            "protocols", "aligned"} <= set(report["properties"])
    assert set(report["properties"]) == set(PlanReportData.model_fields)
    assert report["properties"]["batches"]["type"] == "integer"
    dropped = _component(spec, report["properties"]["dropped"])
    assert "distributed_trimmed_batches" in dropped["properties"]
    per_protocol = _component(spec, report["properties"]["protocols"]["additionalProperties"])
    assert {"bytes_per_full_batch", "real_tokens"} <= set(per_protocol["properties"])

    page = _answer(spec, "/v1/plans/{plan_id}/schedule")
    item = _component(spec, page["properties"]["items"]["items"])
    assert set(item["properties"]) == set(ScheduleBatch.model_fields)
    lane = _component(spec, item["properties"]["lanes"]["items"])
    assert set(lane["properties"]) == {"stream_idx", "offset", "protocol"}

    servers = _answer(spec, "/v1/flight/stats")["properties"]["servers"]["items"]
    counters = _component(spec, _component(spec, servers)["properties"]["stats"])
    assert set(counters["properties"]) == set(CacheCounters.model_fields)
    assert {"hits", "misses", "resident_bytes", "budget_bytes"} <= set(counters["properties"])

    plan_config = _answer(spec, "/v1/plans/{plan_id}")["properties"]["config"]
    assert _component(spec, plan_config)["title"] == "PlanSpec"
    split_config = _answer(spec, "/v1/splits/{split_id}")["properties"]["config"]
    assert _component(spec, split_config)["title"] == "ValidationConfig"


def _stored(database_url: str, split_id: str, plan_id: str) -> tuple[SplitRow, PlanRow]:
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            split, plan = session.get(SplitRow, split_id), session.get(PlanRow, plan_id)
            assert split is not None
            assert plan is not None
            session.expunge_all()
            return split, plan
    finally:
        engine.dispose()


def _store_report(database_url: str, plan_id: str, report: dict[str, Any]) -> None:
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            plan = session.get(PlanRow, plan_id)
            assert plan is not None
            plan.report = report
            session.commit()
    finally:
        engine.dispose()


def test_answers_are_the_stored_json(
    client: httpx.Client, database_url: str, tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    write_small_dataset(root)
    version = client.post("/v1/datasets/d/versions",
                          json={"root": root.as_uri(), "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    split = client.post(f"/v1/versions/{version.json()['id']}/splits", json=SPLIT)
    assert split.status_code == 201, split.text
    plan = client.post(f"/v1/splits/{split.json()['id']}/plans", json=PLAN)
    assert plan.status_code == 201, plan.text
    split_id, plan_id = split.json()["id"], plan.json()["id"]

    stored_split, stored_plan = _stored(database_url, split_id, plan_id)
    assert split.json()["config"] == stored_split.config
    assert split.json()["config"] == ValidationConfig.model_validate(SPLIT).model_dump(mode="json")
    assert client.get(f"/v1/splits/{split_id}").json()["config"] == stored_split.config
    assert plan.json()["config"] == stored_plan.config
    assert stored_plan.config == PlanSpec.model_validate(PLAN).planning_dict()
    assert client.get(f"/v1/plans/{plan_id}").json()["config"] == stored_plan.config

    report = client.get(f"/v1/plans/{plan_id}/report")
    assert report.status_code == 200, report.text
    body = report.json()
    assert body == stored_plan.report
    assert list(body) == list(stored_plan.report)
    assert "aligned" not in body  # only an aligned plan has it
    typed = PlanReportData.model_validate(body)
    assert typed.batches == plan.json()["n_batches"]
    assert typed.model_dump(mode="json") == body
    two = client.get(f"/v1/plans/{plan_id}/report", params={"world_size": 2}).json()
    assert len(two["batches_per_rank"]) == 2
    assert set(two) == set(body)

    older = dict(body, legacy=[1])
    older["dropped"] = {k: v for k, v in body["dropped"].items() if k != "step_gap_rows"}
    _store_report(database_url, plan_id, older)
    again = client.get(f"/v1/plans/{plan_id}/report")
    assert again.status_code == 200, again.text
    assert again.json()["legacy"] == [1]  # a key this version does not know is kept
    assert again.json()["dropped"]["step_gap_rows"] == 0  # one it added later: its default
