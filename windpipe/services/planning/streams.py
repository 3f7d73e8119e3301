"""Streams: the rows of all manifest rows sharing one ``group_key`` (SEMANTICS section 3).

Columnar and numpy-backed. :func:`build_streams` runs once, when the catalog makes
a plan; the streams are then part of the stored plan
(:class:`windpipe.services.planning.artifact.PlanArtifact`) and every consumer reads them from
there.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import polars as pl

from windpipe.services.contract.errors import InvalidConfig, WindpipeError
from windpipe.services.contract.identity import canonical_json, identity_tuple

__all__ = ["JsonKeys", "Streams", "build_streams"]

_ROW = "__wp_row"
_STREAM = "__wp_stream"


class JsonKeys(Sequence[tuple[Any, ...]]):
    """Keys stored as JSON arrays (a plan artifact's ``canonical_json(list(key))`` each),
    parsed in one call when first read as values: a Flight server streaming a plan
    hashes and sends the stored text and never needs them (5 ms for 6,700 keys)."""

    __slots__ = ("_encoded", "_keys")

    def __init__(self, encoded: Sequence[str]) -> None:
        self._encoded = encoded
        self._keys: tuple[tuple[Any, ...], ...] | None = None

    def _values(self) -> tuple[tuple[Any, ...], ...]:
        if self._keys is None:
            self._keys = tuple(map(tuple, json.loads("[" + ",".join(self._encoded) + "]")))
        return self._keys

    def __len__(self) -> int:
        return len(self._encoded)

    @overload
    def __getitem__(self, i: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[Any, ...], ...]: ...

    def __getitem__(self, i: int | slice) -> tuple[Any, ...] | tuple[tuple[Any, ...], ...]:
        return self._values()[i]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._values() == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # compared as the tuple of its keys

    def __repr__(self) -> str:
        return f"JsonKeys({self._values()!r})"


@dataclass(frozen=True, eq=False)
class Streams:
    """All streams of a plan, in index order (stream ``s`` = position ``s``).

    Per stream (length S): ``protocol`` codes into ``protocols``, ``n_rows``,
    ``group_keys`` / ``alignment_keys`` (tuples of plain values; the alignment key
    is taken from the stream's first manifest row), ``piece_ptr`` (S+1, CSR into
    the pieces).
    Per piece (length P; a piece is one normalized segment, in stream order):
    ``piece_path`` (storage-relative path), ``piece_manifest_row_id``,
    ``piece_rows``, ``piece_start`` (row offset of the piece inside its stream).
    """

    protocols: tuple[str, ...]
    protocol: np.ndarray  # int16 [S]
    n_rows: np.ndarray  # int64 [S]
    group_keys: Sequence[tuple[Any, ...]]  # a tuple, or JsonKeys from an artifact
    alignment_keys: Sequence[tuple[Any, ...]]
    piece_ptr: np.ndarray  # int64 [S+1]
    piece_path: tuple[str, ...]
    piece_manifest_row_id: np.ndarray  # int64 [P]
    piece_rows: np.ndarray  # int64 [P]
    piece_start: np.ndarray  # int64 [P]

    @property
    def count(self) -> int:
        """Number of streams."""
        return int(self.n_rows.shape[0])

    @functools.cached_property
    def group_key_json(self) -> tuple[str, ...]:
        """Each stream's group key as canonical JSON (``canonical_json(list(key))``: what
        the plan artifact stores, and hashes of a key are taken over)."""
        return tuple(canonical_json(list(k)).decode() for k in self.group_keys)

    @functools.cached_property
    def alignment_key_json(self) -> tuple[str, ...]:
        """Each stream's alignment key as canonical JSON (as :attr:`group_key_json`)."""
        return tuple(canonical_json(list(k)).decode() for k in self.alignment_keys)

    @functools.cached_property
    def piece_stream(self) -> np.ndarray:
        """Stream of each piece (int64 [P])."""
        return np.repeat(np.arange(self.count, dtype=np.int64), np.diff(self.piece_ptr))

    @functools.cached_property
    def stream_base(self) -> np.ndarray:
        """Offset of each stream in the concatenation of all streams (int64 [S+1])."""
        return np.concatenate([[0], np.cumsum(self.n_rows, dtype=np.int64)])

    @functools.cached_property
    def piece_global_start(self) -> np.ndarray:
        """Row of each piece's first row in the concatenation of all streams (int64 [P])."""
        return (self.stream_base[self.piece_stream] + self.piece_start).astype(np.int64)

    @classmethod
    def from_pieces(
        cls,
        *,
        protocols: tuple[str, ...],
        stream_protocols: list[str],
        group_keys: list[tuple[Any, ...]],
        alignment_keys: list[tuple[Any, ...]],
        pieces: list[list[tuple[str, int, int]]],
    ) -> Streams:
        """Build directly from per-stream pieces ``(path, manifest_row_id, rows)``.

        For tests and tools that have no index frame at hand.
        """
        code = {p: i for i, p in enumerate(protocols)}
        rows = [np.asarray([r for _, _, r in ps], dtype=np.int64) for ps in pieces]
        starts = [np.concatenate([[0], np.cumsum(r)[:-1]]).astype(np.int64) for r in rows]
        flat = [piece for ps in pieces for piece in ps]
        return cls(
            protocols=tuple(protocols),
            protocol=np.asarray([code[p] for p in stream_protocols], dtype=np.int16),
            n_rows=np.asarray([int(r.sum()) for r in rows], dtype=np.int64),
            group_keys=tuple(tuple(k) for k in group_keys),
            alignment_keys=tuple(tuple(k) for k in alignment_keys),
            piece_ptr=np.concatenate([[0], np.cumsum([len(ps) for ps in pieces])]).astype(
                np.int64
            ),
            piece_path=tuple(path for path, _, _ in flat),
            piece_manifest_row_id=np.asarray([m for _, m, _ in flat], dtype=np.int64),
            piece_rows=np.concatenate([np.zeros(0, np.int64), *rows]).astype(np.int64),
            piece_start=np.concatenate([np.zeros(0, np.int64), *starts]).astype(np.int64),
        )


