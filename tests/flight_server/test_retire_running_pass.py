"""A Flight pass that spans several endpoints (tickets, each its own ``DoGet``) and is
running when its plan is retired finishes: its later tickets were issued before the
retirement, so they belong to a pass already streaming (docs/sdk.md, "a pass already
streaming finishes"); a ticket asked for after the retirement is refused."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.deployment import deployment
from windpipe.flight_server.plan_sources import PlanCache
from windpipe.sdk import Catalog, Conflict, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.contract.errors import NotFound, retired_error

CONFIG = LoaderConfig(inputs={"cycling": ("current_a", "voltage_v")},
                      targets={"cycling": ("voltage_v",)},
                      default_window=WindowConfig(batch_size=2, seq_len=32))


def test_a_pass_of_many_endpoints_finishes_after_its_plan_is_retired(
        tmp_path: Path, synth_dataset: Any) -> None:
    with deployment(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "state", n_flight=2,
                    endpoint_batches=2) as dep, Catalog(dep.url) as cat:
        plan = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                            manifest="manifest.parquet").split(
            ValidationConfig.sample(fraction=0.3, seed=1)).plan(CONFIG)
        full = [b.state.global_batch for b in plan.batches(transport="flight")]
        assert len(full) > 8  # several endpoints of 2 batches each
        running = plan.batches(transport="flight")
        first = next(running)
        plan.retire()
        assert [first.state.global_batch, *(b.state.global_batch for b in running)] == full
        with pytest.raises(Conflict, match="retired"):
            next(iter(plan.batches(transport="flight")))


class _RetiredSource:
    """A plan source whose plan was retired at ``when``; loading it says ``not_found``,
    so a test sees whether ``PlanCache.live`` got past the retirement check."""

    def __init__(self, when: str) -> None:
        self.when = when

    def load(self, plan_id: str) -> Any:
        raise NotFound(f"loaded {plan_id}")

    def check_live(self, plan_id: str) -> None:
        raise retired_error("plan", plan_id, self.when)


@pytest.mark.parametrize("when", ["2026-01-01T12:00:00+00:00", "2026-01-01T12:00:00"])
def test_only_a_ticket_issued_before_the_retirement_is_honoured(when: str) -> None:
    plans = PlanCache(_RetiredSource(when))
    retired_at = datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp()  # a zoneless time is UTC
    with pytest.raises(NotFound, match="loaded"):  # past the check: served
        plans.live("p-1", issued_at=retired_at - 1.0)
    for issued_at in (retired_at + 1.0, None):
        with pytest.raises(Conflict, match="retired"):
            plans.live("p-1", issued_at=issued_at)
