"""Faults and hostile-but-small requests against a real Flight server.

A segment truncated or rewritten under a live stream fails that stream with a typed
``segment_changed`` while another plan keeps streaming and the process lives; a
huge world size is refused by its limit, and the largest allowed one costs little
memory; forged-but-signed tickets and unknown plan ids leave nothing behind.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pyarrow.parquet as pq
import pytest

from tests.fixtures.memory import peak_rss_growth
from tests.fixtures.servers import SilentEndpoint
from tests.flight_server.helpers import (
    COLUMNS,
    Dataset,
    StreamSpec,
    consume,
    expected_pass,
    flight_actions,
    iter_consume,
    start_server,
    write_dataset,
)
from windpipe.flight_server.tickets import TicketPayload, sign_ticket
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import ErrorType, Transient
from windpipe.services.contract.wire import ACTION_HEALTH, FlightCommand, error_from_flight

SPECS = [StreamSpec("cycling", f"c{c}", k, (64, 48)) for c in range(3) for k in range(2)]
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=2, seq_len=8), strategy="sequential",
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("robust"), SPECS, fmt="parquet",
                         chunk_rows=16)


def _copy(dataset: Dataset, dest: Path) -> Dataset:
    shutil.copytree(dataset.root, dest)
    return Dataset(root=dest, streams=dataset.streams, segments=dataset.segments,
                   data=dataset.data)


@pytest.mark.parametrize("fault", ["truncate", "rewrite"])
def test_a_segment_changed_under_a_live_stream_fails_that_stream_only(
    dataset: Dataset, tmp_path: Path, fault: str,
) -> None:
    victim = _copy(dataset, tmp_path / "victim")
    last = victim.streams.piece_path[-1]  # read last by a sequential pass
    running = start_server(
        {"victim": victim.plan(CONFIG, "victim"), "p": dataset.plan(CONFIG, "p")},
        readahead_batches=0, auto_blocks=False,
    )
    try:
        healthy = iter_consume(running.location, FlightCommand("p"))
        seen = [next(healthy).meta.batch_idx]
        stream = iter_consume(running.location, FlightCommand("victim"))
        got = [next(stream).meta.batch_idx]
        target = victim.root / last
        if fault == "truncate":
            with target.open("r+b") as f:
                f.truncate(target.stat().st_size // 3)
        else:  # the same rows and row groups, other values
            table = pq.read_table(target)
            doubled = {n: np.asarray(table.column(n).to_numpy(zero_copy_only=False)) * 2
                       for n in table.column_names}
            time.sleep(0.01)  # a distinct mtime on coarse clocks
            pq.write_table(pa.table(doubled), target, row_group_size=16,
                           use_dictionary=False)
        with pytest.raises(fl.FlightError) as exc:
            got.extend(r.meta.batch_idx for r in stream)
        seen.extend(r.meta.batch_idx for r in healthy)
        health = flight_actions(running.location, ACTION_HEALTH)[0]
    finally:
        running.stop(grace_s=5)
    err = error_from_flight(exc.value)
    assert err.type == ErrorType.SEGMENT_CHANGED
    assert err.details["path"] == last
    assert err.details["version_id"] == "v-test"
    assert last in err.message
    assert len(got) > 1  # the stream ran until it reached the changed segment
    assert seen == list(range(len(expected_pass(dataset, CONFIG, epoch=0, rank=0,
                                                world_size=1))))
    assert health["status"] == "ok"  # the process lives


def test_world_size_limit_and_bounded_memory(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")}, max_world_size=4096)
    try:
        with pytest.raises(fl.FlightError) as exc:
            consume(running.location, FlightCommand("p", world_size=100_000_000))
        client = fl.connect(running.location)
        info, growth = peak_rss_growth(lambda: client.get_flight_info(
            FlightCommand("p", rank=4095, world_size=4096).descriptor()))
        client.close()
    finally:
        running.stop(grace_s=5)
    err = error_from_flight(exc.value)
    assert err.type == ErrorType.INVALID_REQUEST
    assert err.details["limit"] == "max_world_size"
    assert err.details["setting"] == "WINDPIPE_MAX_WORLD_SIZE"
    assert info.total_records == 0  # rank 4095 of 4096 has no unit of this small plan
    assert growth < 64 << 20


def test_signed_tickets_out_of_range_are_refused(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    try:
        client = fl.connect(running.location)
        errors = []
        for bad in ({"start_batch": -5}, {"end_batch": -1}, {"rank": 3},
                    {"start_batch": 5, "end_batch": 2}, {"world_size": 1 << 63}):
            fields = {"plan_id": "p", "epoch": 0, "rank": 0, "world_size": 1,
                      "start_batch": 0, "end_batch": 4, **bad}
            ticket = fl.Ticket(sign_ticket(TicketPayload(**fields), b"test-secret"))
            with pytest.raises(fl.FlightError) as exc:
                client.do_get(ticket).read_all()
            errors.append(error_from_flight(exc.value).type)
        client.close()
    finally:
        running.stop(grace_s=5)
    assert errors == [ErrorType.INVALID_TICKET] * 5


def test_unknown_plan_ids_leave_nothing_behind(dataset: Dataset) -> None:
    running = start_server({"p": dataset.plan(CONFIG, "p")})
    try:
        client = fl.connect(running.location)
        kinds = set()
        for i in range(300):
            with pytest.raises(fl.FlightError) as exc:
                client.get_flight_info(FlightCommand(f"p-unknown-{i}").descriptor())
            kinds.add(error_from_flight(exc.value).type)
        with pytest.raises(fl.FlightError) as long_id:
            client.get_flight_info(fl.FlightDescriptor.for_command(  # the client refuses it
                json.dumps({"plan_id": "x" * 5000}).encode()))
        client.close()
        plans = running.server.plans
        assert (len(plans), plans.pending) == (0, 0)
        consume(running.location, FlightCommand("p"))
        assert len(plans) == 1
    finally:
        running.stop(grace_s=5)
    assert kinds == {ErrorType.NOT_FOUND}
    assert error_from_flight(long_id.value).type == ErrorType.INVALID_REQUEST


@pytest.mark.slow
def test_a_store_that_stops_answering_mid_plan_is_unavailable_not_a_bad_segment(
    dataset: Dataset, silent_store: SilentEndpoint, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The data is fine, the object store is not: the stream fails ``unavailable``
    (retryable, naming the segment) once the store's timeout ends each request, never
    retried (``s3_max_retries=0``), the ``skip`` policy drops nothing, and the server
    keeps serving."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    plan = dataset.plan(CONFIG, "hung", root_uri="s3://bucket/prefix")
    running = start_server({"hung": plan}, s3_endpoint=silent_store.url, s3_allow_http=True,
                           s3_timeout_s=1.5, s3_connect_timeout_s=1.0, s3_max_retries=0,
                           on_bad_segment="skip", allowed_roots=("s3://bucket",))
    try:
        with pytest.raises(fl.FlightError) as info:
            consume(running.location, FlightCommand("hung"))
        asked = silent_store.requests()
        err = error_from_flight(info.value)
        health = flight_actions(running.location, ACTION_HEALTH)
    finally:
        running.stop(grace_s=5)
    assert err.type == ErrorType.UNAVAILABLE, err
    assert err.details["path"] in dataset.segments
    assert isinstance(err, Transient)
    assert "127.0.0.1" not in err.message  # the store's address stays in the server log
    # the store's timeout ended each request, none retried: each asked at most twice (the
    # read-ahead's request, then the read's own), where obstore's retries would ask on
    # and on for minutes
    assert asked
    assert max(Counter(asked).values()) <= 2, sorted(asked)
    assert health
