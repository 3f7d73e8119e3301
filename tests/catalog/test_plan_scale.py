"""A plan of a million windows is stored and served (both databases).

The plan is stored as one compressed artifact (``windpipe.services.planning.artifact``), not a row
per
unit; ``bench/planning.py`` times it against the row-per-unit storage of before (a time
is the benchmark's to measure, not this test's to assert).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.catalog.api_support import table_counts
from tests.fixtures.data import write_manifest, write_parquet_segment

N_STREAMS = 100
ROWS = 10_001  # 10,000 one-row windows per stream


@pytest.mark.slow
def test_million_window_plan(catalog_server: str, database_url: str, tmp_path: Path) -> None:
    rows = []
    for s in range(N_STREAMS):
        rel = f"seg/{s}.parquet"
        write_parquet_segment(tmp_path, rel, {"v": np.arange(ROWS, dtype=np.float32)})
        rows.append({"set_id": "a", "cell_id": f"c{s:03d}", "cidx": 0, "protocol": "cycling",
                     "segment_path": rel})
    write_manifest(tmp_path, rows)
    with httpx.Client(base_url=catalog_server, timeout=300) as client:
        version = client.post("/v1/datasets/big/versions", json={
            "root": tmp_path.as_uri(), "manifest": "manifest.parquet"}).json()
        split = client.post(f"/v1/versions/{version['id']}/splits",
                            json={"strategy": "sample", "fraction": 0.0}).json()
        body = {"default_window": {"batch_size": 1, "seq_len": 1},
                "inputs": {"cycling": ["v"]}, "targets": {"cycling": ["v"]}}
        plan = client.post(f"/v1/splits/{split['id']}/plans", json=body)
        assert plan.status_code == 201, plan.text
        assert plan.json()["n_units"] == N_STREAMS * (ROWS - 1)
        page = client.get(f"/v1/plans/{plan.json()['id']}/schedule",
                          params={"rank": 3, "world_size": 4, "page_size": 1000}).json()
        assert [b["global_batch_idx"] for b in page["items"][:3]] == [3, 7, 11]
        assert page["items"][-1]["lanes"] == [
            {"stream_idx": 0, "offset": 3 + 4 * 999, "protocol": "cycling"}
        ]
    counts = table_counts(database_url)
    assert (counts["plans"], counts["plan_artifacts"]) == (1, 1)
