"""Retiring through the SDK: a stream already running finishes, new Flight tickets and
same-host passes of the retired plan raise ``Conflict``, and so does planning anew."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sdk.deployment import deployment
from windpipe.flight_server.plan_sources import RestPlanSource
from windpipe.sdk import Catalog, Conflict, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError, retired_error

CONFIG = LoaderConfig(inputs={"cycling": ("current_a", "voltage_v")},
                      targets={"cycling": ("voltage_v",)},
                      default_window=WindowConfig(batch_size=2, seq_len=32))


@pytest.fixture
def dep(tmp_path: Any, synth_dataset: Any) -> Any:
    with deployment(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "state",
                    tier_bytes=64 << 20) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        d.extra.update(cat=cat, ver=ver)
        yield d
        cat.close()


def test_running_streams_finish_and_new_ones_are_refused(dep: Any) -> None:
    cat, ver = dep.extra["cat"], dep.extra["ver"]
    split = ver.split(ValidationConfig.sample(fraction=0.3, seed=1))
    plan = split.plan(CONFIG)
    full = [b.inputs.numpy().tobytes() for b in plan.batches(transport="flight")]
    assert len(full) > 8
    running = plan.batches(transport="flight")
    first = next(running)

    retired = plan.retire()
    assert retired.retired_at is not None
    assert cat.plan(plan.id).retired_at == retired.retired_at
    rest = [b.inputs.numpy().tobytes() for b in running]
    assert [first.inputs.numpy().tobytes(), *rest] == full

    with pytest.raises(Conflict, match="retired") as flight:
        next(iter(plan.batches(transport="flight")))
    with pytest.raises(Conflict, match="retired") as local:
        next(iter(plan.batches(transport="local")))
    with pytest.raises(WindpipeError, match="retired") as info:
        RestPlanSource(dep.url).check_live(plan.id)  # what a Flight server with --catalog-url asks
    assert info.value.type == ErrorType.CONFLICT
    # one message, written by services.contract.errors.retired_error, whoever refuses
    said = {e.message.split(" (since ")[0] for e in (flight.value, local.value, info.value)}
    assert said == {retired_error("plan", plan.id, "t").message.split(" (since ")[0]}
    assert flight.value.message == local.value.message
    assert flight.value.details == local.value.details
    with pytest.raises(Conflict):
        split.plan(CONFIG)
    other = split.plan(CONFIG.model_copy(update={
        "default_window": WindowConfig(batch_size=3, seq_len=32)}))
    assert next(iter(other.batches(transport="flight"))).batch_size == 3


def test_retiring_a_version_hides_it_and_retires_its_plans(dep: Any) -> None:
    cat, ver = dep.extra["cat"], dep.extra["ver"]
    split = ver.split(ValidationConfig.sample(fraction=0.3, seed=2))
    plan = split.plan(CONFIG)
    assert [v.id for v in cat.versions("synth")] == [ver.id]
    assert ver.retire().retired_at is not None
    assert cat.versions("synth") == []
    assert [v.id for v in cat.versions("synth", include_retired=True)] == [ver.id]
    assert cat.split(split.id).retired_at is not None
    with pytest.raises(Conflict):
        next(iter(cat.plan(plan.id).batches(transport="flight")))
    with pytest.raises(Conflict):
        ver.split(ValidationConfig.sample(fraction=0.3, seed=3))
    with pytest.raises(Conflict):
        split.retire().plan(CONFIG)