def _invalid(message: str, **details: Any) -> WindpipeError:
    return InvalidConfig(message, details=details)


def build_streams(
    index: pl.DataFrame,
    segments: pl.DataFrame,
    *,
    split: str,
    protocols: tuple[str, ...],
    group_key: tuple[str, ...],
    alignment_key: tuple[str, ...],
) -> Streams:
    """The streams of a plan from the ML index and its segment table.

    ``index`` is sorted in index order (SEMANTICS section 1); rows outside ``split``
    (when a ``split`` column exists) or ``protocols`` (the plan's, in its order) are
    left out. ``segments`` has ``manifest_row_id``, ``ordinal``, ``path`` and
    ``row_count``. Streams must be single-protocol, so ``group_key`` must contain
    ``protocol``.
    """
    if "protocol" not in group_key:
        raise _invalid(
            f"group_key {list(group_key)} must contain 'protocol': a stream holds one protocol",
            group_key=list(group_key),
        )
    unknown = sorted({*group_key, *alignment_key} - set(index.columns))
    if unknown:
        raise _invalid(
            f"group_key/alignment_key name unknown column(s) {unknown}",
            unknown_columns=unknown, columns=index.columns,
        )
    frame = index
    if "split" in frame.columns:
        frame = frame.filter(pl.col("split") == split)
    frame = frame.filter(pl.col("protocol").cast(pl.String).is_in(list(protocols)))
    frame = frame.with_row_index(_ROW)

    firsts = (
        frame.group_by(list(group_key), maintain_order=True)
        .agg(pl.col(_ROW).min())
        .sort(_ROW)
        .with_row_index(_STREAM)
    )
    rows = frame.join(
        firsts.select([*group_key, _STREAM]), on=list(group_key), how="left", nulls_equal=True,
        maintain_order="left",
    ).sort([_STREAM, _ROW])
    n_streams = firsts.height

    seg = segments.select(
        pl.col("manifest_row_id").cast(pl.Int64),
        pl.col("ordinal").cast(pl.Int64),
        pl.col("path").cast(pl.String),
        pl.col("row_count").cast(pl.Int64),
    )
    pieces = (
        rows.select(pl.col("manifest_row_id").cast(pl.Int64), _ROW, _STREAM)
        .join(seg, on="manifest_row_id", how="inner")
        .sort([_STREAM, _ROW, "ordinal"])
    )
    piece_stream = pieces[_STREAM].to_numpy().astype(np.int64)
    piece_rows = pieces["row_count"].to_numpy().astype(np.int64)
    counts = np.bincount(piece_stream, minlength=n_streams).astype(np.int64)
    piece_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n_rows = np.bincount(piece_stream, weights=piece_rows, minlength=n_streams).astype(np.int64)
    cum = np.cumsum(piece_rows) - piece_rows
    piece_start = cum - (np.concatenate([[0], np.cumsum(n_rows)]))[piece_stream]

    code = {p: i for i, p in enumerate(protocols)}
    first_rows = rows.unique(subset=[_STREAM], keep="first", maintain_order=True)
    stream_protocol = np.asarray(
        [code[str(p)] for p in first_rows["protocol"].to_list()], dtype=np.int16
    )
    return Streams(
        protocols=protocols,
        protocol=stream_protocol,
        n_rows=n_rows,
        group_keys=tuple(
            identity_tuple(k) for k in first_rows.select(list(group_key)).iter_rows()
        ),
        alignment_keys=tuple(
            identity_tuple(k) for k in first_rows.select(list(alignment_key)).iter_rows()
        ),
        piece_ptr=piece_ptr,
        piece_path=tuple(pieces["path"].to_list()),
        piece_manifest_row_id=pieces["manifest_row_id"].to_numpy().astype(np.int64),
        piece_rows=piece_rows,
        piece_start=piece_start.astype(np.int64),
    )
