"""A plain-loop value reference of SEMANTICS section 9 (aligned multi-protocol batches).

From the contract text and the raw files only: the manifest is read with pyarrow, the
segments with pyarrow / zarr, and every aligned batch's per-protocol ``inputs``,
``targets``, ``mask``, ``has_channel``, ``has_data`` and provenance is built with loops
(sections 3, 5, 5a, 6, 8, 9). Nothing of ``windpipe.services.planning``,
``windpipe.services.materialize``
or ``windpipe.services.storage`` is used. Which key, stream and source row each lane reads comes
from
:func:`tests.reference.aligned_ref.reference_aligned` (itself a plain-loop reference of
the schedule); only ``manifest_row_id`` and the key permutation (inside that module)
are shared with the real code, because they are the definition.

API:

- :func:`load_sources` - the plan's streams of one split, read from the files.
- :func:`reference_aligned_batches` - one rank's pass of aligned batches with values.
- :func:`ref_stream_list` - the sources as ``RefStream`` values (schedule reference).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

from tests.reference.aligned_ref import reference_aligned
from tests.reference.schedule_ref import RefStream
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec
from windpipe.services.contract.identity import manifest_row_id

__all__ = [
    "RefAlignedBatch",
    "RefPart",
    "RefPiece",
    "RefSource",
    "load_sources",
    "ref_stream_list",
    "reference_aligned_batches",
]

_IDENTITY = ("set_id", "cell_id", "cidx", "protocol")
SegmentTuple = tuple[int, str, int, int, int, int]  # lane, path, row_start, count, wstart, wcount


@dataclass(frozen=True)
class RefPiece:
    """One normalized segment of a stream: path, its manifest row and its rows."""

    path: str
    manifest_row_id: int
    rows: int


@dataclass(frozen=True)
class RefSource:
    """A stream (SEMANTICS 3): its keys, pieces in stream order and the columns every
    piece has (float64, NaN for null and for +-inf)."""

    protocol: str
    group_key: tuple[Any, ...]
    alignment_key: tuple[Any, ...]
    pieces: tuple[RefPiece, ...]
    columns: dict[str, np.ndarray]

    @property
    def n_rows(self) -> int:
        return sum(p.rows for p in self.pieces)


@dataclass
class RefPart:
    """One protocol's part of an aligned batch: values (numpy) and provenance."""

    protocol: str
    seq_len: int
    input_columns: tuple[str, ...]
    target_columns: tuple[str, ...]
    channels: tuple[str, ...]
    inputs: np.ndarray  # float32 (B, T, C_in)
    targets: np.ndarray  # float32 (B, T, C_out)
    mask: np.ndarray  # bool (B, T)
    has_channel: np.ndarray  # bool (B, C)
    has_data: np.ndarray  # bool (B,)
    protocols: tuple[str, ...]
    manifest_row_ids: tuple[int, ...]
    manifest_paths: tuple[str, ...]
    group_keys: tuple[tuple[Any, ...], ...]
    alignment_keys: tuple[tuple[Any, ...], ...]
    window_offsets: tuple[int, ...]
    segments: tuple[SegmentTuple, ...]


@dataclass
class RefAlignedBatch:
    """One aligned batch of a rank's pass."""

    batch_idx: int  # position in the rank's pass
    global_batch: int  # position in the epoch's global order
    group: int  # the group of keys (stateful_group_idx)
    step: int  # stateful_step_idx
    steps: int  # stateful_steps
    keys: tuple[tuple[Any, ...], ...]
    protocols: tuple[str, ...]
    parts: dict[str, RefPart]


def _read_segment(root: Path, path: str, wanted: Collection[str]) -> tuple[int, dict[str, Any]]:
    """Row count and the wanted columns present in one segment (float64, NaN for null)."""
    full = root / path
    out: dict[str, np.ndarray] = {}
    if full.suffix == ".zarr":
        group = zarr.open_group(str(full), mode="r")
        arrays = dict(group.arrays())
        n = int(next(iter(arrays.values())).shape[0])
        for name in wanted:
            if name in arrays:
                out[name] = np.asarray(arrays[name][...], dtype=np.float64)
    else:
        table = pq.read_table(full)
        n = table.num_rows
        for name in wanted:
            if name in table.column_names:
                out[name] = np.asarray(table.column(name).cast(pa.float64()).to_numpy(
                    zero_copy_only=False), dtype=np.float64)
    for name, values in out.items():  # +-inf is null (SEMANTICS 5)
        out[name] = np.where(np.isfinite(values), values, np.nan)
    return n, out


