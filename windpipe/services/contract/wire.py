"""The Arrow Flight wire format of windpipe batches (specified in ``docs/wire.md``).

Clients (the SDK, or a client in any language) depend on this module, never on
``flight_server``. It defines:

* the request: :class:`FlightCommand`, the JSON command of a ``FlightDescriptor``
  (plan, epoch, rank, world size, start batch);
* the stream schema: one Arrow record batch per training batch, ONE ROW PER LANE.
  A plan may mix protocols whose ``T``, ``C_in``, ``C_out`` and ``B`` differ, and a
  stream has one schema, so fixed-size lists (or the fixed-shape tensor extension
  type) cannot describe every batch of a plan. Each lane therefore carries
  variable-length lists. Wire v2 (what the SDK asks for): ``windows``
  ``(T+1)*(C_in+C_out)`` float32 values, the lane's window of ``T + 1`` rows, each row
  its inputs then its targets (``inputs = windows[:, :T, :C_in]``, ``targets =
  windows[:, 1:, C_in:]``: one copy per window on both sides). Wire v1: ``inputs``
  ``T*C_in`` float32 values (row-major ``(T, C_in)``) and ``targets`` ``T*C_out``.
  Both: ``mask`` ``T`` uint8 (0/1, so it can be viewed as bool without a copy),
  ``has_channel`` ``C`` uint8 (one per channel of ``BatchMetadata.channels``: 0 where
  the lane's stream lacks that column); only when the command asks for it
  (``input_valid``), a last column ``input_valid`` ``T*C_in`` uint8 (1 where the input
  value is a real value of the data). The shape of each batch is in its
  ``app_metadata`` (:class:`BatchMetadata`); :func:`batch_arrays` reshapes the columns
  into ``(B, T, C)`` numpy views without copying;
* per-lane provenance columns and the per-batch ``app_metadata`` JSON;
* the Flight action names and the error envelope decoding of Flight errors.

Tickets are opaque to clients: pass the ``Ticket`` of each endpoint to ``DoGet``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

from windpipe.services.contract.errors import (
    ERROR_TABLE,
    ErrorType,
    InternalError,
    InvalidRequest,
    WindpipeError,
    error_class,
    error_from_envelope,
)
from windpipe.services.contract.limits import INT64_MAX
from windpipe.services.contract.ranks import check_rank
from windpipe.services.contract.shapes import check_plan_id, loads_bounded

__all__ = [
    "ACTIONS",
    "ACTION_CACHE_STATS",
    "ACTION_HEALTH",
    "ACTION_TIER_INFO",
    "ACTION_WARM",
    "COLUMNS",
    "COMMAND_KIND",
    "INPUT_PAD",
    "INPUT_VALID_COLUMN",
    "META_FORMAT",
    "META_PLAN_ID",
    "META_VERSION_ID",
    "META_WIRE_VERSION",
    "TENSOR_COLUMNS",
    "WIRE_VERSION",
    "WIRE_VERSIONS",
    "AlignedPart",
    "BatchArrays",
    "BatchMetadata",
    "FlightCommand",
    "batch_arrays",
    "batch_schema",
    "error_from_flight",
    "schema_wire",
    "to_flight_error",
]

WIRE_VERSION = 2  # what the SDK asks for: the window block (docs/wire.md section 3)
WIRE_VERSIONS: tuple[int, ...] = (1, 2)  # what a server streams
META_FORMAT = 1  # the ``v`` of a batch's app_metadata (the same in both wire versions)
COMMAND_KIND = "windpipe.batches"
INPUT_PAD = -2.0
INPUT_VALID_COLUMN = "input_valid"  # the last column, only in a stream that asks for it

ACTION_CACHE_STATS = "cache-stats"
ACTION_HEALTH = "health"  # the only call without a token: liveness, nothing about the host
ACTION_TIER_INFO = "tier-info"  # where the host tier is (same-host readers; authenticated)
ACTION_WARM = "warm"
ACTIONS: tuple[str, ...] = (  # DoAction types
    ACTION_HEALTH, ACTION_CACHE_STATS, ACTION_TIER_INFO, ACTION_WARM)

META_WIRE_VERSION = b"windpipe.wire_version"
META_PLAN_ID = b"windpipe.plan_id"
META_VERSION_ID = b"windpipe.version_id"

_STR_LIST = pa.list_(pa.string())
_I64_LIST = pa.list_(pa.int64())

_MASK_FIELDS: tuple[pa.Field, ...] = (
    pa.field("mask", pa.list_(pa.uint8()), nullable=False),
    pa.field("has_channel", pa.list_(pa.uint8()), nullable=False),
)
# each wire version's tensor columns, then the same provenance columns
_TENSOR_FIELDS: dict[int, tuple[pa.Field, ...]] = {
    1: (pa.field("inputs", pa.list_(pa.float32()), nullable=False),
        pa.field("targets", pa.list_(pa.float32()), nullable=False), *_MASK_FIELDS),
    2: (pa.field("windows", pa.list_(pa.float32()), nullable=False), *_MASK_FIELDS),
}
TENSOR_COLUMNS: dict[int, tuple[str, ...]] = {
    v: tuple(f.name for f in fields) for v, fields in _TENSOR_FIELDS.items()}
_PROVENANCE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("protocol", pa.string(), nullable=False),
    pa.field("manifest_row_id", pa.int64(), nullable=False),
    pa.field("manifest_path", pa.string(), nullable=False),
    pa.field("window_offset", pa.int64(), nullable=False),
    pa.field("group_key", pa.string(), nullable=False),
    pa.field("alignment_key", pa.string(), nullable=False),
    pa.field("seg_path", _STR_LIST, nullable=False),
    pa.field("seg_row_start", _I64_LIST, nullable=False),
    pa.field("seg_row_count", _I64_LIST, nullable=False),
    pa.field("seg_window_row_start", _I64_LIST, nullable=False),
    pa.field("seg_window_row_count", _I64_LIST, nullable=False),
)

_INPUT_VALID_FIELD = pa.field(INPUT_VALID_COLUMN, pa.list_(pa.uint8()), nullable=False)

COLUMNS: tuple[str, ...] = (  # every column of the current wire version, in order
    *TENSOR_COLUMNS[WIRE_VERSION], *(f.name for f in _PROVENANCE_FIELDS))


def batch_schema(*, plan_id: str | None = None, version_id: str | None = None,
                 wire: int = WIRE_VERSION, input_valid: bool = False) -> pa.Schema:
    """The schema of every record batch of a windpipe stream of wire version ``wire``
    (with ``input_valid``: the ``input_valid`` column after the provenance columns).

    Schema metadata carries the wire version and, when given, the plan and dataset
    version ids (a client can check it reads the plan it asked for).
    """
    meta = {META_WIRE_VERSION: str(wire).encode()}
    if plan_id is not None:
        meta[META_PLAN_ID] = plan_id.encode()
    if version_id is not None:
        meta[META_VERSION_ID] = version_id.encode()
    extra = (_INPUT_VALID_FIELD,) if input_valid else ()
    return pa.schema([*_TENSOR_FIELDS[wire], *_PROVENANCE_FIELDS, *extra], metadata=meta)


def schema_wire(schema: pa.Schema) -> int:
    """The wire version of a batch schema (by its tensor columns)."""
    return 2 if "windows" in schema.names else 1


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _bad(message: str, **details: Any) -> WindpipeError:
    return InvalidRequest(message, details=details)


def _int_field(body: dict[str, Any], name: str, *, default: int | None, minimum: int) -> int:
    value = body.get(name, default)
    if value is None:
        raise _bad(f"flight command: '{name}' is required", field=name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"flight command: '{name}' must be an integer, got {value!r}", field=name)
    if value < minimum:
        raise _bad(f"flight command: '{name}' must be >= {minimum}, got {value}", field=name)
    if value > INT64_MAX:
        raise _bad(f"flight command: '{name}' must fit a 64-bit integer, got {value}",
                   field=name)
    return value


@dataclass(frozen=True, slots=True)
class FlightCommand:
    """What a client asks ``GetFlightInfo`` for: one rank's pass over one epoch of a plan.

    ``start_batch`` resumes a pass: the stream then yields exactly the batches a full
    pass yields from index ``start_batch`` on (SEMANTICS section 7). ``wire`` is the
    wire version of the stream asked for (the command's ``v``; absent: 1).
    ``input_valid``: the stream's batches carry the ``input_valid`` column (SEMANTICS 5b);
    left out of the JSON when False, so a command without it encodes as before.
    """

    plan_id: str
    epoch: int = 0
    rank: int = 0
    world_size: int = 1
    start_batch: int = 0
    wire: int = WIRE_VERSION
    input_valid: bool = False

    def __post_init__(self) -> None:
        check_plan_id(self.plan_id, what="flight command: 'plan_id'")
        check_rank(self.rank, self.world_size)
        if self.epoch < 0 or self.start_batch < 0:
            raise _bad("flight command: epoch and start_batch must be >= 0")
        if self.wire not in WIRE_VERSIONS:
            raise _bad(f"unsupported wire version {self.wire!r} (server speaks "
                       f"{list(WIRE_VERSIONS)})", field="v")
        if not isinstance(self.input_valid, bool):
            raise _bad("flight command: 'input_valid' must be true or false",
                       field="input_valid")

    def encode(self) -> bytes:
        """Compact JSON bytes (the descriptor's ``cmd``)."""
        body = {"kind": COMMAND_KIND, **asdict(self)}
        body["v"] = body.pop("wire")
        if not body["input_valid"]:
            del body["input_valid"]
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> FlightCommand:
        """Parse and validate a descriptor command; raises ``invalid_request``."""
        body = loads_bounded(raw, what="flight command")
        if not isinstance(body, dict):
            raise _bad("flight command must be a JSON object")
        if body.get("kind", COMMAND_KIND) != COMMAND_KIND:
            raise _bad(f"flight command kind must be {COMMAND_KIND!r}, got {body.get('kind')!r}")
        wire = body.get("v", 1)
        if isinstance(wire, bool) or wire not in WIRE_VERSIONS:
            raise _bad(f"unsupported wire version {wire!r} (server speaks "
                       f"{list(WIRE_VERSIONS)})", field="v")
        unknown = sorted(set(body) - {"kind", "v", "plan_id", "epoch", "rank", "world_size",
                                      "start_batch", "input_valid"})
        if unknown:
            raise _bad(f"flight command has unknown fields {unknown}", fields=unknown)
        input_valid = body.get("input_valid", False)
        if not isinstance(input_valid, bool):
            raise _bad("flight command: 'input_valid' must be true or false",
                       field="input_valid")
        return cls(
            plan_id=check_plan_id(body.get("plan_id"), what="flight command: 'plan_id'"),
            epoch=_int_field(body, "epoch", default=0, minimum=0),
            rank=_int_field(body, "rank", default=0, minimum=0),
            world_size=_int_field(body, "world_size", default=1, minimum=1),
            start_batch=_int_field(body, "start_batch", default=0, minimum=0),
            wire=int(wire), input_valid=input_valid,
        )

    def descriptor(self) -> fl.FlightDescriptor:
        """A ``pyarrow.flight.FlightDescriptor`` for this command."""
        return fl.FlightDescriptor.for_command(self.encode())


@dataclass(frozen=True, slots=True)
class AlignedPart:
    """Which part of an aligned batch a record batch is (SEMANTICS 9, ``docs/wire.md``).

    An aligned batch is ``parts`` consecutive record batches sharing one ``batch_idx``,
    one per protocol in the plan's protocol order; ``has_data`` (one 0/1 per lane) is
    0 where the lane's key has no data of ``protocol`` (its rows are padding).
    """

    protocol: str
    part: int
    parts: int
    has_data: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The ``aligned`` object of ``app_metadata``."""
        return {"protocol": self.protocol, "part": self.part, "parts": self.parts,
                "has_data": [int(x) for x in self.has_data]}

    @classmethod
    def from_json(cls, body: Any) -> AlignedPart:
        """Parse the ``aligned`` object; ``invalid_request`` when malformed."""
        try:
            part = cls(protocol=str(body["protocol"]), part=int(body["part"]),
                       parts=int(body["parts"]),
                       has_data=tuple(int(x) for x in body["has_data"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(f"malformed 'aligned' batch metadata: {exc}") from None
        if not 0 <= part.part < part.parts:
            raise _bad(f"aligned part {part.part} of {part.parts} is out of range")
        return part


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """The per-batch ``app_metadata`` (compact JSON): batch-level ``BatchState`` fields.

    ``batch_idx`` is the position in the consumer's pass (resume with
    ``start_batch = batch_idx + 1``); ``global_batch`` the position in the epoch's
    global order. ``skipped_lanes`` lists lanes turned into padding because their
    segment could not be read (``on_bad_segment="skip"``): ``{"lane", "path",
    "error"}`` each. ``aligned`` is set on the parts of an aligned batch (SEMANTICS 9).
    """

    batch_idx: int
    global_batch: int
    split: str
    seq_len: int
    c_in: int
    c_out: int
    input_columns: tuple[str, ...]
    target_columns: tuple[str, ...]
    channels: tuple[str, ...] = ()  # has_channel's columns: inputs, then other targets
    stateful_group_idx: int | None = None
    stateful_step_idx: int | None = None
    stateful_steps: int | None = None
    skipped_lanes: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    aligned: AlignedPart | None = None

    def __post_init__(self) -> None:
        if not self.channels:
            object.__setattr__(self, "channels", tuple(dict.fromkeys(
                (*self.input_columns, *self.target_columns))))

    def encode(self) -> bytes:
        """Compact JSON bytes with ``v`` = :data:`META_FORMAT`.

        Every batch of one protocol and length shares the fields from ``split`` to
        ``channels``: their JSON is made once (:func:`_shared_json`) and the batch's
        integers are formatted around it, the same bytes as encoding the whole object
        (about a fifth of the cost; a Flight server encodes one a batch)."""
        if self.skipped_lanes or self.aligned is not None:
            return self._encode_object()
        shared = _shared_json((self.split, self.seq_len, self.c_in, self.c_out,
                               self.input_columns, self.target_columns, self.channels))
        return b'{"v":%d,"batch_idx":%d,"global_batch":%d,%s,"stateful_group_idx":%s,' \
            b'"stateful_step_idx":%s,"stateful_steps":%s,"skipped_lanes":[]}' % (
                META_FORMAT, self.batch_idx, self.global_batch, shared,
                _int_or_null(self.stateful_group_idx), _int_or_null(self.stateful_step_idx),
                _int_or_null(self.stateful_steps))

    def _encode_object(self) -> bytes:
        body = {  # the fields in declaration order, without asdict's deep copies
            "v": META_FORMAT, "batch_idx": self.batch_idx, "global_batch": self.global_batch,
            "split": self.split, "seq_len": self.seq_len, "c_in": self.c_in,
            "c_out": self.c_out, "input_columns": list(self.input_columns),
            "target_columns": list(self.target_columns),
            "channels": list(self.channels),
            "stateful_group_idx": self.stateful_group_idx,
            "stateful_step_idx": self.stateful_step_idx, "stateful_steps": self.stateful_steps,
            "skipped_lanes": [dict(d) for d in self.skipped_lanes],
        }
        if self.aligned is not None:
            body["aligned"] = self.aligned.to_json()
        return _ENCODER.encode(body).encode()

    @classmethod
    def decode(cls, raw: bytes | memoryview | Any) -> BatchMetadata:
        """Parse ``app_metadata`` (bytes or a ``pyarrow.Buffer``)."""
        data = raw.to_pybytes() if hasattr(raw, "to_pybytes") else bytes(raw)
        body = json.loads(data)
        if body.get("v") != META_FORMAT:
            raise _bad(f"unsupported batch metadata version {body.get('v')!r}")
        return cls(
            batch_idx=int(body["batch_idx"]),
            global_batch=int(body["global_batch"]),
            split=str(body["split"]),
            seq_len=int(body["seq_len"]),
            c_in=int(body["c_in"]),
            c_out=int(body["c_out"]),
            input_columns=tuple(body["input_columns"]),
            target_columns=tuple(body["target_columns"]),
            channels=tuple(body.get("channels") or ()),
            stateful_group_idx=body.get("stateful_group_idx"),
            stateful_step_idx=body.get("stateful_step_idx"),
            stateful_steps=body.get("stateful_steps"),
            skipped_lanes=tuple(body.get("skipped_lanes") or ()),
            aligned=AlignedPart.from_json(body["aligned"]) if body.get("aligned") else None,
        )


_SHARED: dict[tuple[Any, ...], bytes] = {}
_SHARED_KEPT = 256


def _shared_json(key: tuple[Any, ...]) -> bytes:
    """The JSON members ``"split"`` to ``"channels"`` of a batch's metadata (no braces)."""
    found = _SHARED.get(key)
    if found is None:
        split, seq_len, c_in, c_out, ins, outs, channels = key
        body = _ENCODER.encode({"split": split, "seq_len": seq_len, "c_in": c_in,
                                "c_out": c_out, "input_columns": list(ins),
                                "target_columns": list(outs), "channels": list(channels)})
        if len(_SHARED) >= _SHARED_KEPT:
            _SHARED.clear()
        found = _SHARED[key] = body[1:-1].encode()
    return found


def _int_or_null(value: int | None) -> bytes:
    return b"null" if value is None else b"%d" % value


@dataclass(frozen=True, eq=False)
class BatchArrays:
    """The tensor columns of one record batch as numpy views (no copies).

    ``inputs`` ``(B, T, C_in)`` float32, ``targets`` ``(B, T, C_out)`` float32,
    ``mask`` ``(B, T)`` bool, ``has_channel`` ``(B, C)`` bool over ``meta.channels``;
    ``windows`` ``(B, T + 1, C_in + C_out)`` in wire v2, whose strided views
    ``inputs`` and ``targets`` are (None in v1, where they are contiguous);
    ``input_valid`` ``(B, T, C_in)`` bool when the stream carries it, else None.
    The arrays are read-only views on the Arrow buffers: keep the record batch alive
    while using them, copy to keep them longer.
    """

    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray
    has_channel: np.ndarray
    windows: np.ndarray | None = None
    input_valid: np.ndarray | None = None


def _flat_values(column: pa.Array, dtype: np.dtype[Any]) -> np.ndarray:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets
    start = offsets[0].as_py() if len(offsets) else 0
    stop = offsets[-1].as_py() if len(offsets) else 0
    values = arr.values.slice(start, stop - start)
    buf = values.buffers()[1]
    if buf is None:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=len(values),
                         offset=values.offset * dtype.itemsize)


