"""FlightStream against real pyarrow.flight servers: order, resumption, ranks, failover."""

from __future__ import annotations

import dataclasses
import threading

import pyarrow.flight as fl
import pytest

from tests.fixtures.servers import free_port
from tests.sdk.wire_toys import ToyFlightServer, toy_record
from windpipe._serving import serve_flight
from windpipe.sdk import InternalError, InvalidTicket, NotFound, Unavailable, batch_from_arrow
from windpipe.sdk._aligned import group_parts
from windpipe.sdk._exceptions import error_from_flight
from windpipe.sdk._stream import FlightStream
from windpipe.services.contract.wire import AlignedPart, FlightCommand
from windpipe.services.settings import Settings


@pytest.fixture
def toy():
    server = ToyFlightServer(n_batches=10)
    yield server
    server.shutdown()


def _values(stream: FlightStream, cmd: FlightCommand) -> list[tuple[int, float]]:
    out = []
    for record, meta in stream.batches(cmd):
        batch = batch_from_arrow(record, meta)
        out.append((batch.state.batch_idx, float(batch.inputs[0, 0, 0])))
    return out


def test_full_pass_in_order(toy):
    stream = FlightStream([toy.location])
    got = _values(stream, FlightCommand("p-toy", epoch=2))
    assert got == [(i, 2000.0 + i) for i in range(10)]
    stream.close()


def test_start_batch_yields_the_tail(toy):
    stream = FlightStream([toy.location])
    full = _values(stream, FlightCommand("p-toy"))
    tail = _values(stream, FlightCommand("p-toy", start_batch=6))
    assert tail == full[6:]


def test_ranks_are_disjoint_and_cover(toy):
    stream = FlightStream([toy.location])
    seen = []
    for rank in range(3):
        got = _values(stream, FlightCommand("p-toy", rank=rank, world_size=3))
        assert [i for i, _ in got] == list(range(len(got)))
        seen += [v for _, v in got]
    assert sorted(seen) == [float(g) for g in range(10)]


def test_failover_mid_epoch_no_duplicates_no_skips():
    a = ToyFlightServer(n_batches=12, die_at=5)
    b = ToyFlightServer(n_batches=12)
    a.peers = [b.location]
    b.peers = [a.location]
    try:
        stream = FlightStream([a.location, b.location])
        got = _values(stream, FlightCommand("p-toy"))
        assert got == [(i, float(i)) for i in range(12)]
        assert a.served == 5
        assert b.gets == [5]  # b resumed exactly at the first batch a did not send
        assert stream.counters.failovers == 1
    finally:
        a.shutdown()
        b.shutdown()


def test_failover_inside_an_aligned_batch_resends_it_whole():
    """A server dies after part 0 of an aligned batch: the stream hands out no part of
    it, resumes at that batch elsewhere, and the consumer sees every batch once, whole."""
    a = ToyFlightServer(n_batches=6, die_at=5, parts=2)  # dies after part 0 of batch 2
    b = ToyFlightServer(n_batches=6, parts=2)
    a.peers = [b.location]
    b.peers = [a.location]
    try:
        stream = FlightStream([a.location, b.location])
        got = [(meta.batch_idx, meta.aligned.part if meta.aligned else None)
               for _, meta in stream.batches(FlightCommand("p-toy"))]
        assert got == [(i, k) for i in range(6) for k in range(2)]
        assert b.gets == [2]
        assert stream.counters.failovers == 1
        batches = list(group_parts(stream.batches(FlightCommand("p-toy", start_batch=4)),
                                   batch_from_arrow))
        assert [(x.batch_idx, x.protocols) for x in batches] == [(4, ("p0", "p1")),
                                                                 (5, ("p0", "p1"))]
    finally:
        a.shutdown()
        b.shutdown()


def test_all_servers_down_is_unavailable():
    a = ToyFlightServer()
    location = a.location
    a.shutdown()
    stream = FlightStream([location])
    with pytest.raises(Unavailable, match="no Flight server answered"):
        list(stream.batches(FlightCommand("p-toy")))


def test_a_flight_server_without_its_catalog_says_so() -> None:
    """A real Flight server whose catalog (REST plan source) is down: the SDK's
    ``Unavailable`` carries the server's own message and details, not just 'no answer'."""
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = Settings(flight_host="127.0.0.1", catalog_url=dead, log_level="WARNING")
    running = serve_flight(settings, port=0)
    stream = FlightStream([running.location])
    try:
        with pytest.raises(Unavailable) as info:
            list(stream.batches(FlightCommand("p-somewhere")))
    finally:
        stream.close()
        running.stop(grace_s=5)
    assert "cannot reach its catalog" in info.value.message
    # The catalog's address is the server's business: it goes to the log, not the answer
    # (the call is authenticated through the catalog before any plan is read).
    assert dead.split("//")[1] not in f"{info.value.message} {info.value.details}"


def test_envelope_errors_are_typed_and_not_retried(toy):
    stream = FlightStream([toy.location])
    with pytest.raises(NotFound, match="unknown plan 'p-nope'"):
        list(stream.batches(FlightCommand("p-nope")))
    client = fl.connect(toy.location)
    with pytest.raises(fl.FlightUnauthorizedError) as info:
        client.do_get(fl.Ticket(b'{"forged": true}')).read_all()
    err = error_from_flight(info.value)
    assert isinstance(err, InvalidTicket)
    assert "signature" in err.message
    client.close()


def test_early_break_cancels_the_stream(toy):
    toy.delay_s = 0.01
    stream = FlightStream([toy.location])
    it = stream.batches(FlightCommand("p-toy"))
    first = next(it)
    assert first[1].batch_idx == 0
    it.close()
    done = threading.Event()

    def again() -> None:
        assert len(list(stream.batches(FlightCommand("p-toy", start_batch=8)))) == 2
        done.set()

    t = threading.Thread(target=again)
    t.start()
    t.join(timeout=10)
    assert done.is_set()


def test_parts_out_of_order_or_cut_short_are_refused():
    def parts(order: list[int]) -> list[tuple[object, object]]:
        out = []
        for k in order:
            record, meta = toy_record(0, 0, 0)
            out.append((record, dataclasses.replace(meta, aligned=AlignedPart(
                protocol=f"p{k}", part=k, parts=2, has_data=(1, 0)))))
        return out

    (whole,) = group_parts(parts([0, 1]), batch_from_arrow)
    assert whole.has_data["p1"].tolist() == [True, False]
    with pytest.raises(InternalError, match="part 1 arrived after 0"):
        list(group_parts(parts([1, 0]), batch_from_arrow))
    with pytest.raises(InternalError, match="ended inside an aligned batch"):
        list(group_parts(parts([0]), batch_from_arrow))
