"""``plan.report()`` reads as attributes through a real catalog, and the Flight actions'
results (``health``, ``cache-stats``, ``warm``) are the wire contract's models."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.flight as fl
import pytest

from tests.catalog.api_support import write_small_dataset
from tests.sdk.deployment import deployment
from windpipe.sdk import Catalog, LoaderConfig, PlanReport, ValidationConfig, WindowConfig
from windpipe.services.contract.reports import (
    CacheCounters,
    FlightHealth,
    FlightTierInfo,
    PlanReportData,
    WarmProgress,
)
from windpipe.services.contract.wire import (
    ACTION_CACHE_STATS,
    ACTION_HEALTH,
    ACTION_TIER_INFO,
    ACTION_WARM,
)

CONFIG = LoaderConfig(
    default_window=WindowConfig(batch_size=2, seq_len=8),
    inputs={"cycling": ("voltage_v", "current_a")}, targets={"cycling": ("voltage_v",)},
)


def _action(location: str, kind: str, body: dict[str, str] | None = None) -> list[bytes]:
    client = fl.connect(location)
    try:
        payload = json.dumps(body or {}).encode()
        return [r.body.to_pybytes() for r in client.do_action(fl.Action(kind, payload))]
    finally:
        client.close()


def test_report_fields_read_as_attributes(sqlite_url: str, tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_small_dataset(root)
    with deployment(sqlite_url, tmp_path / "state", tier_bytes=64 << 20) as dep, \
            Catalog(dep.url) as cat:
        ver = cat.register("d", root=root.as_uri(), manifest="manifest.parquet")
        plan = ver.split(ValidationConfig.sample(fraction=0.0)).plan(CONFIG)

        report = plan.report()
        assert isinstance(report, PlanReport)
        assert isinstance(report.model, PlanReportData)
        assert report.batches == report["batches"] == report.raw["batches"] == plan.n_batches
        assert report.batches == len(list(plan.batches(transport="flight")))
        assert report.tokens == report.protocols["cycling"].tokens > 0
        assert report.cache_working_set_bytes > 0
        assert report.dropped.distributed_trimmed_batches == 0
        assert report["dropped"]["distributed_trimmed_batches"] == 0
        assert report.aligned is None
        assert report.get("aligned") is None
        assert report.fields()[:3] == ["epoch", "strategy", "epoch_dependent"]
        assert "cache_working_set_bytes" in dir(report)
        with pytest.raises(AttributeError, match="no_such_field"):
            _ = report.no_such_field
        text = repr(report)
        assert text.startswith(f"PlanReport {plan.id}")
        assert "batches_per_rank" in text
        assert "<table>" in report._repr_html_()

        two = plan.report(world_size=2)
        assert two.world_size == two.model.world_size == 2
        assert sum(two.batches_per_rank_untrimmed) == two.batches == report.batches

        location = dep.locations[0]
        health = FlightHealth.model_validate_json(_action(location, ACTION_HEALTH)[0])
        assert health.status == "ok"
        tier = FlightTierInfo.model_validate_json(_action(location, ACTION_TIER_INFO)[0]).tier
        assert tier is not None
        assert tier.budget_bytes == 64 << 20
        counters = CacheCounters.model_validate_json(_action(location, ACTION_CACHE_STATS)[0])
        assert counters.budget_bytes > 0

        steps = [json.loads(r) for r in _action(location, ACTION_WARM, {"plan_id": plan.id})]
        progress = [WarmProgress.model_validate(s) for s in steps]
        assert all("blocks" not in s and "tier" not in s for s in steps[:-1])
        assert set(steps[-1]) >= {"loaded", "total", "bytes", "total_bytes", "blocks", "tier"}
        last = progress[-1]
        assert last.loaded == last.total > 0
        assert last.tier is not None
        assert last.tier.id == tier.id
        warmed = plan.warm(progress=False)
        assert warmed[location]["bytes"] == last.bytes
