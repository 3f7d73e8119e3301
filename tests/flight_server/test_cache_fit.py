"""One figure for "does a batch fit the cache": the plan report's
``cache_working_set_bytes``, the catalog's fit check and a Flight server's refusal are the
distinct chunk bytes of the worst batch, so a plan whose batches fit is accepted and
streams on a cache of exactly that size, and a byte less is refused before streaming,
naming the same bytes. Real catalog (uvicorn, SQLite) and Flight server."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pyarrow.flight as fl
import pytest

from tests.fixtures.data import write_manifest, write_parquet_segment
from tests.fixtures.servers import run_catalog_server
from tests.flight_server.helpers import consume
from tests.reference.schedule_ref import RefStream, reference_schedule, reference_values
from windpipe._serving import serve_flight
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.wire import FlightCommand, error_from_flight
from windpipe.services.settings import Settings

ROWS, CHUNK = 32_768, 16_384  # one stream, two parquet row groups
CONFIG = LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=16),
                      inputs={"cycling": ("voltage_v", "current_a")},
                      targets={"cycling": ("voltage_v",)})
ROW_BYTES = (2 + 1) * 4  # a cached chunk row: two inputs and one target, float32
BUDGET = 1 << 20  # the catalog's cache_bytes (the settings' floor)


def _dataset(root: Path) -> dict[str, np.ndarray]:
    data = {"voltage_v": np.linspace(3.0, 4.2, ROWS), "current_a": np.cos(np.arange(ROWS))}
    write_parquet_segment(root, "seg/c0.parquet",
                          {k: v.astype(np.float32) for k, v in data.items()},
                          row_group_rows=CHUNK)
    write_manifest(root, [{"set_id": "s0", "cell_id": "c0", "cidx": 0, "protocol": "cycling",
                           "segment_path": "seg/c0.parquet"}])
    return {k: v.astype(np.float32).astype(np.float64) for k, v in data.items()}


def test_a_plan_whose_batches_fit_is_accepted_and_streams(sqlite_url: str,
                                                          tmp_path: Path) -> None:
    data = _dataset(tmp_path / "data")
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "state",
                        flight_host="127.0.0.1", tier_bytes=0, cache_bytes=BUDGET,
                        log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        v = client.post("/v1/datasets/fit/versions",
                        json={"root": (tmp_path / "data").as_uri(),
                              "manifest": "manifest.parquet"})
        s = client.post(f"/v1/versions/{v.json()['id']}/splits",
                        json={"strategy": "sample", "fraction": 0.0})
        p = client.post(f"/v1/splits/{s.json()['id']}/plans", json=CONFIG.planning_dict())
        assert p.status_code == 201, p.text  # a bound of 4 lanes x 3 chunks refused it
        plan_id = p.json()["id"]
        need = client.get(f"/v1/plans/{plan_id}/report").json()["cache_working_set_bytes"]
    # windows of B*T = 64 rows start on chunk boundaries; the last lane of the window
    # ending at row 16384 reads its target row from the second chunk: that batch pins
    # both chunks, every other one chunk
    assert need == 2 * CHUNK * ROW_BYTES <= BUDGET < 4 * 3 * CHUNK * ROW_BYTES
    streams = [RefStream("cycling", ROWS, ("s0", "c0", 0, "cycling"), ("s0", "c0", 0))]
    want = reference_schedule(streams, CONFIG, 0)

    running = serve_flight(settings, port=0, cache_bytes=need)
    try:
        got = consume(running.location, FlightCommand(plan_id))
        peak = running.server.cache.stats().peak_bytes
    finally:
        running.stop(grace_s=5)
    assert len(got) == len(want) == ROWS // 64
    for i, (r, ref) in enumerate(zip(got, want, strict=True)):
        inputs, targets, mask = reference_values(ref, streams, [data], CONFIG)
        np.testing.assert_array_equal(r.mask, mask, err_msg=f"batch {i}")
        np.testing.assert_allclose(r.inputs, inputs, rtol=2e-6, err_msg=f"batch {i}")
        np.testing.assert_allclose(r.targets, targets, rtol=2e-6, err_msg=f"batch {i}")
    assert peak <= need

    short = serve_flight(settings, port=0, cache_bytes=need - 1)
    try:
        with pytest.raises(fl.FlightServerError) as info:
            consume(short.location, FlightCommand(plan_id))
        assert short.server.cache.stats().misses == 0  # refused before anything loaded
    finally:
        short.stop(grace_s=5)
    err = error_from_flight(info.value)
    assert err is not None
    assert err.type == ErrorType.RESOURCE_EXHAUSTED
    assert err.details["working_set_bytes"] == need
    assert err.details["budget_bytes"] == need - 1
    assert err.details["batch_idx"] == CHUNK // 64 - 1
    assert f"at least {need}" in err.message
