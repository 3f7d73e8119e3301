"""Test helpers of the Flight data plane: small datasets, servers, a raw Flight consumer.

Datasets are written as real parquet / zarr v3 segments; the reference values are
read back straight from the files with pyarrow / zarr (never through
``windpipe.services.storage.segments``), and batches are computed by
``tests.reference.schedule_ref``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pyarrow.parquet as pq
import zarr
from pydantic import SecretStr

from tests.fixtures.data import write_parquet_segment, write_zarr_segment
from tests.reference.schedule_ref import (
    ref_streams,
    reference_has_channel,
    reference_rank,
    reference_values,
)
from windpipe.flight_server.runner import RunningFlightServer, start_flight_server
from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.contract.errors import NotFound
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.contract.wire import (
    ACTION_CACHE_STATS,
    BatchMetadata,
    FlightCommand,
    batch_arrays,
)
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.planning.artifact import (
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.streams import Streams
from windpipe.services.settings import Settings
from windpipe.services.storage.segments import inspect_segment
from windpipe.services.storage.store import Storage

COLUMNS: dict[str, tuple[str, ...]] = {
    "cycling": ("current_a", "voltage_v", "temperature_c"),
    "hppc": ("current_a", "voltage_v", "soc_pct"),
    "eis": ("freq_hz", "z_real_ohm", "z_imag_ohm"),
}


@dataclass
class StreamSpec:
    """One stream: identity and the row counts of its pieces (one manifest row each)."""

    protocol: str
    cell: str
    cidx: int
    pieces: tuple[int, ...]
    set_id: str = "s1"
    lacks: tuple[str, ...] = ()  # columns this stream's segments do not have
    float32: bool = False  # write its columns as float32 (other streams: float64)


@dataclass
class Dataset:
    """A written dataset: root, streams, segment infos and per-stream column data."""

    root: Path
    streams: Streams
    segments: dict[str, Any]
    data: list[dict[str, np.ndarray]] = field(default_factory=list)

    def artifact(self, config: LoaderConfig, plan_id: str = "p-test", *,
                 root_uri: str | None = None) -> PlanArtifact:
        """The stored plan over this dataset (``root_uri``: where a copy of it lives), made
        by the planning core and read back from its stored bytes, as a catalog would."""
        records = {path: PieceRecord(info.format, info.fingerprint, info.chunk_rows)
                   for path, info in self.segments.items()}
        columns = config.plan_spec().columns()
        has = np.asarray([[c in d for c in columns] for d in self.data], dtype=bool)
        made = make_artifact(
            plan_id=plan_id, split_id="s-test", version_id="v-test",
            root_uri=root_uri or Path(self.root).resolve().as_uri(), spec=config,
            streams=self.streams,
            pieces=PieceLayout.from_records(self.streams.piece_path, records),
            channels=None if has.all() else has,
        )
        return PlanArtifact.from_ipc(made.to_ipc())

    def plan(self, config: LoaderConfig, plan_id: str = "p-test", *,
             root_uri: str | None = None) -> PlanContext:
        """A plan context over this dataset (see :meth:`artifact`)."""
        return PlanContext.from_artifact(self.artifact(config, plan_id, root_uri=root_uri))


def _values(rng: np.random.Generator, protocol: str, n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for k, col in enumerate(COLUMNS[protocol]):
        v = rng.normal(loc=2.0 + k, scale=1.5, size=n)
        if col in ("freq_hz", "soc_pct"):
            v = np.abs(v) * 10.0
        holes = rng.random(n) < 0.05
        v[holes] = np.nan
        out[col] = v
    return out


def write_dataset(
    root: Path, specs: Sequence[StreamSpec], *, fmt: str = "parquet", chunk_rows: int = 16,
    seed: int = 0, protocols: Sequence[str] | None = None,
) -> Dataset:
    """Write the streams' pieces (``fmt``: parquet, zarr, or mixed alternating)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    storage = Storage.from_uri(root.resolve().as_uri())
    pieces: list[list[tuple[str, int, int]]] = []
    data: list[dict[str, np.ndarray]] = []
    infos: dict[str, Any] = {}
    k = 0
    for spec in specs:
        mine: list[tuple[str, int, int]] = []
        parts: list[dict[str, np.ndarray]] = []
        for j, rows in enumerate(spec.pieces):
            values = {c: v.astype(np.float32) if spec.float32 else v
                      for c, v in _values(rng, spec.protocol, rows).items()
                      if c not in spec.lacks}
            parts.append(values)
            use = fmt if fmt != "mixed" else ("zarr" if k % 2 else "parquet")
            k += 1
            cidx = spec.cidx * 100 + j  # one manifest row per piece
            rel = f"{spec.protocol}/{spec.set_id}_{spec.cell}_{cidx}"
            if use == "zarr":
                rel += ".zarr"
                write_zarr_segment(root, rel, values, chunk_rows=chunk_rows)
            else:
                rel += ".parquet"
                cols = {c: pa.array(v, mask=np.isnan(v) & (np.arange(rows) % 2 == 0))
                        for c, v in values.items()}
                write_parquet_segment(root, rel, cols, row_group_rows=chunk_rows)
            infos[rel] = inspect_segment(storage, rel)
            mine.append((rel, manifest_row_id(spec.set_id, spec.cell, cidx, spec.protocol),
                         rows))
        pieces.append(mine)
        data.append({c: np.concatenate([p[c] for p in parts]) for c in COLUMNS[spec.protocol]
                     if c not in spec.lacks})
    protos = tuple(protocols) if protocols else tuple(sorted({s.protocol for s in specs}))
    streams = Streams.from_pieces(
        protocols=protos,
        stream_protocols=[s.protocol for s in specs],
        group_keys=[(s.set_id, s.cell, s.cidx, s.protocol) for s in specs],
        alignment_keys=[(s.set_id, s.cell, s.cidx) for s in specs],
        pieces=pieces,
    )
    ds = Dataset(root=root, streams=streams, segments=infos)
    ds.data = read_back(ds)
    np.testing.assert_array_equal(  # the generator's values round-trip (NaN = null)
        np.isnan(ds.data[0][COLUMNS[specs[0].protocol][0]]),
        np.isnan(data[0][COLUMNS[specs[0].protocol][0]]),
    )
    return ds


