"""``start_batch`` past the end of a pass is refused naming the pass's batch count, on Flight
and on the same-host path alike; ``start_batch`` equal to the count
is the position after the last batch and yields nothing. Real catalog and Flight server
sharing a host tier (so ``transport="local"`` builds batches in this process)."""

from __future__ import annotations

from typing import Any

import pyarrow.flight as fl
import pytest

from tests.catalog.api_support import write_small_dataset
from tests.sdk.deployment import deployment
from windpipe.sdk import Catalog, InvalidRequest, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.wire import FlightCommand, error_from_flight

_IO: dict[str, Any] = {"inputs": {"cycling": ("voltage_v", "current_a"), "hppc": ("voltage_v",)},
                       "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v",)}}
PLANS = {
    "plain": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=8), **_IO),
    "aligned": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=6),
                            align_by="alignment_key", strategy="shuffled", seed=4, **_IO),
}


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("start-batch")
    write_small_dataset(tmp / "data", n_cells=2, n_cycles=3)
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", tier_bytes=64 << 20) as d:
        cat = Catalog(d.url)
        split = cat.register("d", root=(tmp / "data").as_uri(),
                             manifest="manifest.parquet").split(
            ValidationConfig.sample(fraction=0.0))
        d.extra["plans"] = {name: split.plan(cfg) for name, cfg in PLANS.items()}
        yield d
        cat.close()


@pytest.mark.parametrize("transport", ["flight", "local"])
@pytest.mark.parametrize("name", list(PLANS))
def test_start_batch_past_the_end_names_the_batch_count(dep: Any, name: str,
                                                        transport: str) -> None:
    plan = dep.extra["plans"][name]
    assert plan.transport() == "local"  # a server shares its tier with this host
    for rank, world in ((0, 1), (1, 2)):
        args: dict[str, Any] = {"epoch": 1, "rank": rank, "world_size": world,
                                "transport": transport}
        n = plan.report(world_size=world).batches_per_rank[rank]
        assert len(list(plan.batches(**args))) == n > 0
        assert len(list(plan.batches(**args, start_batch=n - 1))) == 1
        assert list(plan.batches(**args, start_batch=n)) == []  # after the last batch
        for past in (n + 1, n + 1000):
            with pytest.raises(InvalidRequest) as info:
                list(plan.batches(**args, start_batch=past))
            details = info.value.details
            assert details["problem"] == "out_of_range"
            assert (details["start_batch"], details["n_batches"]) == (past, n)
            assert (details["rank"], details["world_size"]) == (rank, world)
            assert f"start_batch may be 0 to {n}" in str(info.value)


def test_getflightinfo_refuses_before_any_ticket(dep: Any) -> None:
    """A raw Flight client gets the typed envelope from GetFlightInfo."""
    plan = dep.extra["plans"]["plain"]
    n = plan.report().batches
    client = fl.connect(dep.locations[0])
    try:
        info = client.get_flight_info(FlightCommand(plan.id, start_batch=n).descriptor())
        assert info.total_records == 0
        with pytest.raises(fl.FlightServerError) as exc:
            client.get_flight_info(FlightCommand(plan.id, start_batch=n + 1).descriptor())
    finally:
        client.close()
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.INVALID_REQUEST
    assert err.details["n_batches"] == n
