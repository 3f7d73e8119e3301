"""A stored plan made ready to materialize: its chunk table, channels and per-epoch schedules.

:meth:`PlanContext.from_artifact` takes a :class:`planning.artifact.PlanArtifact`
(loaded from the catalog database, from ``GET /v1/plans/{id}/artifact``, or made in
memory) and lays out every chunk of every piece as one global chunk table, so
finding the chunks a lane reads is a ``searchsorted``. Nothing here reads the index
or rebuilds streams: the artifact is the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contract.configs import PlanSpec
from contract.identity import canonical_json
from materialize.chunks import ChannelSpec, ChunkKey
from planning.artifact import PlanArtifact
from planning.schedule import Schedule
from planning.streams import Streams
from services.memo import Memo
from storage.segments import ColumnInfo, SegmentInfo

__all__ = ["PlanContext"]

_EPOCHS_KEPT = 4


@dataclass(frozen=True, eq=False)
class PlanContext:
    """One plan, ready to stream. Build with :meth:`from_artifact`.

    Chunk table (length NC, chunks of all pieces in stream order): ``chunk_gstart``
    (global row of each chunk's first row; streams are laid end to end as in
    ``Streams.stream_base``), ``chunk_piece``, ``chunk_index`` (index inside its
    segment), ``chunk_len`` (rows; empty chunks are left out), ``chunk_keys`` (cache
    keys) and ``chunk_spec`` (protocol code of each chunk, an index into ``specs``).
    """

    artifact: PlanArtifact
    segments: dict[str, SegmentInfo]
    specs: tuple[ChannelSpec, ...]  # per protocol code
    chunk_gstart: np.ndarray
    chunk_piece: np.ndarray
    chunk_index: np.ndarray
    chunk_len: np.ndarray
    chunk_keys: tuple[ChunkKey, ...]
    chunk_spec: np.ndarray  # int16 [NC]
    group_key_json: tuple[str, ...]
    alignment_key_json: tuple[str, ...]
    _schedules: Memo[int, Schedule] = field(
        default_factory=lambda: Memo(_EPOCHS_KEPT), repr=False)

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

    def schedule(self, epoch: int) -> Schedule:
        """The global schedule of ``epoch`` (the last few epochs are kept; concurrent
        streams of one epoch compute it once)."""
        return self._schedules.get(epoch, lambda: self.artifact.epoch_schedule(epoch))

    def piece_info(self, piece: int) -> SegmentInfo:
        """The segment of piece ``piece``."""
        return self.segments[self.streams.piece_path[piece]]

    @classmethod
    def from_artifact(cls, artifact: PlanArtifact) -> PlanContext:
        """Lay out the chunk table and channel specs of a stored plan."""
        streams, layout, spec = artifact.streams, artifact.pieces, artifact.spec
        columns = tuple(ColumnInfo(name=n, dtype="double", numeric=True)
                        for n in spec.columns())
        segments: dict[str, SegmentInfo] = {}
        for p, path in enumerate(streams.piece_path):
            segments.setdefault(path, SegmentInfo(
                path=path, format=layout.format[p],  # type: ignore[arg-type]
                row_count=int(streams.piece_rows[p]), columns=columns,
                chunk_rows=tuple(int(r) for r in layout.chunks_of(p)),
                fingerprint=layout.fingerprint[p],
            ))
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
        chunk_spec = streams.protocol[streams.piece_stream[chunk_piece]].astype(np.int16)
        digests = [s.digest for s in specs]
        paths = streams.piece_path
        chunk_keys = tuple(
            ChunkKey(artifact.root_uri, paths[p], i, digests[k])
            for p, i, k in zip(chunk_piece.tolist(), chunk_index.tolist(), chunk_spec.tolist(),
                               strict=True)
        )
        return cls(
            artifact=artifact, segments=segments, specs=specs, chunk_gstart=gstart,
            chunk_piece=chunk_piece, chunk_index=chunk_index,
            chunk_len=layout.chunk_rows[keep].astype(np.int64), chunk_keys=chunk_keys,
            chunk_spec=chunk_spec,
            group_key_json=_key_json(streams.group_keys),
            alignment_key_json=_key_json(streams.alignment_keys),
        )


def _key_json(keys: tuple[tuple[object, ...], ...]) -> tuple[str, ...]:
    return tuple(canonical_json(list(k)).decode() for k in keys)