def load_sources(root: Path, members: Collection[int], config: LoaderConfig,
                 *, manifest: str = "manifest.parquet") -> list[RefSource]:
    """The plan's streams in index order, read from ``root``'s manifest and segments.

    ``members``: the ``manifest_row_id`` of every manifest row of the plan's split (the
    split's assignment, taken from the catalog). A manifest row is one identity; its
    segments are the manifest lines of that identity in manifest order. The index is
    sorted by identity, ties by first appearance; a stream is the rows of the index
    rows sharing ``group_key``, concatenated in index order (SEMANTICS 1, 3).
    """
    table = pq.read_table(root / manifest).to_pylist()
    protocols = set(config.inputs)
    wanted = set(config.columns())
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}  # identity -> first line + segments
    for position, line in enumerate(table):
        ident = tuple(line[c] for c in _IDENTITY)
        row = rows.setdefault(ident, {**line, "position": position, "segments": []})
        row["segments"].append(line["segment_path"])
    index = sorted(rows.values(), key=lambda r: (*(r[c] for c in _IDENTITY), r["position"]))
    streams: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in index:
        mrid = manifest_row_id(row["set_id"], row["cell_id"], row["cidx"], row["protocol"])
        if mrid not in members or row["protocol"] not in protocols:
            continue
        row["manifest_row_id"] = mrid
        streams.setdefault(tuple(row[c] for c in config.group_key), []).append(row)
    out = []
    for group_key, stream_rows in streams.items():
        pieces: list[RefPiece] = []
        parts: list[dict[str, np.ndarray]] = []
        for row in stream_rows:
            for path in row["segments"]:
                n, cols = _read_segment(root, path, wanted)
                pieces.append(RefPiece(path, row["manifest_row_id"], n))
                parts.append(cols)
        # a stream has a column iff every piece it concatenates has it (SEMANTICS 5a)
        have = set.intersection(*(set(p) for p in parts)) if parts else set()
        first = stream_rows[0]
        out.append(RefSource(
            protocol=str(first["protocol"]), group_key=group_key,
            alignment_key=tuple(first[c] for c in config.alignment_key),
            pieces=tuple(pieces),
            columns={c: np.concatenate([p[c] for p in parts]) for c in sorted(have)},
        ))
    return out


def ref_stream_list(sources: list[RefSource]) -> list[RefStream]:
    """The sources as the schedule reference's streams (same order)."""
    return [RefStream(protocol=s.protocol, n_rows=s.n_rows, group_key=s.group_key,
                      alignment_key=s.alignment_key) for s in sources]


def _scale(values: np.ndarray, spec: ScalingSpec | None) -> np.ndarray:
    """SEMANTICS 6 elementwise (float64; NaN stays NaN)."""
    out = np.empty_like(values)
    for i, x in enumerate(values.tolist()):
        if spec is None or math.isnan(x):
            out[i] = x
            continue
        lo, hi, v = spec.input_min, spec.input_max, x
        if spec.transform == "log1p":
            if x <= -1.0:
                out[i] = math.nan
                continue
            lo, hi, v = math.log1p(lo), math.log1p(hi), math.log1p(x)
        y = spec.output_min + (v - lo) * (spec.output_max - spec.output_min) / (hi - lo)
        if spec.clip:
            y = min(max(y, min(spec.output_min, spec.output_max)),
                    max(spec.output_min, spec.output_max))
        out[i] = y
    return out


def _lane_segments(src: RefSource, lane: int, offset: int, seq_len: int) -> list[SegmentTuple]:
    """The segment ranges a real lane reads: rows ``[o, min(o+T+1, N))`` (SEMANTICS 8)."""
    lo, hi = offset, min(offset + seq_len + 1, src.n_rows)
    out = []
    start = 0
    for piece in src.pieces:
        a, b = max(lo, start), min(hi, start + piece.rows)
        if b > a:
            out.append((lane, piece.path, a - start, b - a, a - offset, b - a))
        start += piece.rows
    return out


def _piece_at(src: RefSource, row: int) -> RefPiece:
    start = 0
    for piece in src.pieces:
        if start <= row < start + piece.rows:
            return piece
        start += piece.rows
    raise IndexError(row)


