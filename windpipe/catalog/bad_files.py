"""``on_bad_file="skip"``: which files a registration leaves out, and why.

A registration by pattern refuses a folder whose files it cannot all read, unless asked
to skip them (``on_bad_file="skip"``): then :func:`windpipe.catalog.registration.prepare_version`
checks every file, as for ``"stop"``, and asks :func:`files_to_skip` which to leave out:

- a file that failed its segment check (truncated, not parquet, a corrupt footer, an
  unreadable zarr group): the check's one-line problem is the reason;
- a file whose column names differ from those of the first readable file of its
  identity ``(set_id, cell_id, cidx, protocol)`` (the files of one identity are one
  stream, with one set of sensors);
- every other file of an identity that holds one of those: a stream is registered whole
  or not at all, never with a hole where a part was.

Everything else a registration refuses (a name that does not fit the pattern, two files
of one identity, a side table that lacks a cell) still stops it: those are mistakes in
the request, not in a file. A store that does not answer is no bad file either: the
registration fails ``unavailable``, to be tried again, and skips nothing.

The decision is a few polars expressions over the manifest, whatever its size; only the
first :data:`MAX_SKIPPED_LISTED` reasons are written out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from windpipe.catalog.described import Described
from windpipe.catalog.manifest import IDENTITY_COLUMNS
from windpipe.services.contract.errors import InvalidManifest, WindpipeError
from windpipe.services.storage.segments import ColumnInfo

__all__ = [
    "MAX_SKIPPED_LISTED",
    "OnBadFile",
    "SkippedFile",
    "SkippedFiles",
    "all_skipped_error",
    "files_to_skip",
    "skipped_warning",
]

OnBadFile = Literal["stop", "skip"]
"""What a file the catalog cannot read as a segment does: stop the registration (the
default), or be left out with its reason."""

#: The skipped files an answer lists (the rest are counted): enough to act on, few
#: enough that an answer stays small whatever the folder holds.
MAX_SKIPPED_LISTED = 1000

_IDENT = list(IDENTITY_COLUMNS)


@dataclass(frozen=True)
class SkippedFile:
    """A file left out of a version: its path under the root and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class SkippedFiles:
    """The files a registration left out: the first :data:`MAX_SKIPPED_LISTED` in
    manifest (identity) order, and how many in all. ``read``: one of them was read
    without a problem (left out for another file of its identity), so what the checks
    took from the files (the profile's sums, the pack's rows) holds rows the version
    does not."""

    files: tuple[SkippedFile, ...] = ()
    count: int = 0
    read: bool = False

    def __bool__(self) -> bool:
        return self.count > 0


def _names_per_row(columns_id: np.ndarray, lists: list[tuple[ColumnInfo, ...]],
                   ) -> tuple[np.ndarray, list[frozenset[str]]]:
    """Per row, the id of its set of column names (-1: not described), and the sets."""
    ids: dict[frozenset[str], int] = {}
    of_list = np.fromiter((ids.setdefault(frozenset(c.name for c in cols), len(ids))
                           for cols in lists), dtype=np.int64, count=len(lists))
    if not len(lists):
        return np.full(columns_id.shape[0], -1, dtype=np.int64), []
    return np.where(columns_id >= 0, of_list[np.maximum(columns_id, 0)], -1), list(ids)


def files_to_skip(frame: pl.DataFrame, described: Described,
                  ) -> tuple[np.ndarray, SkippedFiles]:
    """Which rows of ``frame`` to keep (bool per row) and the files left out (see the
    module docstring). ``frame``'s rows are its segments, in order (no path was
    refused): row ``k`` is ``described``'s segment ``k``."""
    height = frame.height
    unreadable = np.zeros(height, dtype=bool)
    if described.problems:
        unreadable[np.fromiter(described.problems, dtype=np.int64)] = True
    names, sets = _names_per_row(described.columns_id.astype(np.int64),
                                 described.column_lists)
    if not described.problems and len(sets) <= 1:  # every file read, one set of columns
        return np.ones(height, dtype=bool), SkippedFiles()
    seen = pl.col("_names") >= 0
    rows = frame.select(*_IDENT, "segment_path").with_row_index("_row").with_columns(
        pl.Series("_names", names, dtype=pl.Int64),
        pl.Series("_unreadable", unreadable, dtype=pl.Boolean),
    ).with_columns(
        pl.col("_names").filter(seen).first().over(_IDENT).alias("_first_names"),
        pl.col("segment_path").filter(seen).first().over(_IDENT).alias("_first_path"),
    ).with_columns(
        (seen & (pl.col("_names") != pl.col("_first_names"))).fill_null(value=False)
        .alias("_differs"),
    ).with_columns((pl.col("_unreadable") | pl.col("_differs")).alias("_bad")).with_columns(
        pl.col("_bad").any().over(_IDENT).alias("_skip"),
        pl.col("segment_path").filter(pl.col("_bad")).first().over(_IDENT).alias("_first_bad"),
    )
    skip = rows.get_column("_skip").to_numpy()
    count = int(skip.sum())
    if not count:
        return np.ones(height, dtype=bool), SkippedFiles()
    listed = [_skipped(rec, described, sets) for rec in
              rows.filter(pl.col("_skip")).head(MAX_SKIPPED_LISTED).iter_rows(named=True)]
    was_read = bool((skip & (names >= 0)).any())
    return ~skip, SkippedFiles(files=tuple(listed), count=count, read=was_read)


def _skipped(rec: dict[str, Any], described: Described,
             sets: list[frozenset[str]]) -> SkippedFile:
    path = rec["segment_path"]
    if rec["_unreadable"]:
        return SkippedFile(path, described.problems[rec["_row"]])
    if rec["_differs"]:
        have, first = sets[rec["_names"]], sets[rec["_first_names"]]
        parts = []
        if missing := sorted(first - have):
            parts.append(f"missing columns {missing}")
        if extra := sorted(have - first):
            parts.append(f"extra columns {extra}")
        return SkippedFile(path, f"its columns differ from those of {rec['_first_path']!r}, "
                                 "a file of the same identity (the files of one identity "
                                 f"are one stream, with one set of columns): {'; '.join(parts)}")
    identity = tuple(rec[c] for c in _IDENT)
    return SkippedFile(path, f"left out with {rec['_first_bad']!r}, a file of the same "
                             f"identity (set_id, cell_id, cidx, protocol) = {identity}: an "
                             "identity's files are one stream, registered whole or not at all")


def all_skipped_error(skipped: SkippedFiles) -> WindpipeError:
    """The ``invalid_manifest`` of a registration whose every file was skipped: nothing
    would be left to register."""
    first = skipped.files[0]
    return InvalidManifest(
        f"every file was skipped ({skipped.count}; on_bad_file 'skip'), nothing to register: "
        f"first: {first.path!r}: {first.reason}",
        details={"problems": [{"row": None, "segment_path": f.path, "problem": f.reason}
                              for f in skipped.files],
                 "problem_count": skipped.count, "problems_complete": True})


def skipped_warning(skipped: SkippedFiles) -> dict[str, Any]:
    """The registration warning (``type`` ``"skipped_files"``) that says files were left
    out: how many, and the first with its reason."""
    first = skipped.files[0]
    plural = "s" if skipped.count != 1 else ""
    return {"type": "skipped_files", "count": skipped.count,
            "message": f"{skipped.count} file{plural} left out (on_bad_file 'skip'; the "
                       f"version's 'skipped' lists them): first {first.path!r}: "
                       f"{first.reason}"}
