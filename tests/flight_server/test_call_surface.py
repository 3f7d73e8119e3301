"""Every Flight call a caller can make, answered typed and bounded.

The anonymous ``health`` action names nothing of the host and the authenticated
``tier-info`` action says where the tier is; the calls windpipe does not serve answer
the ``invalid_request`` envelope without traceback text; a deeply nested command costs
one scan; a plan id of another shape never reaches a URL.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr

from tests.fixtures.servers import run_catalog_server
from tests.flight_server.helpers import COLUMNS, Dataset, StreamSpec, start_server, write_dataset
from windpipe.flight_server.plan_sources import RestPlanSource
from windpipe.flight_server.runner import RunningFlightServer, start_flight_server
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.reports import FlightHealth, FlightTierInfo
from windpipe.services.contract.wire import (
    ACTION_HEALTH,
    ACTION_TIER_INFO,
    ACTION_WARM,
    FlightCommand,
    error_from_flight,
)
from windpipe.services.settings import Settings

CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8),
)
TOKEN = "surface-s3cret"
AUTH = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
PLAN = "p-" + "0" * 32


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("surface"),
                         [StreamSpec("cycling", "c0", 0, (48,))], chunk_rows=16)


@pytest.fixture
def server(dataset: Dataset, tmp_path: Path) -> Iterator[RunningFlightServer]:
    running = start_server({"p": dataset.plan(CONFIG, "p")}, tier_dir=tmp_path / "tier",
                           admin_token=SecretStr(TOKEN))
    try:
        yield running
    finally:
        running.stop(grace_s=5)


def _action(location: str, kind: str, body: bytes = b"",
            options: fl.FlightCallOptions | None = None) -> list[bytes]:
    with fl.connect(location) as client:
        return [r.body.to_pybytes() for r in client.do_action(fl.Action(kind, body), options)]


def test_health_names_nothing_of_the_host(server: RunningFlightServer, tmp_path: Path) -> None:
    raw = _action(server.location, ACTION_HEALTH)  # no token: the liveness probe
    assert len(raw) == 1
    health = json.loads(raw[0])
    assert set(health) == {"status", "version", "active_streams", "streams"}
    assert FlightHealth.model_validate(health).status == "ok"
    tier_dir = str((tmp_path / "tier").resolve())
    for secret in (tier_dir, socket.gethostname(), "tier"):
        assert secret.encode() not in raw[0], secret
    with pytest.raises(fl.FlightUnauthenticatedError) as info:
        _action(server.location, ACTION_TIER_INFO)
    assert error_from_flight(info.value).type == ErrorType.UNAUTHENTICATED
    answer = FlightTierInfo.model_validate_json(
        _action(server.location, ACTION_TIER_INFO, options=AUTH)[0])
    assert answer.tier is not None
    assert answer.tier.path == tier_dir
    assert answer.tier.host == socket.gethostname()
    assert answer.tier.budget_source == "set"  # how the budget was chosen (auto: the disk)
    assert (tmp_path / "tier" / "tier.json").is_file()


def _assert_typed_refusal(exc: BaseException, call: str) -> None:
    text = str(exc)
    assert "Traceback" not in text, text
    assert "_flight.pyx" not in text, text
    assert f"does not serve {call}" in text, text
    err = error_from_flight(exc)
    assert err.type == ErrorType.INVALID_REQUEST, err
    assert err.details["call"] == call


def _put(client: fl.FlightClient, descriptor: fl.FlightDescriptor, schema: pa.Schema,
         options: fl.FlightCallOptions | None) -> None:
    writer, _ = client.do_put(descriptor, schema, options)
    writer.write_batch(pa.record_batch([pa.array([1])], schema=schema))
    writer.close()


def _exchange(client: fl.FlightClient, descriptor: fl.FlightDescriptor,
              options: fl.FlightCallOptions | None) -> None:
    writer, reader = client.do_exchange(descriptor, options)
    writer.close()
    reader.read_all()


def test_calls_windpipe_does_not_serve_answer_typed(server: RunningFlightServer) -> None:
    descriptor = FlightCommand("p").descriptor()
    schema = pa.schema([("a", pa.int64())])
    with fl.connect(server.location) as client:
        for options in (None, AUTH):
            with pytest.raises(fl.FlightServerError) as info:
                list(client.list_flights(options=options))
            _assert_typed_refusal(info.value, "ListFlights")
            with pytest.raises(fl.FlightServerError) as info:
                _put(client, descriptor, schema, options)
            _assert_typed_refusal(info.value, "DoPut")
            with pytest.raises(fl.FlightServerError) as info:
                _exchange(client, descriptor, options)
            _assert_typed_refusal(info.value, "DoExchange")
            # pyarrow's client drops GetSchema's extra_info (it raises a plain error); the
            # server's answer is the same typed refusal, its message without a traceback
            with pytest.raises((OSError, pa.ArrowException)) as raw:
                client.get_schema(descriptor, options)
            assert "Traceback" not in str(raw.value)
            assert "does not serve GetSchema" in str(raw.value)
        # what is served still works
        assert client.get_flight_info(descriptor, AUTH).schema.names[0] == "windows"  # wire v2


def test_deep_nesting_is_refused_before_parsing(server: RunningFlightServer) -> None:
    deep = b'{"plan_id": "p", "epoch": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    huge = b'{"plan_id": "p", "epoch": ' + b"[" * 300_000 + b"]" * 300_000 + b"}"
    with fl.connect(server.location) as client:
        for body, why in ((deep, "levels deep"), (b"[" * 30_000, "levels deep"),
                          (huge, "bytes, above")):
            with pytest.raises(fl.FlightServerError) as info:
                client.get_flight_info(fl.FlightDescriptor.for_command(body), AUTH)
            err = error_from_flight(info.value)
            assert err.type == ErrorType.INVALID_REQUEST, err
            assert why in err.message
        with pytest.raises(fl.FlightServerError) as info:
            list(client.do_action(fl.Action(ACTION_WARM, b'{"plan_id": ' + b"[" * 30_000), AUTH))
        assert error_from_flight(info.value).type == ErrorType.INVALID_REQUEST
        assert client.get_flight_info(FlightCommand("p").descriptor(), AUTH).endpoints


@pytest.mark.parametrize("bad", [f"x/../{PLAN}", f"{PLAN}%2F", f"{PLAN}/", "p.1", f"{PLAN}\n"])
def test_plan_ids_are_checked_by_shape_everywhere(tmp_path: Path, bad: str) -> None:
    """The command, the REST routes and the REST plan source refuse an id of another
    shape with ``invalid_request``: nothing is looked up, no URL is built from it."""
    with pytest.raises(WindpipeError) as made:
        FlightCommand(bad)
    assert made.value.type == ErrorType.INVALID_REQUEST
    raw = json.dumps({"plan_id": bad}).encode()
    settings = Settings(data_dir=tmp_path, log_level="WARNING")
    with run_catalog_server(settings) as url:
        flight = start_flight_server(Settings(flight_host="127.0.0.1", catalog_url=url,
                                              tier_bytes=0, log_level="WARNING"), port=0)
        try:
            with fl.connect(flight.location) as client:
                with pytest.raises(fl.FlightServerError) as info:
                    client.get_flight_info(fl.FlightDescriptor.for_command(raw))
                err = error_from_flight(info.value)
                assert err.type == ErrorType.INVALID_REQUEST, err
                assert "is not an id" in err.message
                with pytest.raises(fl.FlightServerError) as info:
                    list(client.do_action(fl.Action(ACTION_WARM, raw)))
                assert error_from_flight(info.value).type == ErrorType.INVALID_REQUEST
        finally:
            flight.stop(grace_s=5)
        for call in (RestPlanSource(url).load, RestPlanSource(url).check_live):
            with pytest.raises(WindpipeError) as refused:
                call(bad)
            assert refused.value.type == ErrorType.INVALID_REQUEST
        if "/" not in bad and "%" not in bad and "\n" not in bad:  # a path segment of its own
            answer = httpx.get(f"{url}/v1/plans/{bad}")
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["type"] == "invalid_request"
        assert httpx.get(f"{url}/v1/plans/{PLAN}").status_code == 404  # the right shape
