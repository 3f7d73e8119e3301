"""The wire models of ``windpipe.services.contract.reports`` dump exactly the JSON they were
read from."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from windpipe.services.contract.reports import (
    FlightHealth,
    FlightTierInfo,
    PlanReportData,
    WarmProgress,
)

_PROTOCOL = {"streams": 1, "rows": 40, "batch_size": 2, "seq_len": 8, "input_channels": 2,
             "target_channels": 1, "bytes_per_full_batch": 208, "batches": 3, "lanes": 5,
             "padding_lanes": 0, "tokens": 40, "real_tokens": 39}
REPORT: dict[str, Any] = {
    "epoch": 0, "strategy": "sequential", "epoch_dependent": False, "streams": 1, "rows": 40,
    "batches": 3, "units": 3, "world_size": 2, "batches_per_rank_untrimmed": [2, 1],
    "batches_per_rank": [1, 1], "lanes": 5, "padding_lanes": 0, "tokens": 40,
    "real_tokens": 39, "bytes": 520, "max_batch_bytes": 208,
    "dropped": {"short_streams": 0, "short_stream_rows": 0, "phase_rows": 0,
                "incomplete_windows": 0, "incomplete_window_rows": 0, "incomplete_groups": 0,
                "incomplete_group_batches": 0, "tail_rows": 0, "step_gap_rows": 0,
                "distributed_trimmed_batches": 1},
    "protocols": {"cycling": _PROTOCOL},
    "cache_working_set_bytes": 2880,
}


@pytest.mark.parametrize("extra", [{}, {"aligned": {"parts_per_batch": 2, "keys": 3}},
                                   {"from_a_newer_catalog": {"x": 1}}])
@pytest.mark.parametrize("warnings", [[], [{"type": "padding", "message": "hppc: 98% ...",
                                             "protocol": "hppc", "share": 0.98}]])
def test_plan_report_dumps_the_json_it_read(extra: dict[str, Any],
                                            warnings: list[dict[str, Any]]) -> None:
    body = {k: v for k, v in REPORT.items() if k != "cache_working_set_bytes"} | extra
    body["cache_working_set_bytes"] = REPORT["cache_working_set_bytes"]  # the planner's order
    if warnings:  # absent when there is nothing to say
        body["warnings"] = warnings
    report = PlanReportData.model_validate(body)
    assert report.model_dump(mode="json") == body
    assert json.loads(report.model_dump_json()) == body
    if "from_a_newer_catalog" not in body:  # a key it does not know comes last
        assert list(report.model_dump(mode="json")) == list(body)
    assert (report.aligned is None) is ("aligned" not in body)


def test_plan_report_of_an_older_catalog_loads() -> None:
    older = REPORT | {"dropped": {k: v for k, v in REPORT["dropped"].items()
                                  if k != "step_gap_rows"}}
    assert PlanReportData.model_validate(older).dropped.step_gap_rows == 0
    with pytest.raises(ValidationError, match="batches"):
        PlanReportData.model_validate({k: v for k, v in REPORT.items() if k != "batches"})


def test_warm_steps_and_health_keep_their_keys() -> None:
    step = {"loaded": 1, "total": 4, "bytes": 10, "total_bytes": 40, "seconds": 0.5,
            "time": 1.0}
    last = step | {"loaded": 4, "bytes": 40, "blocks": ["b0"], "tier": None}
    for body in (step, last):
        assert WarmProgress.model_validate(body).model_dump(mode="json",
                                                            exclude_unset=True) == body
    health = {"status": "ok", "version": 1, "active_streams": 0, "streams": 2}
    assert FlightHealth.model_validate(health).model_dump(mode="json") == health
    tier = {"tier": {"path": "/t", "id": "t1", "host": "h", "budget_bytes": 8,
                     "budget_source": "set"}}
    assert FlightTierInfo.model_validate(tier).model_dump(mode="json") == tier
