"""The client's structure: the handles call :class:`ClientState`'s public methods, never a
private member of the ``Catalog`` (or of anything else); the transport is a
:class:`BatchSource` chosen once; a DataLoader worker gets only picklable settings."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import httpx
import pytest

import windpipe.sdk as sdk
from windpipe.sdk._sources import BatchSource, FlightSource
from windpipe.sdk._state import ClientSettings, ClientState, WorkerSource

ROOT = Path(__file__).resolve().parents[2]
DEAD = ClientSettings(url="http://127.0.0.1:9/", timeout=1.0, retries=0,
                      flight_locations=("grpc://127.0.0.1:9",), location_map={})


def _foreign_private_access(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` (``self._state._rest``,
    ``catalog._local``, ...)."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


@pytest.mark.parametrize("module", ["windpipe/sdk/_handles.py", "windpipe/sdk/_plan.py",
                                    "windpipe/sdk/_catalog.py"])
def test_no_private_member_of_another_object_is_touched(module: str) -> None:
    assert _foreign_private_access(ROOT / module) == []


def test_the_handles_hold_the_client_state_not_the_catalog() -> None:
    source = ((ROOT / "windpipe/sdk/_handles.py").read_text()
              + (ROOT / "windpipe/sdk/_plan.py").read_text())
    assert "._catalog" not in source
    for handle in (sdk.DatasetVersion, sdk.Split, sdk.Plan):
        fields = handle.__dataclass_fields__
        assert "_state" in fields
        assert "_catalog" not in fields


def test_choosing_the_transport_is_choosing_a_source() -> None:
    state = ClientState(DEAD)
    assert state.settings.url == "http://127.0.0.1:9"
    flight = state.source("p-x", transport="flight")  # nothing is contacted
    assert isinstance(flight, FlightSource)
    assert isinstance(flight, BatchSource)
    assert flight.transport == "flight"
    with pytest.raises(sdk.InvalidConfig, match="transport must be one of"):
        state.source("p-x", transport="carrier-pigeon")
    with pytest.raises(sdk.InvalidConfig, match="data_access must be"):
        state.source("p-x", transport="flight", data_access="everything")
    with pytest.raises(sdk.InvalidRequest, match=">= 0"):
        flight.records(epoch=-1, rank=0, world_size=1, start_batch=0)  # checked up front
    state.close()


def test_a_worker_source_pickles_its_settings_only() -> None:
    state = ClientState(DEAD)
    worker = state.worker_source("p-x", transport="local")
    copy = pickle.loads(pickle.dumps(worker))
    assert (copy.plan_id, copy.transport, copy.settings) == ("p-x", "local", state.settings)
    assert copy._state is None  # the worker opens its own connections
    assert isinstance(copy, WorkerSource)
    state.close()


def test_a_plan_read_live_counts_as_its_liveness_check() -> None:
    """``Catalog.plan`` reads ``/v1/plans/{id}``: a live answer spares the pass that follows
    its own request; a retired one, or another path, does not."""
    calls: list[str] = []
    retired: dict[str, str | None] = {"p-1": None, "p-2": "2026-12-01T00:00:00Z"}

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        plan_id = request.url.path.rsplit("/", 1)[-1]
        return httpx.Response(200, json={"id": plan_id, "retired_at": retired.get(plan_id)})

    state = ClientState(ClientSettings(url="http://catalog.test", retries=0),
                        http_transport=httpx.MockTransport(answer))
    state.get_json("/v1/plans/p-1")
    state.check_live("p-1")
    assert calls == ["/v1/plans/p-1"]
    state.get_json("/v1/plans/p-2")
    with pytest.raises(sdk.Conflict):
        state.check_live("p-2")  # asked again: the read answer was not live
    assert calls[1:] == ["/v1/plans/p-2", "/v1/plans/p-2"]
    state.get_json("/v1/plans/p-3/report")
    state.check_live("p-3")
    assert calls[3:] == ["/v1/plans/p-3/report", "/v1/plans/p-3"]
    state.close()
