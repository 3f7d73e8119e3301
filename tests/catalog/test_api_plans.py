"""Plans over real HTTP, on SQLite and PostgreSQL: validation, storage, report, schedule.

The stored plan (its artifact, read straight from the database) and the served
schedule are checked against the independent reference in
``tests/reference/schedule_ref.py``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from sqlalchemy.orm import Session

from tests.catalog.api_support import (
    assert_error,
    served_schedule,
    table_counts,
    write_small_dataset,
)
from tests.reference.schedule_ref import RefBatch, RefStream, reference_rank, reference_schedule
from windpipe.catalog.repository import Repository, encode_page_token
from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.database import create_engine
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.synth import SynthResult

_IO = {"current_a": None, "voltage_v": None}

CONFIGS: dict[str, dict[str, Any]] = {
    "sequential": {
        "default_window": {"batch_size": 4, "seq_len": 16},
        "inputs": {"cycling": ["current_a", "voltage_v"]},
        "targets": {"cycling": ["voltage_v"]},
    },
    "shuffled-stateful": {
        "strategy": "shuffled", "seed": 11, "stateful_n_windows": 2,
        "default_window": {"batch_size": 3, "seq_len": 20},
        "window_by_protocol": {"hppc": {"batch_size": 2, "seq_len": 8}},
        "inputs": {"cycling": ["current_a", "voltage_v"], "hppc": ["voltage_v"]},
        "targets": {"cycling": ["voltage_v"], "hppc": ["voltage_v"]},
        "scaling": [{"column": "voltage_v", "input_min": 2.5, "input_max": 4.3}],
    },
    "chain": {
        "strategy": "shuffled", "seed": 3, "stateful_n_windows": -1,
        "cross_protocol_state_carry": "chain", "protocol_order": ["hppc", "cycling"],
        "default_window": {"batch_size": 2, "seq_len": 32},
        "inputs": {"cycling": ["current_a"], "hppc": ["voltage_v"]},
        "targets": {"cycling": ["voltage_v"], "hppc": ["voltage_v"]},
    },
}


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=120) as c:
        yield c


def _split(client: httpx.Client, root: str, body: dict[str, Any], **split: Any) -> str:
    version = client.post("/v1/datasets/d/versions", json={"root": root, **body})
    assert version.status_code in (200, 201), version.text
    response = client.post(f"/v1/versions/{version.json()['id']}/splits",
                           json={"strategy": "sample", "fraction": 0.25, **split})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def _stored_bytes(database_url: str, plan_id: str) -> bytes:
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            data = Repository(session).load_plan_artifact(plan_id)
            assert data is not None
            return data
    finally:
        engine.dispose()


def _stored(database_url: str, plan_id: str) -> tuple[list[RefStream], pl.DataFrame]:
    """The stored plan's streams and the units of its epoch 0, read from the database."""
    artifact = PlanArtifact.from_ipc(_stored_bytes(database_url, plan_id))
    st = artifact.streams
    streams = [
        RefStream(protocol=st.protocols[int(st.protocol[s])], n_rows=int(st.n_rows[s]),
                  group_key=st.group_keys[s], alignment_key=st.alignment_keys[s])
        for s in range(st.count)
    ]
    sched = artifact.epoch_schedule(0)
    ptr = sched.unit_batch_ptr
    first_lane = sched.batch_lane_ptr[ptr[:-1]]
    units = pl.DataFrame({
        "unit_idx": range(sched.n_units),
        "protocol": [st.protocols[int(p)] for p in sched.batch_protocol[ptr[:-1]]],
        "n_batches": (ptr[1:] - ptr[:-1]).tolist(),
        "n_lanes": sched.batch_lanes[ptr[:-1]].tolist(),
        "batch_start": ptr[:-1].tolist(),
        "stream_idx": sched.lane_stream[first_lane].tolist(),
        "window_offset": sched.lane_offset[first_lane].tolist(),
    }, schema={
        "unit_idx": pl.Int64, "protocol": pl.String, "n_batches": pl.Int64, "n_lanes": pl.Int64,
        "batch_start": pl.Int64, "stream_idx": pl.Int64, "window_offset": pl.Int64,
    })
    return streams, units


