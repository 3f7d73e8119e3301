"""The Flight server's bearer-token auth, streamed warm progress and structured logs."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    StreamSpec,
    consume,
    start_server,
    write_dataset,
)
from windpipe.flight_server.runner import RunningFlightServer, start_flight_server
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.wire import (
    ACTION_CACHE_STATS,
    ACTION_HEALTH,
    ACTION_WARM,
    FlightCommand,
)
from windpipe.services.contract.wire import error_from_flight as wire_error
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.settings import Settings

SPECS = [StreamSpec("cycling", f"c{c}", k, (64, 40)) for c in range(3) for k in range(2)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8),
)
TOKEN = "flight-s3cret"
AUTH = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    # small chunks: many warm steps
    return write_dataset(tmp_path_factory.mktemp("auth"), SPECS, fmt="mixed", chunk_rows=4)


def _start_with_token(plans: dict[str, PlanContext]) -> RunningFlightServer:
    settings = Settings(flight_host="127.0.0.1", flight_port=0, tier_bytes=0,
                        ticket_secret=SecretStr("test-secret"), admin_token=SecretStr(TOKEN))
    return start_flight_server(settings, plan_source=lambda plan_id: plans[plan_id].artifact,
                               cache_bytes=64 << 20)


def _unauthenticated(exc: pytest.ExceptionInfo[Any]) -> str:
    err = wire_error(exc.value)
    assert err is not None
    assert err.type == ErrorType.UNAUTHENTICATED
    return err.message


def test_warm_progress_is_streamed_as_chunks_load(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    client = fl.connect(running.location)
    try:
        received: list[tuple[float, dict[str, Any]]] = []
        body = json.dumps({"plan_id": "p"}).encode()
        for result in client.do_action(fl.Action(ACTION_WARM, body)):
            received.append((time.time(), json.loads(result.body.to_pybytes())))
    finally:
        client.close()
        running.stop(grace_s=5)
    steps = [r for _, r in received]
    n_chunks = int(dataset.plan(CONFIG, "p").chunk_piece.shape[0])
    assert len(steps) >= 10
    assert steps[-1]["loaded"] == steps[-1]["total"] == n_chunks
    assert steps[-1]["bytes"] == steps[-1]["total_bytes"] > 0
    assert [s["bytes"] for s in steps] == sorted(s["bytes"] for s in steps)
    # the first result reached the client before the server produced the last one
    assert received[0][0] < steps[-1]["time"]


def test_token_required_on_every_call_but_health(dataset: Dataset) -> None:
    running = _start_with_token({"p": dataset.plan(CONFIG, "p")})
    client = fl.connect(running.location)
    cmd = FlightCommand("p")
    try:
        health = list(client.do_action(fl.Action(ACTION_HEALTH, b"")))
        assert json.loads(health[0].body.to_pybytes())["status"] == "ok"
        with pytest.raises(fl.FlightUnauthenticatedError) as none:
            client.get_flight_info(cmd.descriptor())
        assert "requires a bearer token" in _unauthenticated(none)
        wrong = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer nope")])
        with pytest.raises(fl.FlightUnauthenticatedError) as bad:
            client.get_flight_info(cmd.descriptor(), wrong)
        assert "not valid" in _unauthenticated(bad)
        with pytest.raises(fl.FlightUnauthenticatedError) as stats:
            list(client.do_action(fl.Action(ACTION_CACHE_STATS, b"")))
        _unauthenticated(stats)
        assert list(client.do_action(fl.Action(ACTION_CACHE_STATS, b""), AUTH))

        info = client.get_flight_info(cmd.descriptor(), AUTH)
        ticket = info.endpoints[0].ticket
        with pytest.raises(fl.FlightUnauthenticatedError) as get:
            client.do_get(ticket).read_all()
        _unauthenticated(get)
        table = client.do_get(ticket, AUTH).read_all()
        assert table.num_rows == info.total_records > 0
        # a valid token does not make an altered ticket acceptable
        forged = fl.Ticket(ticket.ticket[:-3] + b"AAA")
        with pytest.raises(fl.FlightUnauthorizedError) as tampered:
            client.do_get(forged, AUTH).read_all()
        err = wire_error(tampered.value)
        assert err is not None
        assert err.type == ErrorType.INVALID_TICKET
    finally:
        client.close()
        running.stop(grace_s=5)


Logs = list[MutableMapping[str, Any]]


def _events(logs: Logs, name: str) -> Logs:
    return [e for e in logs if e["event"] == name]


def _wait_end(logs: Logs, n: int) -> Logs:
    """Until ``n`` streams have ended (pytest-timeout bounds a wait that never ends)."""
    while len(_events(logs, "flight.stream.end")) < n:
        time.sleep(0.02)
    return _events(logs, "flight.stream.end")


def test_stream_start_and_end_events(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    try:
        with capture_logs() as logs:
            got = consume(running.location, FlightCommand("p", epoch=2, start_batch=1))
            ends = _wait_end(logs, 1)
            client = fl.connect(running.location)
            info = client.get_flight_info(FlightCommand("p").descriptor())
            reader = client.do_get(info.endpoints[0].ticket)
            reader.read_chunk()
            reader.cancel()
            client.close()
            ends = _wait_end(logs, 2)
    finally:
        running.stop(grace_s=5)
    starts = _events(logs, "flight.stream.start")
    assert len(starts) == 2
    first = starts[0]
    assert {k: first[k] for k in ("plan", "epoch", "rank", "world_size", "start_batch")} == {
        "plan": "p", "epoch": 2, "rank": 0, "world_size": 1, "start_batch": 1}
    assert first["peer"].startswith("ipv4:127.0.0.1:")
    assert first["log_level"] == "info"
    done = ends[0]
    assert done["outcome"] == "completed"
    assert done["batches"] == len(got)
    # Arrow bytes as built on the server (buffers may be laid out a bit differently
    # once received)
    assert done["bytes"] == pytest.approx(sum(r.batch.nbytes for r in got), rel=0.05)
    assert done["seconds"] >= 0.0
    assert done["error_type"] is None
    assert ends[1]["outcome"] == "cancelled"
    assert ends[1]["batches"] < len(got) + 1
    # nothing is logged per batch
    assert len(logs) == 4


def _copy_without_a_segment(dataset: Dataset, dest: Path) -> tuple[Dataset, str]:
    shutil.copytree(dataset.root, dest)
    victim = dataset.streams.piece_path[0]
    target = dest / victim
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    copy = Dataset(root=dest, streams=dataset.streams, segments=dataset.segments,
                   data=dataset.data)
    return copy, victim


def test_segment_failures_and_skips_are_logged(dataset: Dataset, tmp_path: Path) -> None:
    broken, victim = _copy_without_a_segment(dataset, tmp_path / "broken")
    plans = {"p": broken.plan(CONFIG, "p")}
    failing = start_server(plans)
    skipping = start_server(plans, on_bad_segment="skip")
    try:
        with capture_logs() as logs:
            with pytest.raises(fl.FlightError):
                consume(failing.location, FlightCommand("p"))
            ends = _wait_end(logs, 1)
            consume(skipping.location, FlightCommand("p"))
            ends = _wait_end(logs, 2)
    finally:
        failing.stop(grace_s=5)
        skipping.stop(grace_s=5)
    failed = _events(logs, "flight.segment.failed")
    assert failed
    assert failed[0]["log_level"] == "error"
    assert victim in failed[0]["path"]
    assert ends[0]["outcome"] == "error"
    assert ends[0]["error_type"] == "segment_error"
    assert ends[0]["log_level"] == "error"
    skipped = _events(logs, "flight.segment.skipped")
    assert skipped
    assert skipped[0]["log_level"] == "warning"
    assert any(victim in s["path"] for e in skipped for s in e["skipped"])
    assert ends[1]["outcome"] == "completed"


@pytest.mark.parametrize("tier_bytes", [None, 32 << 20, 0])
def test_health_states_the_tier_budget_to_authenticated_callers_only(
        tmp_path: Path, tier_bytes: int | None) -> None:
    """The tier's budget and how it was chosen are in ``health`` for a caller
    with a token (``None``: the automatic budget, half the free disk), never for an
    anonymous probe."""
    settings = Settings(flight_host="127.0.0.1", flight_port=0, tier_dir=tmp_path / "tier",
                        tier_bytes=tier_bytes, ticket_secret=SecretStr("test-secret"),
                        admin_token=SecretStr(TOKEN))
    plans: dict[str, PlanContext] = {}
    running = start_flight_server(settings, plan_source=lambda plan_id: plans[plan_id].artifact,
                                  cache_bytes=16 << 20)
    client = fl.connect(running.location)
    try:
        anonymous = json.loads(
            next(iter(client.do_action(fl.Action(ACTION_HEALTH, b"")))).body.to_pybytes())
        authed = json.loads(
            next(iter(client.do_action(fl.Action(ACTION_HEALTH, b""), AUTH))).body.to_pybytes())
    finally:
        client.close()
        running.stop(grace_s=5)
    assert anonymous["status"] == authed["status"] == "ok"
    assert "tier" not in anonymous
    assert set(anonymous) == {"status", "version", "active_streams", "streams"}
    server = running.server
    if tier_bytes == 0:
        assert server.tier is None
        assert authed["tier"] == {"budget_bytes": 0, "budget_source": "off", "used_bytes": 0}
        return
    assert server.tier is not None
    assert authed["tier"] == {"budget_bytes": server.tier.budget_bytes,
                              "budget_source": server.tier.budget_source,
                              "used_bytes": server.tier.used_bytes()}
    if tier_bytes is None:
        assert authed["tier"]["budget_source"].startswith("auto")
        assert authed["tier"]["budget_bytes"] > 0
    else:
        assert authed["tier"] == {"budget_bytes": 32 << 20, "budget_source": "set",
                                  "used_bytes": server.tier.used_bytes()}
    assert str(tmp_path) not in json.dumps(authed)  # the budget, not the tier's path