def batch_arrays(batch: pa.RecordBatch, meta: BatchMetadata) -> BatchArrays:
    """Reshape a record batch's list columns into ``(B, T, C)`` views using ``meta`` (either
    wire version, told by its columns)."""
    lanes, t, c_in, c_out = batch.num_rows, meta.seq_len, meta.c_in, meta.c_out
    mask = _flat_values(batch.column("mask"), np.dtype(np.uint8))
    has = _flat_values(batch.column("has_channel"), np.dtype(np.uint8))
    c = len(meta.channels)
    windows = None
    if "windows" in batch.schema.names:
        values = _flat_values(batch.column("windows"), np.dtype(np.float32))
        sizes = [values.size, mask.size, has.size]
        expected = [lanes * (t + 1) * (c_in + c_out), lanes * t, lanes * c]
    else:
        inputs = _flat_values(batch.column("inputs"), np.dtype(np.float32))
        targets = _flat_values(batch.column("targets"), np.dtype(np.float32))
        sizes = [inputs.size, targets.size, mask.size, has.size]
        expected = [lanes * t * c_in, lanes * t * c_out, lanes * t, lanes * c]
    valid = None
    if INPUT_VALID_COLUMN in batch.schema.names:
        valid = _flat_values(batch.column(INPUT_VALID_COLUMN), np.dtype(np.uint8))
        sizes.append(valid.size)
        expected.append(lanes * t * c_in)
    if sizes != expected:
        raise _bad("record batch does not match its metadata", sizes=sizes, expected=expected)
    if "windows" in batch.schema.names:
        windows = values.reshape(lanes, t + 1, c_in + c_out)
        inputs, targets = windows[:, :t, :c_in], windows[:, 1:, c_in:]
    else:
        inputs, targets = inputs.reshape(lanes, t, c_in), targets.reshape(lanes, t, c_out)
    return BatchArrays(
        inputs=inputs, targets=targets,
        mask=mask.view(np.bool_).reshape(lanes, t),
        has_channel=has.view(np.bool_).reshape(lanes, c),
        windows=windows,
        input_valid=None if valid is None else valid.view(np.bool_).reshape(lanes, t, c_in),
    )