def _units_of(batches: list[RefBatch]) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    for idx, batch in enumerate(batches):
        if rows and rows[-1]["unit_idx"] == batch.unit:
            rows[-1]["n_batches"] += 1
            continue
        first = batch.lanes[0]
        rows.append({
            "unit_idx": batch.unit, "protocol": batch.protocol, "n_batches": 1,
            "n_lanes": len(batch.lanes), "batch_start": idx,
            "stream_idx": batch.lane_streams[0], "window_offset": -1 if first is None else first[1],
        })
    return pl.DataFrame(rows, schema={
        "unit_idx": pl.Int64, "protocol": pl.String, "n_batches": pl.Int64, "n_lanes": pl.Int64,
        "batch_start": pl.Int64, "stream_idx": pl.Int64, "window_offset": pl.Int64,
    })


@pytest.mark.parametrize("name", list(CONFIGS))
def test_plan_matches_reference(
    client: httpx.Client, synth_dataset: SynthResult, database_url: str, name: str
) -> None:
    split_id = _split(client, synth_dataset.path.as_uri(), {"manifest": "manifest.parquet"})
    body = CONFIGS[name]
    config = LoaderConfig.model_validate(body)
    created = client.post(f"/v1/splits/{split_id}/plans", json=body)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["id"].startswith("p-")
    assert plan["status"] == "completed"
    assert plan["config"] == config.planning_dict()

    # The same planning fields again: the stored plan comes back with 200.
    again = client.post(f"/v1/splits/{split_id}/plans", json=body)
    assert again.status_code == 200
    assert again.json()["id"] == plan["id"]
    assert client.get(f"/v1/plans/{plan['id']}").json() == plan
    # A plan body holds only what identifies a plan: runtime options are refused.
    error = assert_error(client.post(f"/v1/splits/{split_id}/plans",
                                     json={**body, "num_workers": 3, "device": "cpu"}),
                         422, "invalid_config")
    assert "runtime option" in error["message"]
    assert error["message"].startswith(("body.num_workers", "body.device"))

    # What the catalog stored is what it serves, byte for byte.
    artifact = client.get(f"/v1/plans/{plan['id']}/artifact")
    assert artifact.status_code == 200
    assert artifact.headers["content-type"] == "application/vnd.apache.arrow.stream"
    assert artifact.content == _stored_bytes(database_url, plan["id"])

    streams, units = _stored(database_url, plan["id"])
    assert len(streams) == plan["n_streams"] > 0
    expected = reference_schedule(streams, config, 0)
    assert plan["n_batches"] == len(expected) > 0
    assert units.equals(_units_of(expected))
    assert plan["n_units"] == units.height

    for epoch in (0, 1):
        for rank in (0, 1):
            served = served_schedule(client, plan["id"], epoch=epoch, rank=rank, world_size=2)
            assert served == reference_rank(streams, config, epoch, rank=rank, world_size=2)
    assert served_schedule(client, plan["id"]) == expected

    report = client.get(f"/v1/plans/{plan['id']}/report").json()
    assert report["batches"] == len(expected)
    # The working set bounds what one batch pins: at least its lanes' input rows.
    widest = max(len(b.lanes) * b.seq_len for b in expected)
    assert report["cache_working_set_bytes"] >= widest * 4
    two = client.get(f"/v1/plans/{plan['id']}/report", params={"world_size": 2}).json()
    assert len(two["batches_per_rank"]) == 2
    assert two["batches_per_rank"][0] == len(
        reference_rank(streams, config, 0, rank=0, world_size=2)
    )


@pytest.fixture
def small_split(client: httpx.Client, tmp_path: Path) -> str:
    write_small_dataset(tmp_path)
    return _split(client, tmp_path.as_uri(), {"manifest": "manifest.parquet"}, fraction=0.0)


