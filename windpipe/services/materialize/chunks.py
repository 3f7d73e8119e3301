"""Decoded, scaled segment chunks: what the chunk cache holds.

A chunk (a parquet row group or a zarr chunk along axis 0) is read once with
``windpipe.services.storage.segments.read_chunk`` and turned into one float32 row matrix
``(rows, C_in + C_out)`` laid out like the rows of a batch's window block
(:mod:`windpipe.services.materialize.rows`), so materializing a lane is a plain slice copy:

* the first ``C_in`` values of a row, its inputs: scaled; null, NaN and +-inf values and
  channels the segment's protocol does not have as inputs are ``-2.0`` (``NaN`` under a
  spec with ``input_valid``: the batch's ``input_valid`` is read from them, and the
  batch gets its ``-2.0`` when it is built, :func:`~services.materialize.rows.fill_inputs`);
* the last ``C_out``, its targets: scaled; null, NaN and +-inf -> NaN (mask false);
  absent channels NaN.

+-inf becomes NaN before scaling, so no scaling (not even ``clip``) can turn it into
a valid-looking number (SEMANTICS section 5).

Scaling runs here, once per chunk load (SEMANTICS 5 and 6). The cache key names
the storage root, segment path, chunk index and a digest of the channel spec, so
plans that read the same channels with the same scaling share cached chunks.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from windpipe.services.contract.configs import PlanSpec, ScalingSpec
from windpipe.services.contract.errors import (
    ErrorType,
    SegmentChanged,
    SegmentError,
    WindpipeError,
    error_class,
)
from windpipe.services.contract.wire import INPUT_PAD
from windpipe.services.logging import get_logger
from windpipe.services.materialize.rows import RowMatrix
from windpipe.services.planning.sizes import chunk_row_bytes
from windpipe.services.storage.segments import SegmentInfo, read_chunk
from windpipe.services.storage.store import Storage

__all__ = [
    "ChannelSpec", "ChunkKey", "ChunkMatrices", "lay_out", "load_chunk", "segment_errors",
]

_log = get_logger("windpipe.materialize")


@dataclass(frozen=True)
class ChannelSpec:
    """The channels of one protocol's lanes in a plan and how each is scaled.

    ``*_present[c]`` is False for a channel of the batch (the chained union) that
    this protocol does not configure, or that the stream lacks (:meth:`without`):
    such a channel is padding. ``input_valid``: inputs that are not a real value stay
    NaN in chunks and blocks (:attr:`input_fill`) for the batch to tell them apart; a
    part of the digest only when set, so the default spec's cache and block keys stay
    as they were.
    """

    input_columns: tuple[str, ...]
    input_present: tuple[bool, ...]
    target_columns: tuple[str, ...]
    target_present: tuple[bool, ...]
    scaling: tuple[ScalingSpec, ...]
    input_valid: bool = False

    @classmethod
    def for_protocol(cls, spec: PlanSpec, protocol: str) -> ChannelSpec:
        """The channels of lanes of ``protocol`` in a plan with ``spec``."""
        ins = spec.input_columns(protocol)
        outs = spec.target_columns(protocol)
        used = {*ins, *outs}
        return cls(
            input_columns=ins,
            input_present=tuple(c in spec.inputs[protocol] for c in ins),
            target_columns=outs,
            target_present=tuple(c in spec.targets[protocol] for c in outs),
            scaling=tuple(s for s in spec.scaling if s.column in used),
        )

    def without(self, columns: frozenset[str]) -> ChannelSpec:
        """This spec for a stream that lacks ``columns``: they are padding, never read."""
        if not columns:
            return self
        ins = tuple(p and c not in columns for c, p in zip(self.input_columns,
                                                           self.input_present, strict=True))
        outs = tuple(p and c not in columns for c, p in zip(self.target_columns,
                                                            self.target_present, strict=True))
        keep = {c for c, p in zip(self.input_columns, ins, strict=True) if p}
        keep |= {c for c, p in zip(self.target_columns, outs, strict=True) if p}
        return ChannelSpec(
            input_columns=self.input_columns, input_present=ins,
            target_columns=self.target_columns, target_present=outs,
            scaling=tuple(s for s in self.scaling if s.column in keep),
            input_valid=self.input_valid,
        )

    @property
    def input_fill(self) -> float:
        """What an input that is not a real value holds in chunks and blocks."""
        return math.nan if self.input_valid else INPUT_PAD

    @property
    def channels(self) -> tuple[str, ...]:
        """The batch's channels, each once: the inputs, then targets that are not inputs
        (the columns of ``has_channel``)."""
        return tuple(dict.fromkeys((*self.input_columns, *self.target_columns)))

    @cached_property
    def has_channel(self) -> np.ndarray:
        """uint8 per channel of :attr:`channels`: 1 where this spec reads it."""
        present = {c for c, p in zip(self.input_columns, self.input_present, strict=True) if p}
        present |= {c for c, p in zip(self.target_columns, self.target_present, strict=True)
                    if p}
        return np.asarray([c in present for c in self.channels], dtype=np.uint8)

    @cached_property
    def digest(self) -> str:
        """A short stable digest (part of the cache key)."""
        body: dict[str, Any] = {
            "in": [c if p else None for c, p in zip(self.input_columns, self.input_present,
                                                    strict=True)],
            "out": [c if p else None for c, p in zip(self.target_columns, self.target_present,
                                                     strict=True)],
            "scaling": sorted((s.model_dump(mode="json") for s in self.scaling),
                              key=lambda d: d["column"]),
        }
        if self.input_valid:
            body["input_valid"] = True
        raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.blake2b(raw, digest_size=12).hexdigest()

    @property
    def read_columns(self) -> tuple[str, ...]:
        """The source columns a chunk load reads (each once)."""
        cols = [c for c, p in zip(self.input_columns, self.input_present, strict=True) if p]
        cols += [c for c, p in zip(self.target_columns, self.target_present, strict=True) if p]
        return tuple(dict.fromkeys(cols))

    def nbytes(self, rows: int) -> int:
        """Size of a cached chunk of ``rows`` rows."""
        return int(rows) * chunk_row_bytes(len(self.input_columns), len(self.target_columns))

    def scaling_for(self, column: str) -> ScalingSpec | None:
        """The scaling of ``column``, if any."""
        return next((s for s in self.scaling if s.column == column), None)


class ChunkKey(NamedTuple):
    """Identity of a cached chunk (a named tuple: hashing is on the hot path)."""

    root: str
    path: str
    chunk: int
    spec: str


class ChunkMatrices(RowMatrix):
    """A loaded chunk: its row matrix ``rows (n, C_in + C_out)`` float32."""

    __slots__ = ()


def load_chunk(
    storage: Storage, info: SegmentInfo, chunk_idx: int, spec: ChannelSpec
) -> tuple[ChunkMatrices, int]:
    """Read, scale and lay out one chunk; returns it and the decoded bytes read.

    Any failure becomes ``segment_error`` naming the segment (``details.path``), except
    an object store that does not answer: that stays ``unavailable`` (retryable: the
    data is fine, the store is not; the SDK resumes the pass at this batch, and the
    ``skip`` policy never drops data for it).
    """
    rows = int(info.chunk_rows[chunk_idx])
    with segment_errors(info, chunk_idx):
        data = read_chunk(storage, info, chunk_idx, list(spec.read_columns))
    read = sum(int(a.nbytes) for a in data.values())
    for name, arr in data.items():
        if arr.shape != (rows,):
            raise SegmentError(
                f"segment {info.path!r} chunk {chunk_idx}: column {name!r} has "
                f"{arr.shape[0]} rows, expected {rows} (changed since registration?)",
                details={"path": info.path, "chunk": chunk_idx},
            )
    return lay_out(data, rows, spec), read


@contextmanager
def segment_errors(info: SegmentInfo, chunk_idx: int) -> Iterator[None]:
    """The errors of reading chunk ``chunk_idx`` of ``info`` (or from it on) as
    :func:`load_chunk` reports them: ``segment_error`` naming the segment, but
    ``unavailable`` stays (the store, not the data)."""
    try:
        yield
    except (SegmentError, SegmentChanged):
        raise
    except WindpipeError as exc:
        kind = ErrorType.UNAVAILABLE if exc.type == ErrorType.UNAVAILABLE else \
            ErrorType.SEGMENT_ERROR
        raise error_class(kind)(
            f"segment {info.path!r}: {exc.message}",
            details={**exc.details, "path": info.path, "chunk": chunk_idx},
        ) from exc
    except Exception as exc:
        _log.warning("segment.chunk_unreadable", path=info.path, chunk=chunk_idx,
                     error=f"{type(exc).__name__}: {exc}")
        raise SegmentError(
            f"reading chunk {chunk_idx} of segment {info.path!r} failed "
            f"({type(exc).__name__}; the server log has the details)",
            details={"path": info.path, "chunk": chunk_idx},
        ) from exc


def lay_out(data: Mapping[str, np.ndarray], rows: int, spec: ChannelSpec, *,
            out: np.ndarray | None = None) -> ChunkMatrices:
    """Scale float64 columns of ``rows`` rows (null as NaN) and lay them out as the chunk
    rows of ``spec`` (the module docstring): one call for any number of rows, so a block
    fill lays out many small chunks at once, straight into its rows (``out``, a
    ``(rows, C)`` float32 matrix; else a new one)."""
    scaled: dict[str, np.ndarray] = {}

    def column(name: str) -> np.ndarray:
        if name not in scaled:
            raw = data[name]
            inf = np.isinf(raw)
            if inf.any():  # +-inf is null: before scaling, so clip keeps NaN
                raw = np.where(inf, np.nan, raw)
            scaling = spec.scaling_for(name)
            scaled[name] = raw if scaling is None else scaling.forward(raw)
        return scaled[name]

    # each column cast straight into its slot of the float32 matrix (no float64 temporary);
    # a value float32 cannot hold (|x| > 3.4e38) becomes inf there, so the checks run after
    # the cast: no input or target is ever +-inf (SEMANTICS 5)
    c_in, fill = len(spec.input_columns), spec.input_fill
    matrix = (np.empty((rows, c_in + len(spec.target_columns)), dtype=np.float32)
              if out is None else out)
    inputs, targets = matrix[:, :c_in], matrix[:, c_in:]
    for c, (name, present) in enumerate(zip(spec.input_columns, spec.input_present,
                                            strict=True)):
        slot = inputs[:, c]
        if not present:
            slot.fill(fill)
            continue
        with np.errstate(over="ignore"):  # past float32's range: inf, padded next
            np.copyto(slot, column(name), casting="same_kind")
        bad = ~np.isfinite(slot)
        if bad.any():
            slot[bad] = fill
    for c, (name, present) in enumerate(zip(spec.target_columns, spec.target_present,
                                            strict=True)):
        if present:
            slot = targets[:, c]
            with np.errstate(over="ignore"):
                np.copyto(slot, column(name), casting="same_kind")
            inf = np.isinf(slot)
            if inf.any():  # past float32's range: not a valid target either
                slot[inf] = np.nan
        else:
            targets[:, c].fill(np.nan)
    return ChunkMatrices(rows=matrix, c_in=c_in)