def to_flight_error(exc: BaseException) -> fl.FlightError:
    """The Flight error of a ``WindpipeError`` (its type's class, the envelope in
    ``extra_info``); anything else becomes ``internal``. What servers raise."""
    if not isinstance(exc, WindpipeError):  # its text may hold paths or URLs: not sent
        exc = InternalError(f"internal server error ({type(exc).__name__})")
    cls = getattr(fl, ERROR_TABLE[exc.type].flight_error)
    err: fl.FlightError = cls(exc.message, extra_info=exc.to_json())
    return err


def _envelope(exc: BaseException) -> dict[str, Any] | None:
    extra = getattr(exc, "extra_info", None)
    if not extra:
        return None
    try:
        envelope = json.loads(bytes(extra))
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    if isinstance(envelope, dict) and isinstance(envelope.get("error"), dict):
        return envelope
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # gRPC appends a long debug context; the first line says what happened.
    first = text.splitlines()[0] if text else type(exc).__name__
    return first.split(". Detail:")[0]


def error_from_flight(exc: BaseException, *, where: str = "") -> WindpipeError:
    """The windpipe error of a ``pyarrow.flight`` error (or a socket error): what clients call.

    The envelope a windpipe server put in ``extra_info`` wins; without one the Flight
    error class decides (unauthenticated, unauthorized = ``invalid_ticket``,
    unavailable / timed out / cancelled / socket errors = ``unavailable``, else
    ``internal``), with ``where`` and the error's first line as the message.
    """
    if isinstance(exc, WindpipeError):
        return exc
    envelope = _envelope(exc)
    if envelope is not None:
        return error_from_envelope(envelope)
    text = f"{where}: {_first_line(exc)}" if where else _first_line(exc)
    if isinstance(exc, fl.FlightUnauthenticatedError):
        kind = ErrorType.UNAUTHENTICATED
    elif isinstance(exc, fl.FlightUnauthorizedError):
        kind = ErrorType.INVALID_TICKET
    elif isinstance(exc, fl.FlightUnavailableError | fl.FlightTimedOutError
                    | fl.FlightCancelledError | OSError):
        kind = ErrorType.UNAVAILABLE
    else:
        kind = ErrorType.INTERNAL
    return error_class(kind)(text)
