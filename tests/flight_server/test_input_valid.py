"""``input_valid`` over Flight (SEMANTICS 5b, docs/wire.md): a command that asks for it gets
a last ``input_valid`` column equal to the reference read from the files and to the
in-process builder's bytes; one that does not gets the stream it always got."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from tests.flight_server.helpers import Dataset, consume, flight_actions, start_server
from tests.services.materialize.test_input_valid import (
    SPECS,
    config_of,
    reference_for,
    write_special_dataset,
)
from windpipe.flight_server.tickets import TicketPayload, sign_ticket, verify_ticket
from windpipe.services.contract.errors import InvalidRequest
from windpipe.services.contract.wire import (
    ACTION_WARM,
    INPUT_VALID_COLUMN,
    FlightCommand,
    batch_arrays,
    batch_schema,
)
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.storage.store import Storage

NAMES = ("sequential", "shuffled", "stateful-all-shuffled", "chain", "aligned")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_special_dataset(tmp_path_factory.mktemp("flight-input-valid"), SPECS, seed=8)


@pytest.fixture(scope="module")
def server(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Any:
    plans = {name: dataset.plan(config_of(name), plan_id=name) for name in NAMES}
    running = start_server(plans, tier_dir=tmp_path_factory.mktemp("flight-iv-tier"))
    yield running
    running.stop(grace_s=5)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("wire", [2, 1])
def test_streamed_input_valid_is_the_reference_and_the_in_process_bytes(
    dataset: Dataset, server: Any, name: str, wire: int,
) -> None:
    config = config_of(name)
    plan = dataset.plan(config, plan_id=name).with_input_valid()
    builder = BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20),
                           batch_schema(input_valid=True), blocks="auto", lazy_provenance=True)
    filled = 0
    for epoch, rank, world in ((0, 0, 1), (1, 1, 2)):
        command = FlightCommand(name, epoch=epoch, rank=rank, world_size=world, wire=wire)
        plain = consume(server.location, command)
        got = consume(server.location, FlightCommand(
            name, epoch=epoch, rank=rank, world_size=world, wire=wire, input_valid=True))
        want = reference_for(dataset, config, plan, epoch=epoch, rank=rank, world_size=world)
        schedule = plan.schedule(epoch)
        batches = rank_batches(schedule, rank=rank, world_size=world,
                               drop_incomplete_distributed=config.drop_incomplete_distributed)
        assert len(got) == len(plain) == len(want) == batches.shape[0] > 0
        for i, (r, p) in enumerate(zip(got, plain, strict=True)):
            assert INPUT_VALID_COLUMN not in p.batch.schema.names
            assert r.batch.schema.names == [*p.batch.schema.names, INPUT_VALID_COLUMN]
            for column in p.batch.schema.names:  # every other column: the plain bytes
                assert _same(r.batch.column(column), p.batch.column(column)), (i, column)
            valid = batch_arrays(r.batch, r.meta).input_valid
            assert valid is not None
            np.testing.assert_array_equal(valid, want[i], err_msg=f"{name} batch {i}")
            here = builder.build_arrays(schedule, int(batches[i]), batch_idx=i).input_valid
            assert here is not None
            assert here.tobytes() == valid.view(np.uint8).tobytes()
            assert (r.inputs[~valid] == -2.0).all()
            filled += int((~valid).sum())
    assert filled > 0


def _same(a: pa.Array, b: pa.Array) -> bool:
    """Equal values, NaN bytes included (Arrow's ``equals`` takes NaN for unequal)."""
    if pa.types.is_list(a.type) and pa.types.is_floating(a.type.value_type):
        return (a.type == b.type and a.value_lengths().equals(b.value_lengths())
                and a.flatten().to_numpy().tobytes() == b.flatten().to_numpy().tobytes())
    return bool(a.equals(b))


def test_the_command_and_the_ticket_name_input_valid_only_when_asked() -> None:
    plain, asked = FlightCommand("p-1"), FlightCommand("p-1", input_valid=True)
    assert "input_valid" not in json.loads(plain.encode())
    assert json.loads(asked.encode())["input_valid"] is True
    assert FlightCommand.decode(asked.encode()) == asked
    assert FlightCommand.decode(plain.encode()) == plain
    bad = json.dumps({"plan_id": "p-1", "input_valid": 1}).encode()
    with pytest.raises(InvalidRequest, match="input_valid"):
        FlightCommand.decode(bad)
    secret = b"s"
    for flag in (False, True):
        payload = TicketPayload("p-1", 0, 0, 1, 0, 5, wire=2, input_valid=flag)
        ticket = sign_ticket(payload, secret)
        assert verify_ticket(ticket, secret) == payload
        body = json.loads(_ticket_body(ticket))
        assert ("input_valid" in body) is flag


def _ticket_body(ticket: bytes) -> bytes:
    encoded = ticket.split(b".")[1]
    return base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))


def test_warm_with_input_valid_warms_the_blocks_of_that_read(dataset: Dataset,
                                                             server: Any) -> None:
    name = "shuffled"
    plan = dataset.plan(config_of(name), plan_id=name)
    plain = flight_actions(server.location, ACTION_WARM, json.dumps({"plan_id": name}).encode())
    valid = flight_actions(server.location, ACTION_WARM,
                           json.dumps({"plan_id": name, "input_valid": True}).encode())
    assert plain[-1]["blocks"] == [x.key for x in block_layouts(plan)]
    assert valid[-1]["blocks"] == [x.key for x in block_layouts(plan.with_input_valid())]
    assert not set(plain[-1]["blocks"]) & set(valid[-1]["blocks"])
    with pytest.raises(fl.FlightError, match="input_valid"):
        flight_actions(server.location, ACTION_WARM,
                       json.dumps({"plan_id": name, "input_valid": "yes"}).encode())


def test_a_plain_stream_has_the_plain_schema(server: Any) -> None:
    client = fl.connect(server.location)
    try:
        plain = client.get_flight_info(FlightCommand("sequential").descriptor())
        asked = client.get_flight_info(FlightCommand("sequential",
                                                     input_valid=True).descriptor())
    finally:
        client.close()
    assert plain.schema.names == batch_schema().names
    assert asked.schema.names == [*batch_schema().names, INPUT_VALID_COLUMN]
    assert asked.total_records == plain.total_records
    assert asked.total_bytes > plain.total_bytes  # a byte per input value more
