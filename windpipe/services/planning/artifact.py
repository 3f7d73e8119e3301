"""The stored plan: everything a consumer needs that does not depend on the epoch.

A :class:`PlanArtifact` is made once, when the catalog plans (:func:`make_artifact`),
stored in the catalog database, and loaded by every consumer (the catalog's report
and schedule routes, every Flight server, any other reader) through
:meth:`PlanArtifact.from_ipc`, from the database or from ``GET
/v1/plans/{id}/artifact``. It holds the plan's identity and :class:`PlanSpec`, its
streams, the storage layout of every piece (format, fingerprint, chunk sizes) and,
for the epoch-independent strategies (``sequential``, ``stateful``, ``aligned``), the schedule
itself. Only the per-epoch order of a shuffled plan is computed when read, by
:meth:`PlanArtifact.epoch_schedule` (a pure function of plan, seed and epoch); no
consumer rebuilds streams from the index.

The bytes are one Arrow IPC stream (zstd-compressed buffers) of one record batch
with ONE row; every column is one array of the plan as a list (``stream_n_rows``,
``piece_path``, ``lane_offset``, ...), and the schema metadata ``windpipe.plan`` is
a JSON header (ids, spec, protocols, strategy). ``docs/wire.md`` section 8 lists
every column.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from windpipe.services.arrow_values import from_numpy, string_array, to_numpy
from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import InternalError, InvalidRequest, WindpipeError
from windpipe.services.contract.reports import PlanReportData
from windpipe.services.planning.report import plan_report
from windpipe.services.planning.schedule import SCHEDULE_ARRAYS, DropCounts, Schedule
from windpipe.services.planning.strategies import Strategy, epoch_schedule, strategy_for
from windpipe.services.planning.streams import JsonKeys, Streams
from windpipe.services.planning.working_set import ChunkTable, protocol_row_bytes

__all__ = [
    "ARTIFACT_MEDIA_TYPE",
    "ARTIFACT_VERSION",
    "META_PLAN",
    "PieceLayout",
    "PieceRecord",
    "PlanArtifact",
    "make_artifact",
]

ARTIFACT_VERSION = 1
ARTIFACT_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
META_PLAN = b"windpipe.plan"

_I64 = np.int64
_STREAM_ARRAYS: dict[str, type[np.generic]] = {
    "stream_protocol": np.int16,
    "stream_n_rows": np.int64,
    "stream_piece_ptr": np.int64,
    "piece_manifest_row_id": np.int64,
    "piece_rows": np.int64,
    "piece_chunk_ptr": np.int64,
    "chunk_rows": np.int64,
}
_STRING_ARRAYS = ("stream_group_key", "stream_alignment_key", "piece_path", "piece_format",
                  "piece_fingerprint")
_CHANNELS = "stream_has_channel"  # only when some stream lacks a column: uint8 [S*C]
_LANE_KEY = "lane_key"  # only in the stored schedule of an aligned plan: int64 [NL]
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


class PieceRecord(NamedTuple):
    """How one segment is stored: what a chunk reader needs besides its path."""

    format: str
    fingerprint: str
    chunk_rows: Sequence[int]


@dataclass(frozen=True, eq=False)
class PieceLayout:
    """Per piece of a plan's streams (``Streams.piece_*`` order): format, fingerprint and
    the rows of each chunk (CSR: ``chunk_rows[chunk_ptr[p]:chunk_ptr[p+1]]``)."""

    format: tuple[str, ...]
    fingerprint: tuple[str, ...]
    chunk_ptr: np.ndarray  # int64 [P+1]
    chunk_rows: np.ndarray  # int64 [C]

    @classmethod
    def from_records(cls, paths: Sequence[str],
                     records: Mapping[str, PieceRecord]) -> PieceLayout:
        """The layout of the pieces ``paths`` from a record per path."""
        missing = sorted(set(paths) - set(records))
        if missing:
            raise InternalError(
                f"no segment record for {len(missing)} piece(s)",
                details={"paths": missing[:20]},
            )
        rows = [np.asarray(records[p].chunk_rows, dtype=_I64) for p in paths]
        return cls(
            format=tuple(records[p].format for p in paths),
            fingerprint=tuple(records[p].fingerprint for p in paths),
            chunk_ptr=np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(_I64),
            chunk_rows=np.concatenate([np.zeros(0, _I64), *rows]).astype(_I64),
        )

    def chunks_of(self, piece: int) -> np.ndarray:
        """Rows of each chunk of ``piece``."""
        return self.chunk_rows[self.chunk_ptr[piece]: self.chunk_ptr[piece + 1]]


@dataclass(frozen=True, eq=False)
class PlanArtifact:
    """One stored plan (see the module docstring). ``schedule`` is the stored schedule of an
    epoch-independent strategy, ``None`` for a shuffled plan."""

    plan_id: str
    split_id: str
    version_id: str
    root_uri: str
    spec: PlanSpec
    streams: Streams
    pieces: PieceLayout
    schedule: Schedule | None
    # bool [S, len(spec.columns())]: stream s has column c; None: every stream has every one
    channels: np.ndarray | None = None
    # the stored string columns as the bytes held them (from_ipc), so a consumer making
    # Arrow arrays of them (the Flight server's provenance tables) converts no Python
    # string back: "piece_path", "piece_fingerprint", "stream_group_key",
    # "stream_alignment_key"
    strings: Mapping[str, pa.Array] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def strategy(self) -> Strategy:
        """The plan's strategy (:data:`windpipe.services.planning.strategies.STRATEGIES`)."""
        return strategy_for(self.spec)

    def epoch_schedule(self, epoch: int) -> Schedule:
        """The global order of ``epoch``: the stored schedule, or the strategy's per-epoch
        function for a shuffled plan. A pure function of the plan, its seed and ``epoch``."""
        if self.schedule is None:
            return epoch_schedule(self.streams, self.spec, epoch, chunks=self.chunk_table)
        if epoch < 0:
            raise InvalidRequest(f"epoch must be >= 0, got {epoch}",
                                 details={"epoch": epoch})
        return self.schedule if epoch == self.schedule.epoch else dataclasses.replace(
            self.schedule, epoch=epoch)

    @functools.cached_property
    def chunk_table(self) -> ChunkTable:
        """Every chunk the plan's pieces hold, with its cached size (the working set's
        unit, :mod:`windpipe.services.planning.working_set`)."""
        return ChunkTable.of(self.streams, chunk_ptr=self.pieces.chunk_ptr,
                             chunk_rows=self.pieces.chunk_rows,
                             row_bytes=protocol_row_bytes(self.spec, self.streams.protocols))

    def report(self, *, world_size: int = 1, schedule: Schedule | None = None) -> PlanReportData:
        """The plan report of epoch 0 (or of ``schedule``) for ``world_size`` ranks."""
        return plan_report(
            self.streams, self.spec,
            schedule if schedule is not None else self.epoch_schedule(0),
            world_size=world_size, chunks=self.chunk_table, channels=self.channels,
        )

    # -- the stored form --------------------------------------------------------------

    def to_ipc(self) -> bytes:
        """The artifact as Arrow IPC stream bytes (the stored and served form)."""
        st = self.streams
        arrays: dict[str, Any] = {
            "stream_protocol": st.protocol, "stream_n_rows": st.n_rows,
            "stream_piece_ptr": st.piece_ptr,
            "piece_manifest_row_id": st.piece_manifest_row_id, "piece_rows": st.piece_rows,
            "piece_chunk_ptr": self.pieces.chunk_ptr, "chunk_rows": self.pieces.chunk_rows,
        }
        columns = {name: _list_of(np.asarray(arrays[name], dtype=dtype))
                   for name, dtype in _STREAM_ARRAYS.items()}
        strings = {
            "stream_group_key": list(st.group_key_json),
            "stream_alignment_key": list(st.alignment_key_json),
            "piece_path": list(st.piece_path),
            "piece_format": list(self.pieces.format),
            "piece_fingerprint": list(self.pieces.fingerprint),
        }
        for name in _STRING_ARRAYS:
            columns[name] = _list_of(string_array(strings[name]))
        stored = self.schedule.arrays() if self.schedule is not None else {}
        for name, dtype in SCHEDULE_ARRAYS.items():
            columns[name] = _list_of(stored.get(name, np.zeros(0, dtype=dtype)))
        if self.channels is not None:
            columns[_CHANNELS] = _list_of(self.channels.astype(np.uint8).reshape(-1))
        if self.schedule is not None and self.schedule.lane_key is not None:
            columns[_LANE_KEY] = _list_of(self.schedule.lane_key.astype(_I64))
        header = {
            "format": ARTIFACT_VERSION, "plan_id": self.plan_id, "split_id": self.split_id,
            "version_id": self.version_id, "root_uri": self.root_uri,
            "spec": self.spec.planning_dict(), "protocols": list(st.protocols),
            "strategy": self.strategy.name,
            "schedule": None if self.schedule is None else {
                "epoch": self.schedule.epoch,
                "dropped": dataclasses.asdict(self.schedule.dropped),
                "parts": self.schedule.parts,
            },
        }
        schema = pa.schema([pa.field(n, c.type, nullable=False) for n, c in columns.items()],
                           metadata={META_PLAN: json.dumps(header).encode()})
        batch = pa.RecordBatch.from_arrays(list(columns.values()), schema=schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema, options=_WRITE_OPTIONS) as writer:
            writer.write_batch(batch)
        return bytes(sink.getvalue())

    @classmethod
    def from_ipc(cls, data: bytes | memoryview | pa.Buffer) -> PlanArtifact:
        """Decode :meth:`to_ipc` bytes; anything else is ``invalid_request`` naming why."""
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(data))
            batch = reader.read_next_batch()
            header = json.loads((reader.schema.metadata or {})[META_PLAN])
        except (pa.ArrowInvalid, KeyError, ValueError, StopIteration) as exc:
            raise _bad(f"not a windpipe plan artifact: {exc}") from None
        if header.get("format") != ARTIFACT_VERSION:
            raise _bad(f"unsupported plan artifact format {header.get('format')!r} "
                       f"(this reader knows {ARTIFACT_VERSION})")
        if batch.num_rows != 1:
            raise _bad(f"a plan artifact has one row, got {batch.num_rows}")
        col = {name: batch.column(name).values for name in batch.schema.names}
        num = {name: to_numpy(col[name]).astype(dtype, copy=False)
               for name, dtype in {**_STREAM_ARRAYS, **SCHEDULE_ARRAYS}.items()}
        text = {name: col[name].to_pylist() for name in _STRING_ARRAYS}
        spec = PlanSpec.model_validate(header["spec"])
        piece_ptr, piece_rows = num["stream_piece_ptr"], num["piece_rows"]
        n_rows = num["stream_n_rows"]
        piece_stream = np.repeat(np.arange(n_rows.shape[0], dtype=_I64), np.diff(piece_ptr))
        stream_base = np.concatenate([[0], np.cumsum(n_rows)]).astype(_I64)
        streams = Streams(
            protocols=tuple(header["protocols"]),
            protocol=num["stream_protocol"],
            n_rows=n_rows,
            group_keys=JsonKeys(text["stream_group_key"]),
            alignment_keys=JsonKeys(text["stream_alignment_key"]),
            piece_ptr=piece_ptr,
            piece_path=tuple(text["piece_path"]),
            piece_manifest_row_id=num["piece_manifest_row_id"],
            piece_rows=piece_rows,
            piece_start=(np.cumsum(piece_rows) - piece_rows - stream_base[piece_stream]
                         ).astype(_I64),
        )
        # the stored strings are the canonical JSON these properties compute: kept, not
        # computed again for every stream (a collection's plan has thousands)
        streams.__dict__["group_key_json"] = tuple(text["stream_group_key"])
        streams.__dict__["alignment_key_json"] = tuple(text["stream_alignment_key"])
        channels = None
        if _CHANNELS in col:
            flat = to_numpy(col[_CHANNELS]).astype(np.bool_, copy=False)
            channels = flat.reshape(n_rows.shape[0], len(spec.columns()))
        stored = header.get("schedule")
        schedule = None if stored is None else Schedule(
            epoch=int(stored["epoch"]), dropped=DropCounts(**stored["dropped"]),
            parts=int(stored.get("parts", 1)),
            lane_key=(to_numpy(col[_LANE_KEY]).astype(_I64)
                      if _LANE_KEY in col else None),
            **{name: num[name] for name in SCHEDULE_ARRAYS},
        )
        return cls(
            plan_id=str(header["plan_id"]), split_id=str(header["split_id"]),
            version_id=str(header["version_id"]), root_uri=str(header["root_uri"]),
            spec=spec, streams=streams,
            pieces=PieceLayout(format=tuple(text["piece_format"]),
                               fingerprint=tuple(text["piece_fingerprint"]),
                               chunk_ptr=num["piece_chunk_ptr"], chunk_rows=num["chunk_rows"]),
            schedule=schedule, channels=channels,
            strings={name: col[name] for name in ("piece_path", "piece_fingerprint",
                                                 "stream_group_key", "stream_alignment_key")},
        )