def read_back(ds: Dataset) -> list[dict[str, np.ndarray]]:
    """Per-stream columns read straight from the files (float64, NaN for null)."""
    out = []
    streams = ds.streams
    for s in range(streams.count):
        lo, hi = int(streams.piece_ptr[s]), int(streams.piece_ptr[s + 1])
        cols: dict[str, list[np.ndarray]] = {}
        for p in range(lo, hi):
            path = ds.root / streams.piece_path[p]
            if path.suffix == ".zarr":
                group = zarr.open_group(str(path), mode="r")
                parts = {n: np.asarray(a[...], dtype=np.float64) for n, a in group.arrays()}
            else:
                table = pq.read_table(path)
                parts = {
                    n: np.asarray(table.column(n).cast(pa.float64()).to_numpy(
                        zero_copy_only=False), dtype=np.float64)
                    for n in table.column_names
                }
            for n, v in parts.items():
                cols.setdefault(n, []).append(v)
        out.append({n: np.concatenate(v) for n, v in cols.items()})
    return out


def start_server(plans: dict[str, PlanContext], *, cache_bytes: int = 64 << 20,
                 locations: tuple[str, ...] = (), port: int = 0,
                 **settings: Any) -> RunningFlightServer:
    """A Flight server on loopback serving ``plans`` (no catalog); ``settings`` are
    ``Settings`` fields (``readahead_batches``, ``on_bad_segment``, ``s3_endpoint``...;
    no tier unless ``tier_dir`` is given)."""
    settings.setdefault("tier_bytes", 1 << 30 if "tier_dir" in settings else 0)
    config = Settings(flight_host="127.0.0.1", flight_port=port,
                      flight_locations=locations, ticket_secret=SecretStr("test-secret"),
                      **settings)

    def source(plan_id: str) -> PlanArtifact:
        if plan_id not in plans:
            raise NotFound(f"plan {plan_id!r} does not exist")
        return plans[plan_id].artifact

    return start_flight_server(config, plan_source=source, cache_bytes=cache_bytes)


@dataclass
class Received:
    """One received batch."""

    batch: pa.RecordBatch
    meta: BatchMetadata
    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray
    has_channel: np.ndarray | None = None


def flight_actions(location: str, kind: str, body: bytes = b"") -> list[dict[str, Any]]:
    """The JSON results of one ``DoAction`` on a server (raw pyarrow.flight)."""
    client = fl.connect(location)
    try:
        return [json.loads(r.body.to_pybytes()) for r in client.do_action(fl.Action(kind, body))]
    finally:
        client.close()


def cache_stats(location: str) -> dict[str, Any]:
    """The ``cache-stats`` action's answer of a server."""
    return flight_actions(location, ACTION_CACHE_STATS)[0]


def consume(location: str, cmd: FlightCommand) -> list[Received]:
    """Read every endpoint of a command in order with raw pyarrow.flight."""
    return list(iter_consume(location, cmd))


def iter_consume(location: str, cmd: FlightCommand) -> Iterator[Received]:
    """Lazily read every endpoint of a command (raw pyarrow.flight)."""
    client = fl.connect(location)
    try:
        info = client.get_flight_info(cmd.descriptor())
        for ep in info.endpoints:
            target = fl.connect(ep.locations[0]) if ep.locations else client
            reader = target.do_get(ep.ticket)
            for chunk in reader:
                meta = BatchMetadata.decode(chunk.app_metadata)
                arrays = batch_arrays(chunk.data, meta)
                yield Received(chunk.data, meta, arrays.inputs.copy(), arrays.targets.copy(),
                               arrays.mask.copy(), arrays.has_channel.copy())
            if target is not client:
                target.close()
    finally:
        client.close()


