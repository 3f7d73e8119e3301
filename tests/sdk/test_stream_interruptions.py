"""A pass survives any number of lost streams, and waits for a server at its stream cap.

A real Flight server on loopback. A reader that pauses past the server's
``flight_stream_stall_s`` loses its stream at every pause (the server closes its
connection); the SDK resumes at the next batch each time, however many times it happens
in one pass: its failover budget counts failovers since the last batch, not in the whole
pass. A server that refuses a stream at its ``flight_max_streams`` cap is alive and will
have a free stream soon: the reader waits for it (refusals are not failovers). Every wait
polls a condition (pytest-timeout bounds it); no duration is asserted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow.flight as fl
import pytest

from tests.flight_server.helpers import COLUMNS, Dataset, StreamSpec, start_server, write_dataset
from windpipe.flight_server.runner import RunningFlightServer
from windpipe.sdk._stream import FlightStream
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import FlightCommand

MAX_FAILOVERS = 1  # failovers in a row the reader allows (once: in a whole pass)
PAUSES = MAX_FAILOVERS + 2
STALL_S = 0.5
SPECS = [StreamSpec("cycling", f"c{c}", 0, (2000,)) for c in range(32)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=32, seq_len=128, step_rows=32),
    strategy="sequential",
)  # ~2000 batches of ~40 KiB. The SDK's client lets gRPC grow its window: a stream whose
# client stops reading is ended with ~300 batches (12 MiB) in gRPC's and TCP's buffers,
# which the client still reads, so each pause moves the pass that far: the pass is longer
# than PAUSES + 1 of those


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("interruptions"), SPECS, chunk_rows=256)


def _wait_for(condition: Callable[[], bool]) -> None:
    while not condition():
        time.sleep(0.02)


def _sample(running: RunningFlightServer, name: str, **labels: str) -> float:
    value = running.server.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _stalled(running: RunningFlightServer) -> float:
    return _sample(running, "windpipe_flight_streams_total", outcome="stalled")


def test_a_reader_that_keeps_pausing_past_the_stall_timeout_gets_the_whole_pass_once(
    dataset: Dataset,
) -> None:
    plan = dataset.plan(CONFIG, "p")
    n_batches = plan.schedule(0).n_batches
    running = start_server({"p": plan}, flight_stream_stall_s=STALL_S)
    stream = FlightStream([running.location], max_failovers=MAX_FAILOVERS)
    seen: list[int] = []
    pauses = 0
    failovers = -1  # pause at the first batch of every stream (the pass's first too)
    try:
        for _, meta in stream.batches(FlightCommand("p")):
            seen.append(meta.batch_idx)
            if stream.counters.failovers != failovers and pauses < PAUSES:
                failovers = stream.counters.failovers
                # a training step longer than the stall timeout: the server ends the stream
                ended = _stalled(running)
                _wait_for(lambda ended=ended: _stalled(running) > ended)
                pauses += 1
    finally:
        stream.close()
        running.stop(grace_s=5)
    assert pauses == PAUSES
    assert stream.counters.failovers >= PAUSES > MAX_FAILOVERS
    assert seen == list(range(n_batches))  # none lost, none twice, in order


def test_a_reader_refused_at_the_stream_cap_waits_for_a_free_stream(
    dataset: Dataset,
) -> None:
    """The server serves one stream, held by another reader that stops reading, then
    leaves once the server refused the SDK's reader a few times: the SDK's reader was
    waiting, not failing over (one failover would have been all it was allowed)."""
    plan = dataset.plan(CONFIG, "p")
    n_batches = plan.schedule(0).n_batches
    running = start_server({"p": plan}, flight_max_streams=1)
    # a fixed 64 KiB window (no BDP probing): the holder's stream stays open unread
    holder = fl.connect(running.location, generic_options=[("grpc.http2.bdp_probe", 0)])
    reader = holder.do_get(
        holder.get_flight_info(FlightCommand("p").descriptor()).endpoints[0].ticket)
    reader.read_chunk()
    stream = FlightStream([running.location], max_failovers=1)
    got: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            got.extend(meta.batch_idx for _, meta in stream.batches(FlightCommand("p")))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=read)
    try:
        thread.start()
        refused = "windpipe_flight_refused_streams_total"
        _wait_for(lambda: _sample(running, refused) >= 3 or not thread.is_alive())
        reader.cancel()  # the holder leaves: its stream's slot is freed
        holder.close()
        thread.join()
    finally:
        stream.close()
        running.stop(grace_s=5)
    assert not errors, errors
    assert got == list(range(n_batches))
    assert stream.counters.busy >= 3
    assert stream.counters.failovers == 0
