"""A version's columns: each manifest row's segments hold the same ones, and each protocol's
schema is the union of its segments' columns.

Both are decided from the segments' column lists, and a collection of 100,000 segments
has a handful of distinct lists (:class:`windpipe.catalog.described.Described` holds one id a
segment): the checks compare ids per manifest row in one polars pass, and the schema
is built from the distinct (protocol, list) pairs and the distinct (manifest row, list)
pairs, never from each segment's columns one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from windpipe.catalog.manifest import IDENTITY_COLUMNS
from windpipe.catalog.problems import ProblemLog
from windpipe.services.storage.segments import ColumnInfo

__all__ = ["column_problems", "protocol_schema"]

_IDENT = list(IDENTITY_COLUMNS)


def _name_sets(lists: list[tuple[ColumnInfo, ...]]) -> tuple[np.ndarray, list[frozenset[str]]]:
    """Per column list (by id): the id of its set of names, and the distinct sets."""
    ids: dict[frozenset[str], int] = {}
    of_list = np.fromiter((ids.setdefault(frozenset(c.name for c in cols), len(ids))
                           for cols in lists), dtype=np.int64, count=len(lists))
    return of_list, list(ids)


def column_problems(frame: pl.DataFrame, columns_id: np.ndarray,
                    lists: list[tuple[ColumnInfo, ...]], log: ProblemLog,
                    problem: Callable[[int, str], dict[str, Any]]) -> None:
    """Segments of one manifest row must hold the same column names (types may differ):
    a manifest row is one measurement, with one set of sensors. ``columns_id[row]``: the
    id of row ``row``'s column list in ``lists`` (-1: the row has no described segment,
    not compared); ``problem(row, text)`` makes the problem of a row."""
    of_list, sets = _name_sets(lists)
    names = np.where(columns_id >= 0, of_list[np.maximum(columns_id, 0)] if len(lists)
                     else -1, -1)
    rows = (frame.select(_IDENT).with_columns(pl.Series("_names", names, dtype=pl.Int64))
            .with_row_index("_row").filter(pl.col("_names") >= 0)
            .with_columns(pl.col("_names").first().over(_IDENT).alias("_first"),
                          pl.col("_row").first().over(_IDENT).alias("_seen"))
            .filter(pl.col("_names") != pl.col("_first")))
    built = []
    for row, have, first, seen in rows.head(log.listed).select(
            "_row", "_names", "_first", "_seen").iter_rows():
        parts = []
        if missing := sorted(sets[first] - sets[have]):
            parts.append(f"missing columns {missing}")
        if extra := sorted(sets[have] - sets[first]):
            parts.append(f"extra columns {extra}")
        built.append(problem(row, f"columns differ from the segment in row {seen} of the same "
                                  "manifest row (segments of one manifest row hold the same "
                                  f"columns): {'; '.join(parts)}"))
    log.extend(built, more=max(rows.height - log.listed, 0))


def protocol_schema(protocols: pl.Series, mrids: pl.Series, columns_id: np.ndarray,
                    lists: list[tuple[ColumnInfo, ...]]) -> dict[str, list[dict[str, Any]]]:
    """Per protocol (in order of first appearance): the union of its segments' columns
    (in the order first seen) as ``{"name", "dtype", "numeric"}``, with ``"missing"``:
    the manifest rows (ids, sorted) lacking the column. One segment a row of the three
    inputs, in manifest order; ``columns_id`` indexes ``lists``."""
    of_list, sets = _name_sets(lists)
    seg = pl.DataFrame({"protocol": protocols, "mrid": mrids,
                        "cid": pl.Series(columns_id, dtype=pl.Int64)})
    pairs = seg.select("protocol", "cid").unique(maintain_order=True)
    rows = seg.select("protocol", "mrid", "cid").unique(subset=["protocol", "mrid"],
                                                        keep="last", maintain_order=True)
    schema: dict[str, list[dict[str, Any]]] = {}
    for protocol in pairs.get_column("protocol").unique(maintain_order=True).to_list():
        cols: dict[str, dict[str, bool]] = {}
        for cid in pairs.filter(pl.col("protocol") == protocol).get_column("cid").to_list():
            for c in lists[cid]:
                cols.setdefault(c.name, {})[c.dtype] = c.numeric
        mine = rows.filter(pl.col("protocol") == protocol)
        by_names: dict[int, np.ndarray] = {}
        for (nid,), part in mine.with_columns(
                pl.Series("nid", of_list[mine.get_column("cid").to_numpy()], dtype=pl.Int64)
        ).group_by("nid"):
            by_names[int(nid)] = part.get_column("mrid").to_numpy()  # type: ignore[call-overload]
        entries = []
        for name, types in cols.items():
            kinds = sorted(types)
            entry: dict[str, Any] = {
                "name": name,
                "dtype": kinds[0] if len(kinds) == 1 else f"mixed({'|'.join(kinds)})",
                "numeric": all(types.values()),
            }
            lacking = [m for nid, m in by_names.items() if name not in sets[nid]]
            if lacking:
                entry["missing"] = [int(m) for m in np.sort(np.concatenate(lacking))]
            entries.append(entry)
        schema[str(protocol)] = entries
    return schema