def make_artifact(
    *, plan_id: str, split_id: str, version_id: str, root_uri: str, spec: PlanSpec,
    streams: Streams, pieces: PieceLayout, channels: np.ndarray | None = None,
) -> PlanArtifact:
    """Plan once: the artifact of ``streams`` under ``spec``, with the schedule computed and
    kept when the strategy's epochs are all alike. ``channels``: which streams have which
    of ``spec.columns()`` (:func:`windpipe.services.planning.channels.stream_channels`)."""
    spec = spec.plan_spec()
    schedule = None if strategy_for(spec).epoch_dependent else epoch_schedule(streams, spec, 0)
    return PlanArtifact(plan_id=plan_id, split_id=split_id, version_id=version_id,
                        root_uri=root_uri, spec=spec, streams=streams, pieces=pieces,
                        schedule=schedule, channels=channels)


def _list_of(values: np.ndarray | pa.Array) -> pa.LargeListArray:
    """A one-row list column holding ``values`` (numpy arrays are wrapped without a copy)."""
    arr = values if isinstance(values, pa.Array) else from_numpy(values)
    return pa.LargeListArray.from_arrays(from_numpy(np.array([0, len(arr)], dtype=np.int64)),
                                         arr)


def _bad(message: str) -> WindpipeError:
    return InvalidRequest(message)
