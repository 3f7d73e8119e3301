"""A token revoked while its stream runs ends that stream: the Flight
server checks the caller again between batches, at most every ``STREAM_AUTH_CHECK_S``
seconds and through its access layer's cache (``auth_cache_s``), so the stream ends with
``unauthenticated`` within ``auth_cache_s + STREAM_AUTH_CHECK_S`` of the revocation
(docs/security.md states the bound and what this test measured: it prints the times,
asserting what the reader sees, not how long it took). Real catalog and Flight server, in
both deployment shapes (tokens from the database, or over REST)."""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from tests.catalog.api_support import write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe._serving import serve_flight
from windpipe.flight_server.stream_checks import STREAM_AUTH_CHECK_S, StreamAuth
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.errors import ErrorType, Unauthenticated, WindpipeError
from windpipe.services.contract.wire import FlightCommand, error_from_flight
from windpipe.services.settings import Settings

BOOT = "revocation-boot-token"
AUTH_CACHE_S = 1.0
BOUND_S = AUTH_CACHE_S + STREAM_AUTH_CHECK_S
PLAN = {"default_window": {"batch_size": 1, "seq_len": 2},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def _world(sqlite_url: str, tmp_path: Path, *, shape: str) -> Iterator[dict[str, Any]]:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), ticket_secret=SecretStr("revocation-secret"),
                        flight_host="127.0.0.1", tier_bytes=0, auth_cache_s=AUTH_CACHE_S,
                        readahead_batches=0, log_level="WARNING")
    root = write_small_dataset(tmp_path / "data", n_cells=4, n_cycles=16).parent
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(settings))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=60,
                                                  headers=_auth(BOOT)))
        v = client.post("/v1/datasets/lab/versions",
                        json={"root": root.as_uri(), "manifest": "manifest.parquet"})
        s = client.post(f"/v1/versions/{v.json()['id']}/splits",
                        json={"strategy": "sample", "fraction": 0.0})
        p = client.post(f"/v1/splits/{s.json()['id']}/plans", json=PLAN)
        assert p.status_code == 201, p.text
        token = client.post("/v1/tokens", json={"name": "r", "role": "reader"}).json()["token"]
        flight_settings = (settings.model_copy(update={"catalog_url": url, "database_url": None})
                           if shape == "rest" else settings)
        running = serve_flight(flight_settings, port=0)
        stack.callback(running.stop, grace_s=5)
        # a fixed flow-control window (no BDP probing): the server cannot run megabytes
        # ahead of this slow reader, so what the reader sees is what the server does
        flight = fl.connect(running.location, generic_options=[("grpc.http2.bdp_probe", 0)])
        stack.callback(flight.close)
        yield {"client": client, "flight": flight, "plan": p.json()["id"], "token": token,
               "batches": p.json()["n_batches"]}


@pytest.mark.parametrize("shape", ["database", "rest"])
def test_a_revoked_token_ends_its_running_stream_within_the_bound(
    sqlite_url: str, tmp_path: Path, shape: str,
) -> None:
    with _world(sqlite_url, tmp_path, shape=shape) as w, capture_logs() as logs:
        opts = fl.FlightCallOptions(headers=flight_headers(w["token"]))
        info = w["flight"].get_flight_info(FlightCommand(w["plan"]).descriptor(), opts)
        assert len(info.endpoints) == 1
        started = time.monotonic()
        reader = w["flight"].do_get(info.endpoints[0].ticket, opts)
        before = 0
        while before < 20:  # the stream runs
            reader.read_chunk()
            before += 1
        assert w["client"].delete("/v1/tokens/r").status_code == 204
        revoked = time.monotonic()
        after, error = 0, None
        while True:  # to the end of the pass at most: the pass is far longer than the bound
            try:
                reader.read_chunk()
            except StopIteration:
                break
            except fl.FlightError as exc:
                error = exc
                break
            after += 1
            time.sleep(0.005)  # a consumer that trains on each batch
        took = time.monotonic() - revoked
        reader.cancel()
        end = _stream_end(logs)
    server_took = started + end["seconds"] - revoked  # when the server ended the stream
    print(f"[{shape}] revoked after {before} batches; the server ended the stream "
          f"{server_took:.2f} s later, after {end['batches'] - before} more batches; the "
          f"reader got the error {took:.2f} s and {after} batches later (bound {BOUND_S:.1f} s)")
    assert error is not None, f"streamed to the end, {took:.1f} s after the revocation"
    assert (end["outcome"], end["error_type"]) == ("error", "unauthenticated")
    assert isinstance(error, fl.FlightUnauthenticatedError)
    err = error_from_flight(error)
    assert err is not None
    assert err.type == ErrorType.UNAUTHENTICATED
    assert err.details["next_batch"] > before
    assert before + after < w["batches"]  # it ended early: the pass was not over


def _stream_end(logs: list[MutableMapping[str, Any]]) -> MutableMapping[str, Any]:
    """The server's ``flight.stream.end`` event, once logged (pytest-timeout bounds it)."""
    while True:
        ends = [e for e in logs if e["event"] == "flight.stream.end"]
        if ends:
            return ends[0]
        time.sleep(0.02)


class _Access:
    """An access layer that says what the test tells it to."""

    def __init__(self) -> None:
        self.answer: Exception | None = None
        self.calls = 0

    def authenticate(self, token: str | None) -> Any:
        self.calls += 1
        if self.answer is not None:
            raise self.answer
        return _PRINCIPAL

    def authorize_plan(self, token: str | None, principal: Any, plan_id: str) -> None:
        """Every plan."""


class _Principal:
    name = "r"


_PRINCIPAL = _Principal()


def test_the_recheck_is_rate_limited_and_survives_a_short_outage() -> None:
    access, now = _Access(), [0.0]
    auth = StreamAuth(access, token="t", principal=_PRINCIPAL,  # type: ignore[arg-type]
                      plan_id="p", trust_s=3.0, every_s=1.0, clock=lambda: now[0])
    for step in range(100):  # 100 batches in 0.99 s: no check at all
        now[0] = step / 100
        auth.check(next_batch=step)
    assert access.calls == 0
    now[0] = 1.0
    auth.check(next_batch=100)
    assert access.calls == 1
    access.answer = RuntimeError("database is down")  # not a refusal: keep streaming ...
    for t in (2.0, 3.0):
        now[0] = t
        auth.check(next_batch=0)
    now[0] = 4.0  # ... until the last positive answer is trust_s old
    with pytest.raises(WindpipeError) as info:
        auth.check(next_batch=7)
    assert info.value.type == ErrorType.UNAVAILABLE
    assert info.value.details["next_batch"] == 7
    access.answer = Unauthenticated("the token was revoked")
    now[0] = 6.0
    with pytest.raises(WindpipeError) as info:
        auth.check(next_batch=9)
    assert info.value.type == ErrorType.UNAUTHENTICATED
    assert "revoked" in info.value.message
    open_server = StreamAuth(None, token=None, principal=_PRINCIPAL,  # type: ignore[arg-type]
                             plan_id="p", trust_s=0.0, clock=lambda: 1e9)
    open_server.check(next_batch=0)  # a server without tokens checks nothing