def expected_pass(ds: Dataset, config: LoaderConfig, *, epoch: int, rank: int,
                  world_size: int) -> list[tuple[Any, tuple[np.ndarray, ...]]]:
    """The reference batches of one rank's pass and their values."""
    refs = ref_streams(ds.streams)
    batches = reference_rank(refs, config, epoch, rank=rank, world_size=world_size)
    return [(b, reference_values(b, refs, ds.data, config)) for b in batches]


def assert_pass_equal(got: list[Received], want: list[tuple[Any, tuple[np.ndarray, ...]]],
                      ds: Dataset, config: LoaderConfig | None = None) -> None:
    """Values, masks, window offsets, stateful fields and provenance match the reference
    (and ``has_channel``, when the plan's ``config`` is given)."""
    assert len(got) == len(want), (len(got), len(want))
    for i, (r, (ref, (inputs, targets, mask))) in enumerate(zip(got, want, strict=True)):
        assert r.meta.batch_idx == i
        np.testing.assert_array_equal(r.mask, mask, err_msg=f"mask of batch {i}")
        np.testing.assert_allclose(r.inputs, inputs, rtol=2e-6, atol=1e-6,
                                   err_msg=f"inputs of batch {i}")
        np.testing.assert_allclose(r.targets, targets, rtol=2e-6, atol=1e-6,
                                   err_msg=f"targets of batch {i}")
        offsets = [-1 if lane is None else lane[1] for lane in ref.lanes]
        assert r.batch.column("window_offset").to_pylist() == offsets
        assert r.batch.column("protocol").to_pylist() == list(ref.lane_protocols)
        assert r.meta.seq_len == ref.seq_len
        assert r.meta.stateful_group_idx == ref.group
        assert r.meta.stateful_step_idx == ref.step
        assert r.meta.stateful_steps == ref.steps
        keys = [json.loads(k) for k in r.batch.column("group_key").to_pylist()]
        assert keys == [list(ds.streams.group_keys[s]) for s in ref.lane_streams]
        assert_provenance_equal(r.batch, ref, ds, batch_idx=i)
        if config is None:
            continue
        channels, has = reference_has_channel(ref, ref_streams(ds.streams), ds.data, config)
        assert r.meta.channels == channels
        np.testing.assert_array_equal(r.has_channel, has, err_msg=f"has_channel of batch {i}")


_PROVENANCE = ("manifest_row_id", "manifest_path", "alignment_key", "seg_path",
               "seg_row_start", "seg_row_count", "seg_window_row_start",
               "seg_window_row_count")


def reference_provenance(ref: Any, ds: Dataset) -> dict[str, list[Any]]:
    """SEMANTICS 8 by a plain loop over the dataset's pieces: what each lane reads.

    A real lane at ``o`` of stream ``s`` reads rows ``[o, min(o+T+1, N))``; each piece
    it overlaps is one segment ref. A padding lane reads nothing and keeps its
    stream's identity (first manifest row, alignment key; ``docs/semantics-notes.md``).
    """
    st = ds.streams
    out: dict[str, list[Any]] = {name: [] for name in _PROVENANCE}
    for lane, s in zip(ref.lanes, ref.lane_streams, strict=True):
        first_piece = int(st.piece_ptr[s])
        refs: list[tuple[int, int, int, int]] = []  # piece, row_start, row_count, window start
        if lane is not None:
            stream, o = lane
            lo, hi = o, min(o + ref.seq_len + 1, int(st.n_rows[stream]))
            start = 0
            for p in range(int(st.piece_ptr[stream]), int(st.piece_ptr[stream + 1])):
                rows = int(st.piece_rows[p])
                a, b = max(lo, start), min(hi, start + rows)
                if b > a:
                    refs.append((p, a - start, b - a, a - o))
                start += rows
        out["manifest_row_id"].append(
            int(st.piece_manifest_row_id[refs[0][0] if refs else first_piece]))
        out["manifest_path"].append(st.piece_path[refs[0][0]] if refs else "")
        out["alignment_key"].append(list(st.alignment_keys[s]))
        out["seg_path"].append([st.piece_path[p] for p, *_ in refs])
        out["seg_row_start"].append([r[1] for r in refs])
        out["seg_row_count"].append([r[2] for r in refs])
        out["seg_window_row_start"].append([r[3] for r in refs])
        out["seg_window_row_count"].append([r[2] for r in refs])
    return out


def assert_provenance_equal(batch: pa.RecordBatch, ref: Any, ds: Dataset, *,
                            batch_idx: int) -> None:
    """The provenance columns of a received batch equal :func:`reference_provenance`."""
    want = reference_provenance(ref, ds)
    for name in _PROVENANCE:
        got = batch.column(name).to_pylist()
        if name == "alignment_key":
            got = [json.loads(k) for k in got]
        assert got == want[name], f"{name} of batch {batch_idx}"
