"""Helpers for the catalog API tests (not fixtures): HTTP calls, row counts, tiny datasets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy.orm import Session

from tests.fixtures.data import write_manifest, write_parquet_segment
from tests.reference.schedule_ref import RefBatch
from windpipe.catalog.repository import Repository
from windpipe.services.database import create_engine


def table_counts(database_url: str) -> dict[str, int]:
    """Rows of every catalog table, read through the repository."""
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            return Repository(session).count_rows()
    finally:
        engine.dispose()


# What no answer may hold (docs/security.md, "Errors without internals").
INTERNALS = re.compile(r"Traceback|File \"|Debug source|postgresql://|sqlite:///|:5432|"
                       r"site-packages")


def assert_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """The response is the error envelope with ``status`` and ``type``, holds no internals
    and names its request id; returns its body."""
    assert response.status_code == status, response.text
    assert not INTERNALS.search(response.text), response.text
    assert response.headers.get("x-request-id"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message", "details"}, body
    assert body["error"]["type"] == kind, body
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def get_all(client: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    """Follow ``next_page_token`` to the end, checking that every page is non-empty."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query = dict(params)
        if token is not None:
            query["page_token"] = token
        response = client.get(path, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["items"] or token is None
        items += page["items"]
        token = page["next_page_token"]
        if token is None:
            return items


def served_schedule(
    client: httpx.Client, plan_id: str, *, page_size: int = 7, **params: Any
) -> list[RefBatch]:
    """A rank's pass from ``GET /v1/plans/{id}/schedule`` (every page) as reference batches."""
    items = get_all(client, f"/v1/plans/{plan_id}/schedule", page_size=page_size, **params)
    assert [i["batch_idx"] for i in items] == list(range(len(items)))
    return [
        RefBatch(
            lanes=tuple(None if ln["offset"] < 0 else (ln["stream_idx"], ln["offset"])
                        for ln in i["lanes"]),
            lane_streams=tuple(ln["stream_idx"] for ln in i["lanes"]),
            lane_protocols=tuple(ln["protocol"] for ln in i["lanes"]),
            seq_len=i["seq_len"], protocol=i["protocol"], unit=i["unit_idx"],
            group=i["stateful_group_idx"], step=i["stateful_step_idx"],
            steps=i["stateful_steps"],
        )
        for i in items
    ]


def write_small_dataset(root: Path, *, n_cells: int = 2, n_cycles: int = 2) -> Path:
    """Cycling (numeric ``voltage_v``, ``current_a`` and a string ``label``) and hppc
    streams of 40 and 25 rows; returns the manifest path."""
    rows = []
    for cell in range(n_cells):
        for cidx in range(n_cycles):
            for protocol, n in (("cycling", 40), ("hppc", 25)):
                rel = f"seg/c{cell}/{cidx}/{protocol}.parquet"
                write_parquet_segment(root, rel, {
                    "voltage_v": np.linspace(3.0, 4.2, n, dtype=np.float32),
                    "current_a": np.full(n, 1.5 * (cell + 1), dtype=np.float32),
                    "label": np.asarray([f"r{i}" for i in range(n)]),
                })
                rows.append({
                    "set_id": "s0", "cell_id": f"cell{cell}", "cidx": cidx, "protocol": protocol,
                    "segment_path": rel, "chemistry": "nmc" if cell % 2 == 0 else "lfp",
                })
    return write_manifest(root, rows)
