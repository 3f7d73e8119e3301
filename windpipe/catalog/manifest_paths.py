"""A manifest's segment paths, normalized and each listed once, checked in one polars pass.

Every segment path of a manifest is checked for its syntax and normalized
(:func:`windpipe.services.storage.paths.normalized_path`: no absolute paths, backslashes, URL
schemes, ``..`` or control characters; ``./`` and doubled ``/`` removed) and must be
listed once. A collection's paths are nearly all plain already: ASCII, relative,
without empty, ``.`` or ``..`` parts, so their normal form is themselves. Such paths
are recognized by regular expressions over the whole column; only the others go
through :func:`~services.storage.paths.normalized_path` one by one (the one definition
of the rules, and of their messages). The paths stay a polars column: no Python string
a segment is held while the registration runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from windpipe.catalog.problems import ProblemLog
from windpipe.services.storage.paths import PathEscapeError, normalized_path

__all__ = ["unique_paths"]

_PART = r"[\x20-\x2e\x30-\x5b\x5d-\x7e]+"  # printable ASCII but '/' and '\'
_PLAIN = rf"^{_PART}(?:/{_PART})*$"
_DOTS = r"(?:^|/)\.\.?(?:/|$)"  # a '.' or '..' part
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*:"


def unique_paths(raw: pl.Series, log: ProblemLog,
                 problem: Callable[[int, Any, str], dict[str, Any]],
                 ) -> tuple[pl.Series, np.ndarray]:
    """The normalized paths of ``raw`` (a manifest's ``segment_path``) that are valid,
    each the first time it is listed, and the manifest row of each; the other rows are
    problems added to ``log`` (``problem(row, raw path, text)``): an invalid path, or
    one listed before (naming the first row)."""
    plain = (raw.str.contains(_PLAIN) & ~raw.str.contains(_DOTS) & ~raw.str.contains(_SCHEME)
             & raw.str.contains(r"[^ ]")).fill_null(value=False)
    normal = raw.cast(pl.String)
    odd = (~plain).arg_true()
    if odd.len():
        fixed: list[str | None] = []
        for row, path in zip(odd.to_list(), raw.gather(odd).to_list(), strict=True):
            try:
                fixed.append(normalized_path(path))
            except PathEscapeError as exc:
                log.add(problem(row, path, f"invalid segment path: {exc}"))
                fixed.append(None)
        normal = normal.scatter(odd, pl.Series(fixed, dtype=pl.String))
    found = pl.DataFrame({"path": normal}).with_row_index("row").with_columns(
        pl.col("row").first().over("path").alias("first"))
    again = found.filter(pl.col("path").is_not_null() & (pl.col("row") != pl.col("first")))
    for row, first in again.select("row", "first").iter_rows():
        log.add(problem(row, raw[row], f"segment listed twice (first in row {first})"))
    kept = found.filter(pl.col("path").is_not_null() & (pl.col("row") == pl.col("first")))
    return kept.get_column("path"), kept.get_column("row").to_numpy().astype(np.int64)
