"""The stored plan: made once, read back identical from its bytes, epochs as the planner's."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from windpipe.services.contract.configs import LoaderConfig, PlanSpec, WindowConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.planning.artifact import (
    META_PLAN,
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.report import plan_report
from windpipe.services.planning.schedule import SCHEDULE_ARRAYS, Schedule
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams

_IO: dict[str, Any] = {"inputs": {"cycling": ("v", "i"), "hppc": ("v",)},
                       "targets": {"cycling": ("v",), "hppc": ("v",)}}
SPECS = {
    "sequential": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=4), **_IO),
    "stateful": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=3),
                             stateful_n_windows=2, protocol_order=("hppc", "cycling"), **_IO),
    "shuffled": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=5),
                             strategy="shuffled", seed=9, **_IO),
    "chain": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=4),
                          strategy="shuffled", stateful_n_windows=-1,
                          cross_protocol_state_carry="chain", **_IO),
}


@pytest.fixture
def streams() -> Streams:
    ns = [[13, 8], [1], [9], [30, 2, 5], [17]]
    protos = ["cycling", "hppc", "cycling", "hppc", "cycling"]
    return Streams.from_pieces(
        protocols=("cycling", "hppc"), stream_protocols=protos,
        group_keys=[("s", f"c{i % 2}", i // 2, p) for i, p in enumerate(protos)],
        alignment_keys=[("s", f"c{i % 2}", i // 2) for i in range(len(ns))],
        pieces=[[(f"seg/{i}/{k}.parquet", 100 * i + k, n) for k, n in enumerate(rows)]
                for i, rows in enumerate(ns)],
    )


def _layout(streams: Streams) -> PieceLayout:
    records = {path: PieceRecord("zarr" if p % 2 else "parquet", f"fp{p}",
                                 [4] * (int(streams.piece_rows[p]) // 4)
                                 + [int(streams.piece_rows[p]) % 4])
               for p, path in enumerate(streams.piece_path)}
    return PieceLayout.from_records(streams.piece_path, records)


def _artifact(streams: Streams, spec: PlanSpec) -> PlanArtifact:
    return make_artifact(plan_id="p-1", split_id="s-1", version_id="v-1",
                         root_uri="file:///data", spec=spec, streams=streams,
                         pieces=_layout(streams))


def _same_schedule(a: Schedule, b: Schedule) -> None:
    assert a.epoch == b.epoch
    assert a.dropped == b.dropped
    for name, dtype in SCHEDULE_ARRAYS.items():
        got, want = getattr(a, name), getattr(b, name)
        assert got.dtype == dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("name", list(SPECS))
def test_roundtrip_keeps_everything_and_epochs_match_the_planner(
    streams: Streams, name: str
) -> None:
    spec = SPECS[name]
    made = _artifact(streams, spec)
    back = PlanArtifact.from_ipc(made.to_ipc())
    assert (back.plan_id, back.split_id, back.version_id, back.root_uri) == (
        "p-1", "s-1", "v-1", "file:///data")
    assert back.spec == spec.plan_spec()
    assert type(back.spec) is PlanSpec  # runtime options are not part of a plan
    st, bst = streams, back.streams
    assert bst.protocols == st.protocols
    assert bst.group_keys == st.group_keys
    assert bst.alignment_keys == st.alignment_keys
    assert bst.piece_path == st.piece_path
    for field in ("protocol", "n_rows", "piece_ptr", "piece_manifest_row_id", "piece_rows",
                  "piece_start"):
        np.testing.assert_array_equal(getattr(bst, field), getattr(st, field), err_msg=field)
        assert getattr(bst, field).dtype == getattr(st, field).dtype, field
    assert back.pieces.format == made.pieces.format
    assert back.pieces.fingerprint == made.pieces.fingerprint
    np.testing.assert_array_equal(back.pieces.chunk_ptr, made.pieces.chunk_ptr)
    np.testing.assert_array_equal(back.pieces.chunk_rows, made.pieces.chunk_rows)
    # the stored schedule exactly when the strategy's epochs are all alike
    assert (back.schedule is None) == (spec.strategy == "shuffled")
    for epoch in (0, 1, 5):
        _same_schedule(back.epoch_schedule(epoch), epoch_schedule(streams, spec, epoch))
    assert back.report() == plan_report(streams, spec, epoch_schedule(streams, spec, 0),
                                        chunks=made.chunk_table)


def test_epoch_dependence_follows_the_strategy(streams: Streams) -> None:
    shuffled = PlanArtifact.from_ipc(_artifact(streams, SPECS["shuffled"]).to_ipc())
    orders = {tuple(shuffled.epoch_schedule(e).lane_offset.tolist()) for e in range(4)}
    assert len(orders) > 1
    sequential = PlanArtifact.from_ipc(_artifact(streams, SPECS["sequential"]).to_ipc())
    assert sequential.epoch_schedule(3).lane_offset is sequential.epoch_schedule(0).lane_offset
    assert sequential.epoch_schedule(3).epoch == 3
    with pytest.raises(WindpipeError, match="epoch must be >= 0"):
        sequential.epoch_schedule(-1)


def test_a_raw_arrow_reader_sees_one_row_of_named_arrays(streams: Streams) -> None:
    data = _artifact(streams, SPECS["sequential"]).to_ipc()
    table = pa.ipc.open_stream(data).read_all()
    assert table.num_rows == 1
    header = json.loads(table.schema.metadata[META_PLAN])
    assert header["format"] == 1
    assert header["strategy"] == "sequential"
    assert header["protocols"] == ["cycling", "hppc"]
    assert table.column("stream_n_rows")[0].as_py() == streams.n_rows.tolist()
    assert table.column("piece_path")[0].as_py() == list(streams.piece_path)
    assert json.loads(table.column("stream_group_key")[0].as_py()[0]) == list(
        streams.group_keys[0])
    n_lanes = int(epoch_schedule(streams, SPECS["sequential"], 0).batch_lane_ptr[-1])
    assert len(table.column("lane_offset")[0].as_py()) == n_lanes


def test_garbage_and_other_formats_are_refused(streams: Streams) -> None:
    for data in (b"", b"not arrow", b"\x00" * 64):
        with pytest.raises(WindpipeError) as info:
            PlanArtifact.from_ipc(data)
        assert info.value.type == ErrorType.INVALID_REQUEST
        assert "not a windpipe plan artifact" in info.value.message
    table = pa.ipc.open_stream(_artifact(streams, SPECS["sequential"]).to_ipc()).read_all()
    header = json.loads(table.schema.metadata[META_PLAN])
    newer = table.replace_schema_metadata({META_PLAN: json.dumps({**header, "format": 99})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, newer.schema) as writer:
        writer.write_table(newer)
    with pytest.raises(WindpipeError, match="unsupported plan artifact format 99"):
        PlanArtifact.from_ipc(sink.getvalue())


def _with_header(data: bytes, **changes: Any) -> bytes:
    """Artifact bytes with keys of the JSON header changed (another writer's artifact)."""
    table = pa.ipc.open_stream(data).read_all()
    header = json.loads(table.schema.metadata[META_PLAN])
    other = table.replace_schema_metadata({META_PLAN: json.dumps({**header, **changes})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, other.schema) as writer:
        writer.write_table(other)
    return bytes(sink.getvalue())


@pytest.mark.parametrize(("name", "stored_as"), [("sequential", "plain"),
                                                 ("stateful", "sequential")])
def test_an_artifact_naming_the_old_strategies_loads_the_same(
        streams: Streams, name: str, stored_as: str) -> None:
    # artifacts written before the renaming call the stateless sequential strategy
    # "plain" and the stateful one "sequential"; the reader goes by the spec
    made = _artifact(streams, SPECS[name])
    older = PlanArtifact.from_ipc(_with_header(made.to_ipc(), strategy=stored_as))
    assert older.strategy.name == name
    assert older.to_ipc() == made.to_ipc()
    _same_schedule(older.epoch_schedule(1), made.epoch_schedule(1))


def test_piece_layout(streams: Streams) -> None:
    layout = _layout(streams)
    assert layout.chunks_of(4).tolist() == [4, 4, 4, 4, 4, 4, 4, 2]  # the 30-row piece
    assert layout.chunks_of(1).tolist() == [4, 4, 0]  # an empty chunk stays listed
    with pytest.raises(WindpipeError, match="no segment record"):
        PieceLayout.from_records([*streams.piece_path, "missing.parquet"],
                                 {p: PieceRecord("parquet", "x", [1]) for p in streams.piece_path})
