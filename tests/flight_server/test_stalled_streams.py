"""Flight clients that stop reading hold little, and not for long.

A server serves at most ``flight_max_streams`` streams at once (one more is refused with
``unavailable``, retryable, before anything is built), builds nothing ahead of a client
that is not reading beyond gRPC's flow-control window, and ends a stream whose client
took no batch for ``flight_stream_stall_s`` (its connection is closed), which frees the
stream's slot, its gRPC thread and its build-ahead thread; a stopping server closes those
still open at its grace deadline. A real Flight server on
loopback in this process: its gRPC threads, one per call being served plus a few idle
ones, are counted by their name (``grpcpp_sync_server``) in ``/proc/self/task``.
Every wait polls a condition (pytest-timeout bounds it); no duration is asserted.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest
from structlog.testing import capture_logs

from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    StreamSpec,
    consume,
    start_server,
    write_dataset,
)
from windpipe.flight_server.runner import RunningFlightServer
from windpipe.flight_server.stream_slots import StreamSlots, shutdown_peer
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType, Transient, Unavailable
from windpipe.services.contract.wire import FlightCommand, error_from_flight

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts threads in /proc/self/task")

CAP = 3
STALL_S = 2.0
IDLE_GRPC_THREADS = 4  # threads gRPC's server keeps waiting for calls (1 to 3 seen)
# more than gRPC holds of a stream its client is not reading, with a fixed 64 KiB window
GRPC_BUFFER_BYTES = 1 << 20
SPECS = [StreamSpec("cycling", f"c{c}", 0, (2000,)) for c in range(4)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=32, seq_len=128, step_rows=32),
    strategy="sequential",
)  # 252 batches of ~40 KiB: a pass far longer than gRPC's buffers


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("stalled"), SPECS, chunk_rows=256)


def _start(dataset: Dataset, **settings: Any) -> RunningFlightServer:
    return start_server({"p": dataset.plan(CONFIG, "p")}, flight_max_streams=CAP,
                        **settings)


def _grpc_server_threads() -> int:
    """This process's gRPC server threads (the kernel keeps 15 characters of a name)."""
    count = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            count += (task / "comm").read_text().startswith("grpcpp_sync_ser")
        except OSError:  # the thread ended meanwhile
            continue
    return count


def _build_ahead_threads() -> int:
    return sum(t.name == "windpipe-build-ahead" for t in threading.enumerate())


def _wait_for(condition: Callable[[], bool]) -> None:
    while not condition():
        time.sleep(0.02)


def _sample(running: RunningFlightServer, name: str, **labels: str) -> float:
    value = running.server.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _blocked_streams(running: RunningFlightServer, *, held_s: float = 0.2) -> int:
    """Streams whose batch gRPC has held ``held_s`` without being asked for the next: on
    loopback, streams blocked writing to a client that is not reading."""
    slots = running.server.slots
    now = slots.clock()
    return sum(1 for slot in slots.open_slots()
               if (at := slot.handed_at) is not None and now - at >= held_s)


@contextmanager
def _readers_that_stop(location: str, n: int) -> Iterator[list[Any]]:
    """``n`` streams of the pass, each on its own connection, read one batch and then left
    unread (cancelled at exit). gRPC's flow-control window is fixed (no BDP probing), so
    the server soon cannot send more."""
    clients: list[fl.FlightClient] = []
    readers: list[Any] = []
    try:
        for _ in range(n):
            client = fl.connect(location, generic_options=[("grpc.http2.bdp_probe", 0)])
            clients.append(client)
            info = client.get_flight_info(FlightCommand("p").descriptor())
            reader = client.do_get(info.endpoints[0].ticket)
            reader.read_chunk()
            readers.append(reader)
        yield readers
    finally:
        for reader in readers:
            reader.cancel()
        for client in clients:
            client.close()


def _refused(location: str) -> BaseException:
    client = fl.connect(location)
    try:
        ticket = client.get_flight_info(FlightCommand("p").descriptor()).endpoints[0].ticket
        with pytest.raises(fl.FlightError) as info:
            client.do_get(ticket).read_chunk()
    finally:
        client.close()
    return info.value


