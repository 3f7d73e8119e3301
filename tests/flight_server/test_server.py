"""The Flight server: tickets, resumption, faults, cache behaviour while streaming, actions."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.flight as fl
import pytest
from pydantic import SecretStr

from tests.fixtures.servers import free_ports
from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    StreamSpec,
    assert_pass_equal,
    cache_stats,
    consume,
    expected_pass,
    flight_actions,
    iter_consume,
    start_server,
    write_dataset,
)
from windpipe.flight_server.config import FlightServerConfig
from windpipe.flight_server.tickets import TICKET_PREFIX, TicketPayload, sign_ticket, verify_ticket
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType
from windpipe.services.contract.wire import (
    ACTION_HEALTH,
    ACTION_WARM,
    ACTIONS,
    META_PLAN_ID,
    META_WIRE_VERSION,
    BatchMetadata,
    FlightCommand,
    batch_schema,
    error_from_flight,
)
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.settings import Settings

SPECS = [
    StreamSpec("cycling", f"c{c}", k, (60, 45)) for c in range(3) for k in range(2)
]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8), strategy="shuffled", seed=11,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("srv"), SPECS, fmt="mixed", chunk_rows=16)


@pytest.fixture
def server(dataset: Dataset) -> Any:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    yield running
    running.stop(grace_s=5)


@pytest.mark.parametrize("wire", [None, 1, 2])
def test_raw_pyarrow_flight_consumer(dataset: Dataset, server: Any, wire: int | None) -> None:
    """No SDK and no helper decoding: plain pyarrow.flight and numpy, in either wire version
    (a command without ``v`` is v1)."""
    client = fl.connect(server.location)
    body = {"plan_id": "p", "epoch": 2, "rank": 0, "world_size": 1}
    if wire is not None:
        body["v"] = wire
    cmd = json.dumps(body).encode()
    info = client.get_flight_info(fl.FlightDescriptor.for_command(cmd))
    assert info.schema.metadata[META_PLAN_ID] == b"p"
    assert info.schema.metadata[META_WIRE_VERSION] == str(wire or 1).encode()
    assert info.schema.remove_metadata() == batch_schema(wire=wire or 1).remove_metadata()
    want = expected_pass(dataset, CONFIG, epoch=2, rank=0, world_size=1)
    assert info.total_records == sum(len(b.lanes) for b, _ in want)
    rows = 0
    for ep in info.endpoints:
        for i, chunk in enumerate(client.do_get(ep.ticket)):
            meta = json.loads(chunk.app_metadata.to_pybytes())
            batch = chunk.data
            t, c_in, c_out = meta["seq_len"], meta["c_in"], meta["c_out"]
            if wire == 2:  # one window block a batch: inputs and targets are views of it
                windows = np.asarray(batch.column("windows").values).reshape(
                    batch.num_rows, t + 1, c_in + c_out)
                inputs, targets = windows[:, :t, :c_in], windows[:, 1:, c_in:]
            else:
                inputs = np.asarray(batch.column("inputs").values).reshape(
                    batch.num_rows, t, c_in)
                targets = np.asarray(batch.column("targets").values).reshape(
                    batch.num_rows, t, c_out)
            mask = np.asarray(batch.column("mask").values).reshape(batch.num_rows, t)
            ref_inputs, ref_targets, ref_mask = want[i][1]
            np.testing.assert_allclose(inputs, ref_inputs, rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(targets, ref_targets, rtol=2e-6, atol=1e-6)
            np.testing.assert_array_equal(mask.astype(bool), ref_mask)
            assert meta["input_columns"] == list(COLUMNS["cycling"])
            rows += batch.num_rows
    assert rows == info.total_records
    client.close()


def test_resume_is_the_tail_byte_for_byte(server: Any) -> None:
    full = consume(server.location, FlightCommand("p", epoch=1, rank=1, world_size=2))
    assert len(full) > 6
    for start in (1, 5, len(full) - 1, len(full)):
        tail = consume(server.location, FlightCommand("p", epoch=1, rank=1, world_size=2,
                                                      start_batch=start))
        assert len(tail) == len(full) - start
        for a, b in zip(full[start:], tail, strict=True):
            assert a.batch.serialize().to_pybytes() == b.batch.serialize().to_pybytes()
            assert a.meta == b.meta


def test_forged_and_altered_tickets_are_refused(server: Any) -> None:
    client = fl.connect(server.location)
    info = client.get_flight_info(FlightCommand("p").descriptor())
    good = info.endpoints[0].ticket.ticket
    payload = verify_ticket(good, b"test-secret")
    assert payload.plan_id == "p"
    forged = sign_ticket(TicketPayload("p", 0, 0, 1, 0, 10**6), b"guessed-secret")
    head, _, mac = good.rpartition(b".")
    altered = head[:-2] + (b"AA" if head[-2:] != b"AA" else b"BB") + b"." + mac
    # correctly signed but not a v1 payload (only someone holding the secret could do this)
    not_an_object = _signed(b"[1, 2]", b"test-secret")
    no_version = _signed(b'{"plan_id": "p"}', b"test-secret")
    for bad in (forged, altered, b"garbage", good + b"x", not_an_object, no_version):
        with pytest.raises(fl.FlightUnauthorizedError) as exc:
            client.do_get(fl.Ticket(bad)).read_all()
        err = error_from_flight(exc.value)
        assert err is not None
        assert err.type == ErrorType.INVALID_TICKET
    client.close()


def _signed(payload: bytes, secret: bytes) -> bytes:
    """A ticket with the right prefix and MAC around an arbitrary payload."""
    body = TICKET_PREFIX + base64.urlsafe_b64encode(payload).rstrip(b"=")
    mac = hmac.new(secret, body, hashlib.sha256).digest()
    return body + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")


def test_unknown_plan_and_bad_command(server: Any) -> None:
    client = fl.connect(server.location)
    with pytest.raises(fl.FlightServerError) as exc:
        client.get_flight_info(FlightCommand("nope").descriptor())
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.NOT_FOUND
    with pytest.raises(fl.FlightServerError) as exc:
        client.get_flight_info(fl.FlightDescriptor.for_command(b'{"plan_id": "p", "x": 1}'))
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.INVALID_REQUEST
    with pytest.raises(fl.FlightServerError) as exc:
        client.get_flight_info(fl.FlightDescriptor.for_path("p"))
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.INVALID_REQUEST
    for body in (b"not json", b"[1]", b'{"plan": "p"}'):
        with pytest.raises(fl.FlightServerError) as exc:
            list(client.do_action(fl.Action(ACTION_WARM, body)))
        err = error_from_flight(exc.value)
        assert err is not None
        assert err.type == ErrorType.INVALID_REQUEST, body
        assert "plan_id" in err.message
    client.close()


@pytest.mark.parametrize("auto_blocks", [False, True])
def test_concurrent_streams_share_chunks_single_flight(dataset: Dataset,
                                                       auto_blocks: bool) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")}, readahead_batches=0,
                           auto_blocks=auto_blocks)
    try:
        results: list[int] = []

        def run() -> None:
            results.append(len(consume(running.location, FlightCommand("p", epoch=0))))

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = cache_stats(running.location)
    finally:
        running.stop(grace_s=5)
    plan = dataset.plan(CONFIG, "p")
    assert len(set(results)) == 1
    assert results[0] > 0
    # chunks, or (the split fits the budget) the plan's blocks: each loaded once
    units = len(block_layouts(plan)) if auto_blocks else int(plan.chunk_piece.shape[0])
    assert stats["misses"] == stats["entries"] == units
    assert stats["evictions"] == 0
    assert stats["pinned_bytes"] == 0


def test_budget_is_never_exceeded_while_streaming(dataset: Dataset) -> None:
    plan = dataset.plan(CONFIG, "p")
    chunk_bytes = 16 * 4 * 4  # 16 rows x (3 inputs + 1 target) float32
    budget = 6 * chunk_bytes  # a batch needs at most 4 chunks
    running = start_server({"p": plan}, cache_bytes=budget, cache_wait_s=10)
    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(cache_stats(running.location))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        got: list[list[Any]] = [[], []]
        threads = [
            threading.Thread(target=lambda k=k: got[k].extend(
                consume(running.location, FlightCommand("p", epoch=k))))
            for k in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        sampler.join()
        final = cache_stats(running.location)
    finally:
        running.stop(grace_s=5)
    for k in range(2):
        assert_pass_equal(got[k], expected_pass(dataset, CONFIG, epoch=k, rank=0,
                                                world_size=1), dataset)
    assert samples
    assert max(s["resident_bytes"] + s["reserved_bytes"] for s in samples) <= budget
    assert final["peak_bytes"] <= budget
    assert final["evictions"] > 0
    assert final["pinned_bytes"] == 0


def test_budget_below_one_batch_is_a_clear_error(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")}, cache_bytes=100)
    try:
        with pytest.raises(fl.FlightServerError) as exc:
            consume(running.location, FlightCommand("p"))
    finally:
        running.stop(grace_s=5)
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.RESOURCE_EXHAUSTED
    assert "--cache-bytes" in err.message


def test_cancel_and_disconnect_release_pins(dataset: Dataset, server: Any) -> None:
    client = fl.connect(server.location)
    info = client.get_flight_info(FlightCommand("p").descriptor())
    reader = client.do_get(info.endpoints[0].ticket)
    reader.read_chunk()
    reader.read_chunk()
    reader.cancel()
    # a client that just goes away mid-stream
    other = fl.connect(server.location)
    r2 = other.do_get(info.endpoints[0].ticket)
    r2.read_chunk()
    other.close()
    client.close()
    stats = cache_stats(server.location)
    while stats["pinned_bytes"] or stats["loads_in_flight"]:  # until released (pytest-timeout)
        time.sleep(0.02)
        stats = cache_stats(server.location)
    assert stats["pinned_bytes"] == 0
    assert stats["loads_in_flight"] == 0
    assert stats["resident_bytes"] + stats["reserved_bytes"] <= stats["budget_bytes"]
    # the server keeps serving complete, correct passes
    got = consume(server.location, FlightCommand("p"))
    assert_pass_equal(got, expected_pass(dataset, CONFIG, epoch=0, rank=0, world_size=1),
                      dataset)


def test_actions_health_stats_and_warm(dataset: Dataset, server: Any) -> None:
    assert flight_actions(server.location, ACTION_HEALTH)[0]["status"] == "ok"
    progress = flight_actions(server.location, ACTION_WARM, json.dumps({"plan_id": "p"}).encode())
    plan = dataset.plan(CONFIG, "p")
    n_chunks = int(plan.chunk_piece.shape[0])
    assert progress[-1]["loaded"] == progress[-1]["total"] == n_chunks
    assert [p["loaded"] for p in progress] == sorted(p["loaded"] for p in progress)
    before = cache_stats(server.location)
    layouts = block_layouts(plan)  # warm loads the plan's blocks: every chunk, end to end
    assert before["entries"] == len(layouts) == 1
    assert before["resident_bytes"] == sum(layout.nbytes for layout in layouts) == int(
        sum(plan.specs[0].nbytes(int(n)) for n in plan.chunk_len))
    consume(server.location, FlightCommand("p", epoch=3))
    after = cache_stats(server.location)
    assert after["misses"] == before["misses"]  # everything was in memory
    assert after["hits"] > before["hits"]


def test_the_actions_are_the_wire_contracts(server: Any) -> None:
    """``list_actions`` and the unknown-action error name
    ``windpipe.services.contract.wire.ACTIONS``."""
    client = fl.connect(server.location)
    try:
        assert tuple(a.type for a in client.list_actions()) == ACTIONS
        with pytest.raises(fl.FlightServerError) as exc:
            list(client.do_action(fl.Action("no-such-action", b"")))
    finally:
        client.close()
    err = error_from_flight(exc.value)
    assert err is not None
    assert (err.type, err.details["actions"]) == (ErrorType.INVALID_REQUEST, list(ACTIONS))


def test_the_server_runs_on_one_config_made_from_the_settings(dataset: Dataset,
                                                              tmp_path: Path) -> None:
    settings = Settings(flight_host="127.0.0.1", readahead_batches=0, endpoint_batches=3,
                        on_bad_segment="skip", ticket_ttl_s=60.0, tier_dir=tmp_path / "t",
                        tier_bytes=1 << 20, auto_blocks=False, build_ahead_bytes=10,
                        ticket_secret=SecretStr("s"), flight_locations=("grpc://x:1",))
    config = FlightServerConfig.from_settings(settings, port=0, cache_bytes=4096)
    knobs = config.settings  # every plain knob is read by its Settings name
    assert (config.host, knobs.flight_port, knobs.cache_bytes, knobs.flight_locations) == (
        "127.0.0.1", 0, 4096, ("grpc://x:1",))
    assert config.bind_location == "grpc://127.0.0.1:0"
    assert (knobs.readahead_batches, knobs.endpoint_batches, knobs.on_bad_segment,
            knobs.ticket_ttl_s, knobs.auto_blocks, knobs.build_ahead_bytes) == (
        0, 3, "skip", 60.0, False, 10)
    assert (config.ticket_secret, config.tier_dir, config.limits) == (
        b"s", tmp_path / "t", knobs.limits())
    assert (settings.flight_port, settings.cache_bytes) != (0, 4096)  # overrides copy
    assert "ticket_secret" not in repr(config)
    assert "settings" not in repr(config)  # it holds the secrets too
    assert FlightServerConfig.from_settings(Settings(tier_bytes=0)).tier_dir is None
    running = start_server({"p": dataset.plan(CONFIG, "p")}, cache_bytes=1 << 20,
                           readahead_batches=0, ticket_ttl_s=60.0)
    try:
        server = running.server
        assert (server.config.settings.readahead_batches,
                server.config.settings.ticket_ttl_s) == (0, 60.0)
        assert (server.cache.budget_bytes, server.tier) == (1 << 20, None)
        assert running.location == server.config.advertised_location(server.port)
    finally:
        running.stop(grace_s=5)


def test_warm_larger_than_budget_fails(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")}, cache_bytes=2048)
    try:
        with pytest.raises(fl.FlightServerError) as exc:
            flight_actions(running.location, ACTION_WARM, json.dumps({"plan_id": "p"}).encode())
    finally:
        running.stop(grace_s=5)
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.RESOURCE_EXHAUSTED


def _copy_dataset(dataset: Dataset, dest: Path) -> Dataset:
    shutil.copytree(dataset.root, dest)
    return Dataset(root=dest, streams=dataset.streams, segments=dataset.segments,
                   data=dataset.data)


def test_missing_segment_fails_that_stream_only(dataset: Dataset, tmp_path: Path) -> None:
    broken = _copy_dataset(dataset, tmp_path / "broken")
    seq = CONFIG.model_copy(update={"strategy": "sequential"})
    victim = broken.streams.piece_path[5]
    running = start_server({"broken": broken.plan(seq, "broken"), "p": dataset.plan(CONFIG, "p")},
                           readahead_batches=0)
    try:
        target = broken.root / victim
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        healthy: list[int] = []
        it = iter_consume(running.location, FlightCommand("p"))
        healthy.append(next(it).meta.batch_idx)
        got: list[Any] = []
        with pytest.raises(fl.FlightError) as exc:
            got.extend(iter_consume(running.location, FlightCommand("broken")))
        healthy.extend(r.meta.batch_idx for r in it)
    finally:
        running.stop(grace_s=5)
    err = error_from_flight(exc.value)
    assert err is not None
    assert err.type == ErrorType.SEGMENT_ERROR
    assert victim in err.message
    assert err.details["path"] == victim
    assert len(got) > 0  # batches before the bad segment arrived
    want = expected_pass(dataset, CONFIG, epoch=0, rank=0, world_size=1)
    assert healthy == list(range(len(want)))


def test_skip_policy_reports_skipped_lanes(dataset: Dataset, tmp_path: Path) -> None:
    broken = _copy_dataset(dataset, tmp_path / "broken")
    seq = CONFIG.model_copy(update={"strategy": "sequential"})
    victim = broken.streams.piece_path[1]
    target = broken.root / victim
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    running = start_server({"b": broken.plan(seq, "b")}, on_bad_segment="skip")
    try:
        got = consume(running.location, FlightCommand("b"))
    finally:
        running.stop(grace_s=5)
    want = expected_pass(dataset, seq, epoch=0, rank=0, world_size=1)
    assert len(got) == len(want)
    skipped = [(r.meta.batch_idx, lane) for r in got for lane in r.meta.skipped_lanes]
    assert skipped
    for r, (_ref, (inputs, _targets, _mask)) in zip(got, want, strict=True):
        bad = {s["lane"] for s in r.meta.skipped_lanes}
        assert all(s["path"] == victim for s in r.meta.skipped_lanes)
        for b in range(r.batch.num_rows):
            if b in bad:
                assert (r.inputs[b] == -2.0).all()
                assert not r.mask[b].any()
                assert r.batch.column("window_offset")[b].as_py() == -1
            else:
                np.testing.assert_allclose(r.inputs[b], inputs[b], rtol=2e-6, atol=1e-6)


def test_two_servers_locality_aware_endpoints(dataset: Dataset) -> None:
    seq = CONFIG.model_copy(update={"strategy": "sequential"})
    plans = {"s": dataset.plan(seq, "s")}
    ports = free_ports(2)
    locs = tuple(f"grpc://127.0.0.1:{p}" for p in ports)
    servers = [start_server(plans, locations=locs, port=p, endpoint_batches=1) for p in ports]
    try:
        client = fl.connect(locs[0])
        info = client.get_flight_info(FlightCommand("s").descriptor())
        client.close()
        assert len(info.endpoints) > 1
        primaries = [ep.locations[0].uri.decode() for ep in info.endpoints]
        assert set(primaries) == set(locs)  # both servers own some segments
        for ep in info.endpoints:
            assert sorted(loc.uri.decode() for loc in ep.locations) == sorted(locs)
        got = consume(locs[1], FlightCommand("s"))  # each endpoint read from its primary
        assert_pass_equal(got, expected_pass(dataset, seq, epoch=0, rank=0, world_size=1),
                          dataset)
        # each server only cached the segments of its own endpoints (plus chunks read across
        # an endpoint edge): the caches are mostly disjoint. Which server owns which segment
        # depends on the (random) ports, so the bound allows a quarter of the chunks on both.
        stats = [cache_stats(loc) for loc in locs]
        assert all(s["entries"] > 0 for s in stats)
        n_chunks = int(plans["s"].chunk_piece.shape[0])
        assert stats[0]["entries"] + stats[1]["entries"] <= n_chunks * 1.25
        # a ticket is redeemable on any server of the deployment
        fb = fl.connect(locs[1] if primaries[0] == locs[0] else locs[0])
        first = fb.do_get(info.endpoints[0].ticket).read_chunk()
        assert BatchMetadata.decode(first.app_metadata).batch_idx == 0
        fb.close()
    finally:
        for s in servers:
            s.stop(grace_s=5)


def test_stop_ends_open_streams_within_deadline(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    client = fl.connect(running.location)
    info = client.get_flight_info(FlightCommand("p").descriptor())
    reader = client.do_get(info.endpoints[0].ticket)
    reader.read_chunk()
    assert running.stop(grace_s=5)  # True: ended within the deadline, the stream cut
    client.close()


@pytest.mark.s3
def test_streams_from_s3(dataset: Dataset, s3_server: Any) -> None:
    uri = s3_server.upload_dir(dataset.root, s3_server.unique_prefix("flight"))
    plan = dataset.plan(CONFIG, "s3", root_uri=uri)
    running = start_server({"s3": plan}, s3_endpoint=s3_server.endpoint_url, s3_allow_http=True)
    try:
        got = consume(running.location, FlightCommand("s3", epoch=1))
        stats = cache_stats(running.location)
    finally:
        running.stop(grace_s=5)
    assert_pass_equal(got, expected_pass(dataset, CONFIG, epoch=1, rank=0, world_size=1),
                      dataset)
    assert stats["bytes_read"] > 0
