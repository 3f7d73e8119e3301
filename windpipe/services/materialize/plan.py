"""A stored plan made ready to materialize: its chunk table, channels and per-epoch schedules.

:meth:`PlanContext.from_artifact` takes a :class:`windpipe.services.planning.artifact.PlanArtifact`
(loaded from the catalog database, from ``GET /v1/plans/{id}/artifact``, or made in
memory) and lays out every chunk of every piece as one global chunk table, so
finding the chunks a lane reads is a ``searchsorted``. Nothing here reads the index
or rebuilds streams: the artifact is the plan.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.identity import canonical_json
from windpipe.services.materialize.chunks import ChannelSpec, ChunkKey
from windpipe.services.memo import Memo
from windpipe.services.planning.aligned import aligned_keys
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import batch_chunk_bytes
from windpipe.services.storage.packs import PackedPieces, PackStore, VersionPack
from windpipe.services.storage.segments import ColumnInfo, SegmentInfo

__all__ = ["PlanContext"]

_EPOCHS_KEPT = 4


@dataclass(frozen=True, eq=False)
class PlanContext:
    """One plan, ready to stream. Build with :meth:`from_artifact`.

    Chunk table (length NC, chunks of all pieces in stream order): ``chunk_gstart``
    (global row of each chunk's first row; streams are laid end to end as in
    ``Streams.stream_base``), ``chunk_piece``, ``chunk_index`` (index inside its
    segment), ``chunk_len`` (rows; empty chunks are left out), ``chunk_keys`` (cache
    keys) and ``chunk_spec`` (an index into ``variants``: the channel spec the chunk is
    read with).

    ``specs`` has one channel spec per protocol code (the batch's columns);
    ``variants`` starts with them and adds one per (protocol, columns a stream lacks)
    that occurs (``stream_variant``: each stream's). ``channel_rows[code]`` is uint8
    ``[V, C]``: the ``has_channel`` row of each variant in batches of protocol ``code``;
    ``target_missing[s]``: stream ``s`` lacks a target column its protocol names (its
    lanes' mask is False). ``key_json``: an aligned plan's keys (SEMANTICS 9).

    :meth:`with_input_valid` is the same plan read with ``input_valid`` (SEMANTICS 5b):
    the same schedules, its channel specs keeping NaN where an input is not a real
    value, so its chunks and blocks are cached under keys of their own.
    """

    artifact: PlanArtifact
    columns: tuple[ColumnInfo, ...]  # every segment's, as a chunk read sees them
    specs: tuple[ChannelSpec, ...]  # per protocol code
    chunk_gstart: np.ndarray
    chunk_piece: np.ndarray
    chunk_index: np.ndarray
    chunk_len: np.ndarray
    chunk_spec: np.ndarray  # int16 [NC]
    variants: tuple[ChannelSpec, ...]
    stream_variant: np.ndarray  # int64 [S]
    channel_rows: tuple[np.ndarray, ...]  # per protocol code: uint8 [V, C]
    target_missing: np.ndarray  # bool [S]
    group_key_json: tuple[str, ...]
    alignment_key_json: tuple[str, ...]
    key_json: tuple[str, ...] = ()  # aligned plans: each key (``Schedule.lane_key``)
    packs: VersionPack | None = None  # the version's small segments' rows, when found
    _segments: dict[str, SegmentInfo] = field(default_factory=dict, repr=False)
    _schedules: Memo[int, Schedule] = field(
        default_factory=lambda: Memo(_EPOCHS_KEPT), repr=False)
    _chunk_bytes: Memo[int, np.ndarray] = field(
        default_factory=lambda: Memo(_EPOCHS_KEPT), repr=False)
    _reading: dict[bool, PlanContext] = field(default_factory=dict, repr=False)

    @property
    def plan_id(self) -> str:
        """The plan's id."""
        return self.artifact.plan_id

    @property
    def version_id(self) -> str:
        """The dataset version the plan reads."""
        return self.artifact.version_id

    @property
    def root_uri(self) -> str:
        """The storage root of the plan's segments."""
        return self.artifact.root_uri

    @property
    def spec(self) -> PlanSpec:
        """The planning fields."""
        return self.artifact.spec

    @property
    def streams(self) -> Streams:
        """The plan's streams."""
        return self.artifact.streams

    @property
    def input_valid(self) -> bool:
        """Whether its batches carry ``input_valid`` (:meth:`with_input_valid`)."""
        return self.specs[0].input_valid if self.specs else False

    def with_input_valid(self) -> PlanContext:
        """This plan read with ``input_valid`` (made once, then kept with this one): the
        same artifact, schedules and pack, every channel spec with ``input_valid``."""
        if self.input_valid:
            return self
        found = self._reading.get(True)
        if found is None:
            found = self._reading.setdefault(True, dataclasses.replace(
                self, specs=tuple(dataclasses.replace(s, input_valid=True) for s in self.specs),
                variants=tuple(dataclasses.replace(v, input_valid=True)
                               for v in self.variants),
                _reading={}))
        return found

    def schedule(self, epoch: int) -> Schedule:
        """The global schedule of ``epoch`` (the last few epochs are kept; concurrent
        streams of one epoch compute it once)."""
        return self._schedules.get(epoch, lambda: self.artifact.epoch_schedule(epoch))

    def chunk_bytes(self, epoch: int) -> np.ndarray:
        """The distinct chunk bytes each global batch of ``epoch`` pins on the chunk path
        (:func:`windpipe.services.planning.working_set.batch_chunk_bytes`; the last few epochs
        kept)."""
        return self._chunk_bytes.get(epoch, lambda: batch_chunk_bytes(
            self.streams, self.artifact.chunk_table, self.schedule(epoch)))

    @functools.cached_property
    def chunk_keys(self) -> tuple[ChunkKey, ...]:
        """Each chunk's cache key (made on first use: a block filled from the version's
        pack, or by the window path, never asks for a collection's thousands)."""
        digests = [s.digest for s in self.variants]
        paths, root = self.streams.piece_path, self.root_uri
        return tuple(
            ChunkKey(root, paths[p], i, digests[k])
            for p, i, k in zip(self.chunk_piece.tolist(), self.chunk_index.tolist(),
                               self.chunk_spec.tolist(), strict=True)
        )

    @functools.cached_property
    def packed_pieces(self) -> PackedPieces | None:
        """Where each piece is in the version's pack (None: the plan has no pack)."""
        if self.packs is None:
            return None
        stored = self.artifact.strings  # the artifact's own arrays, when it kept them
        return self.packs.pieces(stored.get("piece_path", self.streams.piece_path),
                                 stored.get("piece_fingerprint",
                                            self.artifact.pieces.fingerprint))

    @property
    def segments(self) -> dict[str, SegmentInfo]:
        """Every piece's segment by path (those not described yet are now)."""
        return {self.streams.piece_path[p]: self.piece_info(p)
                for p in range(len(self.streams.piece_path))}

    def piece_info(self, piece: int) -> SegmentInfo:
        """The segment of piece ``piece`` (described on first use: a block taken from the
        version's pack never asks for most of a collection's thousands)."""
        path = self.streams.piece_path[piece]
        info = self._segments.get(path)
        if info is None:
            layout = self.artifact.pieces
            info = self._segments.setdefault(path, SegmentInfo(
                path=path, format=layout.format[piece],  # type: ignore[arg-type]
                row_count=int(self.streams.piece_rows[piece]), columns=self.columns,
                chunk_rows=tuple(int(r) for r in layout.chunks_of(piece)),
                fingerprint=layout.fingerprint[piece],
            ))
        return info

    @classmethod
    def from_artifact(cls, artifact: PlanArtifact, *,
                      packs: PackStore | None = None) -> PlanContext:
        """Lay out the chunk table and channel specs of a stored plan; ``packs``: where to
        look for its version's pack (:mod:`windpipe.services.storage.packs`; None: none)."""
        streams, layout, spec = artifact.streams, artifact.pieces, artifact.spec
        columns = tuple(ColumnInfo(name=n, dtype="double", numeric=True)
                        for n in spec.columns())
        n_chunks = np.diff(layout.chunk_ptr)
        owner = np.repeat(np.arange(n_chunks.shape[0], dtype=np.int64), n_chunks)
        index = np.arange(owner.shape[0], dtype=np.int64) - layout.chunk_ptr[owner]
        excl = np.cumsum(layout.chunk_rows) - layout.chunk_rows
        piece_base = np.concatenate([[0], np.cumsum(layout.chunk_rows)])[layout.chunk_ptr[:-1]]
        within = excl - piece_base[owner]
        keep = layout.chunk_rows > 0
        chunk_piece = owner[keep]
        chunk_index = index[keep]
        gstart = (streams.stream_base[streams.piece_stream[chunk_piece]]
                  + streams.piece_start[chunk_piece] + within[keep]).astype(np.int64)
        specs = tuple(ChannelSpec.for_protocol(spec, p) for p in streams.protocols)
        variants, variant_code, stream_variant = _variants(
            specs, streams.protocol, artifact.channels, spec.columns())
        chunk_spec = stream_variant[streams.piece_stream[chunk_piece]].astype(np.int16)
        return cls(
            artifact=artifact, columns=columns, specs=specs, chunk_gstart=gstart,
            chunk_piece=chunk_piece, chunk_index=chunk_index,
            chunk_len=layout.chunk_rows[keep].astype(np.int64),
            chunk_spec=chunk_spec, variants=variants, stream_variant=stream_variant,
            channel_rows=tuple(
                np.stack([v.has_channel if v.channels == base.channels
                          else np.zeros(len(base.channels), np.uint8) for v in variants])
                for base in specs),
            target_missing=np.asarray(
                [v.target_present != specs[c].target_present
                 for v, c in zip(variants, variant_code, strict=True)],
                dtype=np.bool_)[stream_variant],
            group_key_json=streams.group_key_json,
            alignment_key_json=streams.alignment_key_json,
            key_json=_key_json(aligned_keys(streams)[0]) if spec.align_by is not None else (),
            packs=(packs.open(artifact.version_id, artifact.root_uri) if packs is not None
                   else None),
        )


def _variants(
    specs: tuple[ChannelSpec, ...], protocol: np.ndarray, channels: np.ndarray | None,
    columns: tuple[str, ...],
) -> tuple[tuple[ChannelSpec, ...], list[int], np.ndarray]:
    """The distinct channel specs of the plan's streams, the protocol code of each, and each
    stream's spec (vectorized over streams: one spec per distinct (protocol, missing
    columns) row)."""
    code = protocol.astype(np.int64)
    if channels is None:
        return specs, list(range(len(specs))), code
    rows = np.concatenate([code[:, None], channels.astype(np.int64)], axis=1)
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    variants = list(specs)
    variant_code = list(range(len(specs)))
    index: dict[tuple[int, ...], int] = {}
    of_distinct = np.empty(distinct.shape[0], dtype=np.int64)
    for d, row in enumerate(distinct.tolist()):
        lacks = frozenset(c for c, h in zip(columns, row[1:], strict=True) if not h)
        if not lacks:
            of_distinct[d] = row[0]
            continue
        key = tuple(row)
        if key not in index:
            variant = specs[row[0]].without(lacks)
            if variant.digest == specs[row[0]].digest:  # lacks only columns it does not use
                index[key] = row[0]
            else:
                index[key] = len(variants)
                variants.append(variant)
                variant_code.append(row[0])
        of_distinct[d] = index[key]
    return tuple(variants), variant_code, of_distinct[inverse.reshape(-1)]


def _key_json(keys: tuple[tuple[object, ...], ...]) -> tuple[str, ...]:
    return tuple(canonical_json(list(k)).decode() for k in keys)
