"""Hand-built wire record batches and a tiny Flight server speaking
``windpipe/services/contract/wire.py``.

Used by the SDK unit tests until (and besides) the real Flight server: the toy
server is a real ``pyarrow.flight`` server on port 0 that serves deterministic
batches (batch ``g`` of an epoch holds the value ``1000*epoch + g`` everywhere), so
failover, resumption and rank tests check real gRPC behaviour.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

from windpipe.services.contract.errors import InvalidTicket, NotFound
from windpipe.services.contract.wire import (
    INPUT_PAD,
    WIRE_VERSION,
    AlignedPart,
    BatchMetadata,
    FlightCommand,
    batch_schema,
)


def _lists(flat: np.ndarray, lanes: int, per_lane: int, typ: pa.DataType) -> pa.Array:
    offsets = pa.array(np.arange(0, lanes * per_lane + 1, per_lane, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(flat.reshape(-1), type=typ))


def make_record(
    inputs: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    *,
    batch_idx: int = 0,
    global_batch: int | None = None,
    split: str = "train",
    protocols: list[str] | None = None,
    stateful: tuple[int, int, int] | None = None,
    wire: int = WIRE_VERSION,
) -> tuple[pa.RecordBatch, BatchMetadata]:
    """A wire record batch (one row per lane) of wire version ``wire`` and its metadata from
    dense arrays (v2: the window block whose views they are, its two unseen cells padding)."""
    b, t, c_in = inputs.shape
    c_out = targets.shape[2]
    protocols = protocols or ["cycling"] * b
    if wire == 1:
        tensors = [_lists(inputs.astype(np.float32), b, t * c_in, pa.float32()),
                   _lists(targets.astype(np.float32), b, t * c_out, pa.float32())]
    else:
        windows = np.empty((b, t + 1, c_in + c_out), np.float32)
        windows[:, t, :c_in] = INPUT_PAD
        windows[:, 0, c_in:] = np.nan
        windows[:, :t, :c_in] = inputs
        windows[:, 1:, c_in:] = targets
        tensors = [_lists(windows, b, (t + 1) * (c_in + c_out), pa.float32())]
    cols = [
        *tensors,
        _lists(mask.astype(np.uint8), b, t, pa.uint8()),
        _lists(np.ones((b, c_in + c_out), np.uint8), b, c_in + c_out, pa.uint8()),
        pa.array(protocols),
        pa.array(np.arange(b, dtype=np.int64) + 100),
        pa.array([f"seg/{i}.parquet" for i in range(b)]),
        pa.array(np.arange(b, dtype=np.int64) * t),
        pa.array([json.dumps(["s", f"c{i}", 1, protocols[i]]) for i in range(b)]),
        pa.array([json.dumps(["s", f"c{i}", 1]) for i in range(b)]),
        pa.array([[f"seg/{i}.parquet"] for i in range(b)], pa.list_(pa.string())),
        pa.array([[i * t] for i in range(b)], pa.list_(pa.int64())),
        pa.array([[t + 1] for _ in range(b)], pa.list_(pa.int64())),
        pa.array([[0] for _ in range(b)], pa.list_(pa.int64())),
        pa.array([[t + 1] for _ in range(b)], pa.list_(pa.int64())),
    ]
    record = pa.RecordBatch.from_arrays(cols, schema=batch_schema(wire=wire))
    group, step, steps = stateful if stateful else (None, None, None)
    meta = BatchMetadata(
        batch_idx=batch_idx, global_batch=batch_idx if global_batch is None else global_batch,
        split=split, seq_len=t, c_in=c_in, c_out=c_out,
        input_columns=tuple(f"in{i}" for i in range(c_in)),
        target_columns=tuple(f"out{i}" for i in range(c_out)),
        stateful_group_idx=group, stateful_step_idx=step, stateful_steps=steps,
    )
    return record, meta


def toy_record(
    epoch: int, global_batch: int, batch_idx: int, *, lanes: int = 2, seq_len: int = 4
) -> tuple[pa.RecordBatch, BatchMetadata]:
    """Batch ``global_batch`` of the toy plan: every value is ``1000*epoch + global``."""
    value = float(1000 * epoch + global_batch)
    inputs = np.full((lanes, seq_len, 2), value, np.float32)
    targets = np.full((lanes, seq_len, 1), value, np.float32)
    mask = np.ones((lanes, seq_len), np.uint8)
    return make_record(inputs, targets, mask, batch_idx=batch_idx, global_batch=global_batch)


class ToyFlightServer(fl.FlightServerBase):
    """Serves the toy plan ``plan_id`` of ``n_batches`` global batches per epoch.

    ``die_at``: after sending that many record batches in one DoGet, the server stops
    serving (the stream fails as unavailable, later calls are refused), like a
    crashed server. ``peers``: other locations listed as fallbacks in endpoints.
    ``parts > 1``: each batch is that many aligned parts (docs/wire.md 4a).
    ``lanes`` and ``seq_len``: each batch's shape (:func:`toy_record`).
    """

    def __init__(self, *, plan_id: str = "p-toy", n_batches: int = 10,
                 die_at: int | None = None, delay_s: float = 0.0, parts: int = 1,
                 lanes: int = 2, seq_len: int = 4) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.location = f"grpc://127.0.0.1:{self.port}"
        self.plan_id = plan_id
        self.n_batches = n_batches
        self.die_at = die_at
        self.delay_s = delay_s
        self.parts = parts
        self.lanes = lanes
        self.seq_len = seq_len
        self.peers: list[str] = []
        self.dead = threading.Event()
        self.served = 0
        self.gets: list[int] = []

    def _refuse_if_dead(self) -> None:
        if self.dead.is_set():
            raise fl.FlightUnavailableError("toy server is down")

    def _local(self, cmd: FlightCommand) -> list[int]:
        return list(range(cmd.rank, self.n_batches, cmd.world_size))

    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        self._refuse_if_dead()
        cmd = FlightCommand.decode(descriptor.command)
        if cmd.plan_id != self.plan_id:
            err = NotFound(f"unknown plan {cmd.plan_id!r}")
            raise fl.FlightServerError(err.message, extra_info=err.to_json())
        ticket = fl.Ticket(json.dumps(
            {"epoch": cmd.epoch, "rank": cmd.rank, "world_size": cmd.world_size,
             "start": cmd.start_batch}).encode())
        locations = [self.location, *self.peers]
        endpoint = fl.FlightEndpoint(ticket, locations)
        n = max(0, len(self._local(cmd)) - cmd.start_batch)
        return fl.FlightInfo(batch_schema(plan_id=self.plan_id), descriptor, [endpoint], n, -1)

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.FlightDataStream:
        self._refuse_if_dead()
        body = json.loads(ticket.ticket)
        if body.get("forged"):
            err = InvalidTicket("ticket signature does not verify")
            raise fl.FlightUnauthorizedError(err.message, extra_info=err.to_json())
        cmd = FlightCommand(self.plan_id, body["epoch"], body["rank"], body["world_size"],
                            body["start"])
        self.gets.append(cmd.start_batch)
        local = self._local(cmd)

        def gen() -> Any:
            for i in range(cmd.start_batch, len(local)):
                for k in range(self.parts):
                    if self.die_at is not None and self.served >= self.die_at:
                        self.dead.set()
                        raise fl.FlightUnavailableError("toy server crashed")
                    if self.delay_s:
                        time.sleep(self.delay_s)
                    record, meta = toy_record(cmd.epoch, local[i], i, lanes=self.lanes,
                                              seq_len=self.seq_len)
                    if self.parts > 1:
                        meta = dataclasses.replace(meta, aligned=AlignedPart(
                            protocol=f"p{k}", part=k, parts=self.parts,
                            has_data=(1,) * record.num_rows))
                    self.served += 1
                    yield record, meta.encode()

        return fl.GeneratorStream(batch_schema(plan_id=self.plan_id), gen())