def _plan_error(client: httpx.Client, split_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return assert_error(client.post(f"/v1/splits/{split_id}/plans", json=body),
                        422, "invalid_config")


def test_plan_errors(client: httpx.Client, small_split: str, database_url: str) -> None:
    base = {"default_window": {"batch_size": 2, "seq_len": 8},
            "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}
    error = _plan_error(client, small_split, {**base, "inputs": {"cycling": ["nope_v"]}})
    assert "nope_v" in error["message"]
    error = _plan_error(client, small_split, {**base, "targets": {"cycling": ["label"]}})
    assert "label" in error["message"]
    assert "numeric" in error["message"]
    error = _plan_error(client, small_split, {
        **base, "scaling": [{"column": "current_a", "input_min": 0, "input_max": 5}]
    })
    assert "current_a" in error["message"]
    error = _plan_error(client, small_split, {**base, "split": "test"})
    assert "test" in error["message"]
    error = _plan_error(client, small_split, {**base, "split": "val"})
    assert "no manifest rows" in error["message"]
    error = _plan_error(client, small_split, {
        "stateful_n_windows": 1, "cross_protocol_state_carry": "chain",
        "window_by_protocol": {"hppc": {"batch_size": 2, "seq_len": 4}},
        "default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"], "hppc": ["voltage_v"]},
        "targets": {"cycling": ["voltage_v"], "hppc": ["voltage_v"]},
    })
    assert "share batch_size and seq_len" in error["message"]
    error = _plan_error(client, small_split, {**base, "inputs": {"eis": ["voltage_v"]},
                                              "targets": {"eis": ["voltage_v"]}})
    assert "eis" in error["message"]
    error = _plan_error(client, small_split, {**base, "group_key": ["set_id", "cell_id"]})
    assert "protocol" in error["message"]
    assert_error(client.post("/v1/splits/s-unknown/plans", json=base), 404, "not_found")
    assert_error(client.post(f"/v1/splits/{small_split}/plans", content=b"{",
                             headers={"content-type": "application/json"}),
                 422, "invalid_request")
    error = _plan_error(client, small_split, {**base, "data_access": "full_in_mem"})
    assert "data_access" in error["message"]
    error = _plan_error(client, small_split, {**base, "no_such_field": 1})
    assert "no_such_field" in error["message"]
    counts = table_counts(database_url)
    assert (counts["plans"], counts["plan_artifacts"]) == (0, 0)

    ok = client.post(f"/v1/splits/{small_split}/plans", json=base)
    assert ok.status_code == 201, ok.text
    plan_id = ok.json()["id"]
    assert_error(client.get(f"/v1/plans/{plan_id}/schedule", params={"rank": 2,
                                                                     "world_size": 2}),
                 422, "invalid_request")
    assert_error(client.get(f"/v1/plans/{plan_id}/report", params={"world_size": 0}),
                 422, "invalid_request")
    assert_error(client.get("/v1/plans/p-unknown/schedule"), 404, "not_found")
    assert_error(client.get("/v1/plans/p-unknown/artifact"), 404, "not_found")


def test_page_tokens_of_another_shape_are_422(client: httpx.Client, small_split: str) -> None:
    """Well-formed tokens that are not this listing's keys: refused, never a 500."""
    plan = client.post(f"/v1/splits/{small_split}/plans", json=CONFIGS["sequential"]).json()
    split = client.get(f"/v1/splits/{small_split}").json()
    version_id = split["version_id"]
    listings = {  # path -> a token it issued (its key shape)
        "/v1/datasets": ["d"],
        "/v1/datasets/d/versions": [1],
        f"/v1/versions/{version_id}/segments": [1, 0],
        f"/v1/versions/{version_id}/index": [1],
        f"/v1/plans/{plan['id']}/schedule": [1],
    }
    for path, good in listings.items():
        ok = client.get(path, params={"page_token": encode_page_token(good)})
        assert ok.status_code == 200, (path, ok.text)
        bad_keys = [["x"] if isinstance(good[0], int) else [1], [-1], [{"a": 1}], [True],
                    [*good, 0], {"k": 1}, "text"]
        for key in bad_keys:
            token = base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")
            error = assert_error(client.get(path, params={"page_token": token}),
                                 422, "invalid_request")
            assert error["details"] == {"page_token": token}, (path, key)
