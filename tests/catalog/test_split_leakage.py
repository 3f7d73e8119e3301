"""A split's answer counts the cells it puts on both sides (``leakage``), over real HTTP
on SQLite and PostgreSQL: cycle groups (the default ``group_by``) split cells, whole-cell
groups do not, the count is the one read off the served assignment, it is in the OpenAPI
document, and a split stored before the catalog counted answers null."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import polars as pl
import pyarrow as pa
import pytest
import sqlalchemy as sa

from windpipe.catalog.splits import cell_leakage
from windpipe.services.contract.leakage import LEAKAGE_EXAMPLES, SplitLeakage
from windpipe.services.database import create_engine
from windpipe.services.synth import SynthResult

CYCLES = {"strategy": "sample", "fraction": 0.3, "seed": 1}  # default group_by: one cycle
CELLS = {**CYCLES, "group_by": ["set_id", "cell_id"]}


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


@pytest.fixture
def version_id(client: httpx.Client, synth_dataset: SynthResult) -> str:
    response = client.post("/v1/datasets/synth/versions", json={
        "root": synth_dataset.path.as_uri(), "manifest": "manifest.parquet",
    })
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _split(client: httpx.Client, version_id: str, body: dict[str, object]) -> dict[str, object]:
    response = client.post(f"/v1/versions/{version_id}/splits", json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, object] = response.json()
    return answer


def _sides_per_cell(client: httpx.Client, split_id: object) -> dict[tuple[str, str], set[str]]:
    """``{(set_id, cell_id): {sides}}`` read row by row off the served split index."""
    response = client.get(f"/v1/splits/{split_id}/index", params={"format": "arrow"})
    assert response.status_code == 200, response.text
    table = pa.ipc.open_stream(io.BytesIO(response.content)).read_all()
    sides: dict[tuple[str, str], set[str]] = {}
    for row in table.select(["set_id", "cell_id", "split"]).to_pylist():
        sides.setdefault((row["set_id"], row["cell_id"]), set()).add(row["split"])
    return sides


def test_a_split_of_cycles_reports_the_cells_on_both_sides(
    client: httpx.Client, version_id: str,
) -> None:
    split = _split(client, version_id, CYCLES)
    leakage = SplitLeakage.model_validate(split["leakage"])
    sides = _sides_per_cell(client, split["id"])
    both = sorted(cell for cell, seen in sides.items() if seen == {"train", "val"})
    assert leakage.cells == len(sides)
    assert leakage.cells_on_both_sides == len(both) > 0
    assert [(c.set_id, c.cell_id) for c in leakage.examples] == both[:LEAKAGE_EXAMPLES]
    assert client.get(f"/v1/splits/{split['id']}").json()["leakage"] == split["leakage"]
    assert _split(client, version_id, CYCLES) == split  # found again: the stored count


@pytest.mark.parametrize("body", [
    CELLS,
    {"strategy": "provide", "provided": [{"cell_id": "cell_001"}]},  # cycle groups, one cell
], ids=["cell-groups", "provided-cell"])
def test_a_split_of_whole_cells_reports_none_on_both_sides(
    client: httpx.Client, version_id: str, body: dict[str, object],
) -> None:
    split = _split(client, version_id, body)
    sides = _sides_per_cell(client, split["id"])
    assert any(seen == {"val"} for seen in sides.values())
    assert split["leakage"] == {"cells": len(sides), "cells_on_both_sides": 0, "examples": []}


def test_a_split_stored_before_the_count_answers_null(
    client: httpx.Client, version_id: str, database_url: str,
) -> None:
    split = _split(client, version_id, CYCLES)
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE splits SET leakage = NULL WHERE id = :id"),
                         {"id": split["id"]})
    finally:
        engine.dispose()
    answer = client.get(f"/v1/splits/{split['id']}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["leakage"] is None
    assert answer.json()["counts"] == split["counts"]


def test_openapi_types_the_leakage_of_a_split(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    leakage = schemas["SplitOut"]["properties"]["leakage"]
    refs = [s["$ref"] for s in leakage["anyOf"] if "$ref" in s]
    assert refs == ["#/components/schemas/SplitLeakage"]
    assert {"type": "null"} in leakage["anyOf"]
    typed = schemas["SplitLeakage"]["properties"]
    assert set(typed) == {"cells", "cells_on_both_sides", "examples"}
    assert typed["cells_on_both_sides"]["type"] == "integer"


def test_examples_are_bounded_and_in_identity_order() -> None:
    cells = [f"cell_{i:03d}" for i in reversed(range(40))]
    frame = pl.DataFrame({
        "set_id": ["s"] * 80,
        "cell_id": [c for c in cells for _ in range(2)],
        "split": ["train", "val"] * 40,
    })
    leakage = cell_leakage(frame)
    assert (leakage.cells, leakage.cells_on_both_sides) == (40, 40)
    assert [c.cell_id for c in leakage.examples] == [f"cell_{i:03d}" for i in range(5)]
    whole = cell_leakage(frame.with_columns(
        pl.when(pl.col("cell_id") < "cell_020").then(pl.lit("val")).otherwise(pl.lit("train"))
        .alias("split")))
    assert (whole.cells, whole.cells_on_both_sides, whole.examples) == (40, 0, ())