def test_streams_over_the_cap_are_refused_unavailable_and_server_threads_stay_bounded(
    dataset: Dataset,
) -> None:
    others = _grpc_server_threads()  # of servers other tests of this process left running
    running = _start(dataset)
    try:
        with _readers_that_stop(running.location, CAP):
            # each stream's gRPC thread is blocked writing to a client that is not reading
            _wait_for(lambda: _grpc_server_threads() >= others + CAP)
            errors = [_refused(running.location) for _ in range(4 * CAP)]
            # the refused calls' threads went back; the stalled streams keep theirs (their
            # stall timeout, 600 s by default, is far away)
            _wait_for(lambda: _grpc_server_threads() <= others + CAP + IDLE_GRPC_THREADS)
            assert len(running.server.slots) == CAP
        _wait_for(lambda: len(running.server.slots) == 0)  # the cancelled ones are freed
        got = consume(running.location, FlightCommand("p"))  # and a new stream is served
        refused = _sample(running, "windpipe_flight_refused_streams_total")
    finally:
        running.stop(grace_s=5)
    for exc in errors:
        assert isinstance(exc, fl.FlightUnavailableError)
        err = error_from_flight(exc)
        assert err.type == ErrorType.UNAVAILABLE
        assert isinstance(err, Transient)  # retryable
        assert err.details["limit"] == "flight_max_streams"
        assert err.details["max"] == CAP
        assert err.details["setting"] == "WINDPIPE_FLIGHT_MAX_STREAMS"
    assert refused == 4 * CAP
    assert [r.meta.batch_idx for r in got] == list(range(len(got)))
    assert len(got) > 4 * (GRPC_BUFFER_BYTES // got[1].batch.nbytes)


@pytest.mark.parametrize("build_ahead_bytes", [0, 1 << 20])
def test_a_stalled_stream_is_ended_and_frees_its_slot_and_its_threads(
    dataset: Dataset, build_ahead_bytes: int,
) -> None:
    others = _grpc_server_threads()  # of servers other tests of this process left running
    running = _start(dataset, flight_stream_stall_s=STALL_S,
                     build_ahead_bytes=build_ahead_bytes)
    try:
        with capture_logs() as logs, _readers_that_stop(running.location, CAP) as readers:
            _wait_for(lambda: _sample(running, "windpipe_flight_streams_total",
                                      outcome="stalled") == CAP)
            _wait_for(lambda: len(running.server.slots) == 0)
            _wait_for(lambda: _grpc_server_threads() <= others + IDLE_GRPC_THREADS)
            _wait_for(lambda: _build_ahead_threads() == 0)
            ends = [_read_to_the_end(reader) for reader in readers]
        got = consume(running.location, FlightCommand("p"))  # the slots serve again
    finally:
        running.stop(grace_s=5)
    stalled = [e for e in logs if e["event"] == "flight.stream.stalled"]
    assert len(stalled) == CAP
    assert all(e["connection_closed"] for e in stalled)
    assert all(e["waited_s"] >= STALL_S for e in stalled)
    # nothing was built for a client that was not reading beyond gRPC's buffers
    most = 1 + GRPC_BUFFER_BYTES // got[1].batch.nbytes
    assert all(e["batches"] <= most for e in stalled), [e["batches"] for e in stalled]
    assert len(got) > 4 * most
    for read, exc in ends:  # each client read what gRPC held, then lost the stream
        assert read < most
        assert exc is not None, "a stalled stream ran to its end"
        assert error_from_flight(exc).type == ErrorType.UNAVAILABLE


def test_stop_ends_the_streams_of_clients_that_stopped_reading(dataset: Dataset) -> None:
    """gRPC's shutdown waits for every call, and a stream blocked on a client that is not
    reading never ends by itself (its stall timeout, 600 s by default, is far away): stop
    closes the connections of the streams still open at its grace deadline."""
    others = _grpc_server_threads()  # of servers other tests of this process left running
    running = _start(dataset)
    try:
        with capture_logs() as logs, _readers_that_stop(running.location, 2) as readers:
            _wait_for(lambda: _blocked_streams(running) == 2)
            assert running.stop(grace_s=0.2), "the server did not stop"
            _wait_for(lambda: _grpc_server_threads() <= others)  # the calls' threads too
            ends = [_read_to_the_end(reader) for reader in readers]
    finally:
        running.stop(grace_s=5)
    ended = [e for e in logs if e["event"] == "flight.stream.ended_at_stop"]
    assert len(ended) == 2
    assert all(e["connection_closed"] for e in ended)
    for _, exc in ends:
        assert exc is not None, "a stream left open at stop ran to its end"
        assert error_from_flight(exc).type == ErrorType.UNAVAILABLE


def _read_to_the_end(reader: Any) -> tuple[int, BaseException | None]:
    """How many more batches a reader gets, and the error that ended its stream."""
    read = 0
    while True:
        try:
            reader.read_chunk()
        except StopIteration:
            return read, None
        except fl.FlightError as exc:
            return read, exc
        read += 1


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_stall_clock_counts_only_the_wait_on_the_client() -> None:
    clock, ended = _Clock(), []
    slots = StreamSlots(max_streams=2, stall_s=10.0, clock=clock,
                        on_stall=lambda slot, waited: ended.append((slot.plan, waited)))
    building = slots.acquire(peer="ipv4:127.0.0.1:1", plan="building")
    waiting = slots.acquire(peer="ipv4:127.0.0.1:2", plan="waiting")
    waiting.handed()
    building.handed()
    clock.now = 5.0
    building.taken()  # gRPC asked for the next batch: building it takes 30 s
    clock.now = 9.9
    assert slots.check() == []
    clock.now = 35.0
    assert slots.check() == [waiting]
    assert slots.check() == []  # ended once
    building.handed()
    clock.now = 44.0
    assert slots.check() == []
    assert ended == [("waiting", 35.0)]
    with pytest.raises(Unavailable):
        slots.acquire(peer="ipv4:127.0.0.1:3", plan="third")
    waiting.release()
    waiting.release()  # once only: the other slot stays taken
    assert len(slots) == 1
    slots.acquire(peer="ipv4:127.0.0.1:3", plan="third")
    slots.close()
    # a peer that is no TCP connection of this process is not ended
    assert not shutdown_peer("unix:/tmp/flight.sock", port=1)
    assert not shutdown_peer("ipv4:127.0.0.1:1", port=1)
