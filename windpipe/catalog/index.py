"""The ML index of a version (SEMANTICS section 1): one row per manifest row (identity).

Columns: ``manifest_row_id`` (int64), ``set_id``, ``cell_id``, ``cidx`` (int64),
``protocol``, the metadata columns, ``row_count`` (int64), ``n_segments``,
``segment_paths`` (list[str]), ``segment_rows`` (list[int64]), ``position``
(order of first appearance in the manifest). Sorted by
``(set_id, cell_id, cidx, protocol)``, ties by ``position``.
"""

from __future__ import annotations

import io

import polars as pl
import pyarrow as pa

from windpipe.catalog.manifest import IDENTITY_COLUMNS

__all__ = [
    "INDEX_SORT",
    "build_index",
    "index_metadata_columns",
    "index_to_arrow_ipc",
]

INDEX_SORT: tuple[str, ...] = (*IDENTITY_COLUMNS, "position")
_COMPUTED = ("manifest_row_id", *IDENTITY_COLUMNS, "row_count", "n_segments",
             "segment_paths", "segment_rows", "position")


def index_metadata_columns(frame: pl.DataFrame) -> tuple[str, ...]:
    """The metadata columns of an index or manifest-rows frame, in stored order."""
    return tuple(c for c in frame.columns if c not in _COMPUTED)


def build_index(manifest_rows: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """The sorted ML index from a version's manifest rows and segments.

    ``segments`` needs ``manifest_row_id``, ``ordinal``, ``path``, ``row_count``;
    a manifest row's segments are listed by ``ordinal``.
    """
    meta = index_metadata_columns(manifest_rows)
    per_row = (
        segments.sort(["manifest_row_id", "ordinal"])
        .group_by("manifest_row_id", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("n_segments"),
            pl.col("path").alias("segment_paths"),
            pl.col("row_count").cast(pl.Int64).alias("segment_rows"),
        )
    )
    frame = manifest_rows.drop("row_count", strict=False).join(
        per_row, on="manifest_row_id", how="left"
    )
    frame = frame.with_columns(
        pl.col("manifest_row_id").cast(pl.Int64),
        pl.col("cidx").cast(pl.Int64),
        pl.col("n_segments").fill_null(0),
        pl.col("segment_paths").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pl.col("segment_rows").fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
        pl.col("position").cast(pl.Int64),
    ).with_columns(pl.col("segment_rows").list.sum().cast(pl.Int64).alias("row_count"))
    return frame.select(
        "manifest_row_id", *IDENTITY_COLUMNS, *meta, "row_count", "n_segments",
        "segment_paths", "segment_rows", "position",
    ).sort(list(INDEX_SORT), maintain_order=True)


def index_to_arrow_ipc(frame: pl.DataFrame) -> bytes:
    """The frame as an Arrow IPC stream (large string/list types, no view types)."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.oldest())
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()
