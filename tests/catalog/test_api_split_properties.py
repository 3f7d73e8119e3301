"""Split properties (SEMANTICS section 2) over real HTTP, on SQLite and PostgreSQL.

One dataset of 80 cells x 4 cycles (cycling, plus hppc at cycle 0) is written once;
``base.parquet`` lists the first 60 cells, ``more.parquet`` all 80. Assignments are
read back through ``GET /v1/splits/{id}/index`` and compared with the definition
``val iff unit_interval(seed, group values) < fraction`` and with each other.
"""

from __future__ import annotations

import io
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from tests.catalog.api_support import assert_error, table_counts
from tests.fixtures.data import write_manifest, write_parquet_segment
from windpipe.services.contract.identity import unit_interval

N_BASE, N_MORE, N_CYCLES = 60, 80, 4


def _cell(i: int) -> str:
    return f"c{i:03d}"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The dataset root and an identical copy of it elsewhere."""
    root = tmp_path_factory.mktemp("splitprops")
    rows: list[dict[str, Any]] = []
    for i in range(N_MORE):
        for cidx in range(N_CYCLES):
            for protocol in ("cycling", "hppc") if cidx == 0 else ("cycling",):
                n = 3 + (i + cidx) % 5
                rel = f"{_cell(i)}/{cidx}_{protocol}.parquet"
                write_parquet_segment(root, rel, {"voltage_v": np.linspace(3, 4, n)})
                rows.append({
                    "set_id": f"set{i % 2}", "cell_id": _cell(i), "cidx": cidx,
                    "protocol": protocol, "segment_path": rel,
                    "chemistry": "lfp" if i % 3 == 0 else "nmc", "temperature_c": 15 + i % 4 * 10,
                })
    write_manifest(root, [r for r in rows if int(r["cell_id"][1:]) < N_BASE], "base.parquet")
    write_manifest(root, rows, "more.parquet")
    copy = tmp_path_factory.mktemp("splitprops_copy") / "data"
    shutil.copytree(root, copy)
    return root, copy


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


def _register(client: httpx.Client, dataset: str, body: dict[str, Any]) -> str:
    response = client.post(f"/v1/datasets/{dataset}/versions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _split(client: httpx.Client, version_id: str, body: dict[str, Any]) -> tuple[dict[str, Any],
                                                                              pl.DataFrame]:
    response = client.post(f"/v1/versions/{version_id}/splits", json=body)
    assert response.status_code == 201, response.text
    split = response.json()
    index = client.get(f"/v1/splits/{split['id']}/index", params={"format": "arrow"})
    assert index.status_code == 200, index.text
    frame = pl.from_arrow(pa.ipc.open_stream(io.BytesIO(index.content)).read_all())
    assert isinstance(frame, pl.DataFrame)
    assert set(frame["split"].unique().to_list()) <= {"train", "val"}
    assert frame["split"].null_count() == 0
    assert split["counts"] == _counts(frame, body.get("group_by", ["set_id", "cell_id", "cidx"]))
    return split, frame


def _counts(frame: pl.DataFrame, group_by: list[str]) -> dict[str, dict[str, int]]:
    """Counts recomputed from the served index (not through ``windpipe.catalog.splits``)."""
    out = {}
    for name in ("train", "val"):
        part = frame.filter(pl.col("split") == name)
        out[name] = {"groups": part.select(group_by).unique().height,
                     "manifest_rows": part.height, "rows": int(part["row_count"].sum())}
    return out


def _by_group(frame: pl.DataFrame, group_by: list[str]) -> dict[tuple[Any, ...], str]:
    """group -> split, asserting that no group straddles two splits."""
    per_group = frame.group_by(group_by).agg(pl.col("split").unique())
    straddling = per_group.filter(pl.col("split").list.len() > 1)
    assert straddling.height == 0, straddling
    return {tuple(r[:-1]): r[-1][0] for r in per_group.iter_rows()}


def test_sample_is_a_pure_function_of_the_group(
    client: httpx.Client, roots: tuple[Path, Path]
) -> None:
    root, copy = roots
    group_by = ["set_id", "cell_id", "cidx"]
    body = {"strategy": "sample", "fraction": 0.3, "seed": 13}
    base = _register(client, "base", {"root": root.as_uri(), "manifest": "base.parquet"})
    rows = pl.read_parquet(copy / "base.parquet").to_dicts()
    copied = _register(client, "copy", {"root": copy.as_uri(), "rows": rows})
    more = _register(client, "base", {"root": root.as_uri(), "manifest": "more.parquet"})
    assert len({base, copied, more}) == 3

    _, base_frame = _split(client, base, body)
    _, copy_frame = _split(client, copied, body)
    more_split, more_frame = _split(client, more, body)
    base_groups = _by_group(base_frame, group_by)
    more_groups = _by_group(more_frame, group_by)
    assert len(base_groups) == N_BASE * N_CYCLES
    assert len(more_groups) == N_MORE * N_CYCLES

    # The definition, computed here: val iff u(seed, group values) < fraction.
    expected = {g: "val" if unit_interval(13, list(g)) < 0.3 else "train" for g in more_groups}
    assert more_groups == expected
    assert _by_group(copy_frame, group_by) == base_groups
    assert {g: more_groups[g] for g in base_groups} == base_groups  # added groups move nothing
    assert base_frame.equals(copy_frame)

    n = len(more_groups)
    val = more_split["counts"]["val"]["groups"]
    assert abs(val - 0.3 * n) <= 4 * math.sqrt(n * 0.3 * 0.7), (val, n)

    _, reseeded = _split(client, base, {**body, "seed": 14})
    assert _by_group(reseeded, group_by) != base_groups
    _, none = _split(client, base, {**body, "fraction": 0.0})
    assert set(none["split"].to_list()) == {"train"}
    _, every = _split(client, base, {**body, "fraction": 1.0})
    assert set(every["split"].to_list()) == {"val"}


def test_groups_never_straddle(client: httpx.Client, roots: tuple[Path, Path]) -> None:
    root, _ = roots
    version = _register(client, "base", {"root": root.as_uri(), "manifest": "more.parquet"})
    cells = ["set_id", "cell_id"]
    _, sampled = _split(client, version, {"strategy": "sample", "fraction": 0.4, "seed": 2,
                                          "group_by": cells})
    groups = _by_group(sampled, cells)
    assert len(groups) == N_MORE
    assert set(groups.values()) == {"train", "val"}
    # Rows of other protocols and cycles follow their cell (one identity group each).
    _by_group(sampled, ["set_id", "cell_id", "cidx"])

    merged_body = {"strategy": "merge", "fraction": 0.2, "seed": 2, "group_by": cells,
                   "provided": [{"cell_id": _cell(4), "cidx": 2}]}
    _, merged = _split(client, version, merged_body)
    held = _by_group(merged, cells)
    assert held[("set0", _cell(4))] == "val"  # one matching row holds out the whole cell
    assert merged.filter(pl.col("cell_id") == _cell(4))["split"].unique().to_list() == ["val"]
    sampled_too = {g for g, s in _by_group(
        _split(client, version, {**merged_body, "strategy": "sample", "provided": []})[1], cells
    ).items() if s == "val"}
    assert {g for g, s in held.items() if s == "val"} == sampled_too | {("set0", _cell(4))}

    _, provided = _split(client, version, {"strategy": "provide", "group_by": cells,
                                           "provided": [{"chemistry": "lfp", "cidx": 3}]})
    by_cell = _by_group(provided, cells)
    lfp = {("set0" if i % 2 == 0 else "set1", _cell(i)) for i in range(N_MORE) if i % 3 == 0}
    assert {g for g, s in by_cell.items() if s == "val"} == lfp


def test_split_config_errors_store_nothing(
    client: httpx.Client, roots: tuple[Path, Path], database_url: str
) -> None:
    root, _ = roots
    version = _register(client, "base", {"root": root.as_uri(), "manifest": "base.parquet"})
    before = table_counts(database_url)
    url = f"/v1/versions/{version}/splits"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"strategy": "sample", "group_by": ["set_id", "cel_id"]}, "cel_id"),
        ({"strategy": "provide", "provided": [{"chemistyr": "lfp"}]}, "chemistyr"),
        ({"strategy": "merge", "provided": [{"cell_id": "c000"}, {"colour": "red"}]}, "colour"),
        ({"strategy": "provide", "provided": [{"cell_id": "c999"}]}, "matches no row"),
        ({"strategy": "provide", "provided": [{"cidx": "1"}]}, "matches no row"),
        ({"strategy": "merge", "fraction": 0.5,
          "provided": [{"cell_id": "c001"}, {"chemistry": "lfp", "cell_id": "c001"}]},
         "matches no row"),
        ({"strategy": "provide", "provided": [{"cell_id": _cell(N_MORE - 1)}]},
         "matches no row"),
    ]
    for body, needle in cases:
        error = assert_error(client.post(url, json=body), 422, "invalid_config")
        assert needle in error["message"], (body, error)
    assert table_counts(database_url) == before