def _part(config: LoaderConfig, protocol: str, keys: tuple[tuple[Any, ...], ...],
          lanes: tuple[tuple[int, int], ...], has_data: tuple[bool, ...],
          sources: list[RefSource], scaled: dict[tuple[int, str], np.ndarray]) -> RefPart:
    """Protocol ``protocol``'s part: lane b is ``(stream, offset)`` (offset -1: padding;
    stream -1: key b has no stream of this protocol)."""
    seq_len = config.window_for(protocol).seq_len
    in_cols, out_cols = tuple(config.inputs[protocol]), tuple(config.targets[protocol])
    channels = tuple(dict.fromkeys((*in_cols, *out_cols)))
    n_lanes = len(lanes)
    inputs = np.full((n_lanes, seq_len, len(in_cols)), -2.0, dtype=np.float32)
    targets = np.full((n_lanes, seq_len, len(out_cols)), np.nan, dtype=np.float32)
    mask = np.zeros((n_lanes, seq_len), dtype=bool)
    has_channel = np.zeros((n_lanes, len(channels)), dtype=bool)
    mrids: list[int] = []
    paths: list[str] = []
    group_keys: list[tuple[Any, ...]] = []
    offsets: list[int] = []
    segments: list[SegmentTuple] = []
    for b, (s, o) in enumerate(lanes):
        if s < 0:  # no data of this protocol for the key: all padding, no flags
            mrids.append(-1)
            paths.append("")
            group_keys.append(())
            offsets.append(-1)
            continue
        src = sources[s]
        assert src.protocol == protocol
        assert src.alignment_key == keys[b]
        group_keys.append(src.group_key)
        for c, col in enumerate(channels):
            has_channel[b, c] = col in src.columns
        offsets.append(o)
        if o < 0:  # padding lane of a key with data: its stream's identity, no rows
            mrids.append(src.pieces[0].manifest_row_id)
            paths.append("")
            continue
        first = _piece_at(src, o)
        mrids.append(first.manifest_row_id)
        paths.append(first.path)
        segments.extend(_lane_segments(src, b, o, seq_len))
        n = src.n_rows
        has_targets = all(col in src.columns for col in out_cols)
        for t in range(seq_len):
            row = o + t
            if row < n:
                for c, col in enumerate(in_cols):
                    if col in src.columns:
                        y = float(scaled[(s, col)][row])
                        inputs[b, t, c] = y if math.isfinite(y) else -2.0
            if row + 1 < n:
                mask[b, t] = has_targets
                for c, col in enumerate(out_cols):
                    if col in src.columns:
                        targets[b, t, c] = scaled[(s, col)][row + 1]
    return RefPart(
        protocol=protocol, seq_len=seq_len, input_columns=in_cols, target_columns=out_cols,
        channels=channels, inputs=inputs, targets=targets, mask=mask,
        has_channel=has_channel, has_data=np.asarray(has_data, dtype=bool),
        protocols=(protocol,) * n_lanes, manifest_row_ids=tuple(mrids),
        manifest_paths=tuple(paths), group_keys=tuple(group_keys),
        alignment_keys=tuple(keys), window_offsets=tuple(offsets), segments=tuple(segments),
    )


def reference_aligned_batches(sources: list[RefSource], config: LoaderConfig,
                              epoch: int, *, rank: int = 0,
                              world_size: int = 1) -> list[RefAlignedBatch]:
    """Rank ``rank``'s pass over ``epoch``: groups ``rank, rank + W, ...`` of the global
    order (all K steps of a group stay together), trimmed to the smallest rank's batch
    count with ``drop_incomplete_distributed`` (SEMANTICS 7, 9)."""
    assert config.align_by == "alignment_key"
    protocols = config.ordered_protocols()
    scaled = {(s, col): _scale(values, config.scaling_for(col))
              for s, src in enumerate(sources) for col, values in src.columns.items()}
    schedule = reference_aligned(ref_stream_list(sources), config, epoch)
    per_rank: list[list[tuple[int, Any]]] = [[] for _ in range(world_size)]
    for g, batch in enumerate(schedule):
        per_rank[batch.group % world_size].append((g, batch))
    mine = per_rank[rank]
    if config.drop_incomplete_distributed:
        mine = mine[: min(len(r) for r in per_rank)]
    out = []
    for i, (g, batch) in enumerate(mine):
        parts = {p: _part(config, p, batch.keys, batch.lanes[p], batch.has_data[p], sources,
                          scaled) for p in protocols}
        out.append(RefAlignedBatch(
            batch_idx=i, global_batch=g, group=batch.group, step=batch.step,
            steps=batch.steps, keys=batch.keys, protocols=tuple(protocols), parts=parts))
    return out
