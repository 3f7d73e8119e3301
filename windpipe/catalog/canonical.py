"""Canonical JSON of a table's rows, written by polars instead of row by row in Python.

A version's id digests the canonical JSON (:func:`windpipe.services.contract.identity.
canonical_json`) of every segment's row, and each manifest row's id hashes the same
encoding of its identity: a JSON array per row, a value each. For a collection of
100,000 segments, ``json.dumps`` of each row costs more than the rest of building the
version. :func:`row_json` writes the same text with polars expressions, column by
column: integers and booleans as polars prints them (the same digits and words JSON
has), strings quoted as they are when they hold nothing JSON escapes; a column of any
other type, or holding such a string, is written by ``canonical_json`` itself, once a
distinct value (metadata repeats a few values over many segments). The bytes are the
same either way (tests compare them on every type).
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl

from windpipe.services.contract.identity import canonical_json

__all__ = ["identity_ids", "row_json"]

_ESCAPED = r"[\x00-\x1f\"\\]"  # what json.dumps escapes in a string (ensure_ascii=False)
_PLAIN_INTS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
               pl.UInt64)


def _value_json(column: pl.Series) -> pl.Series:
    """The canonical JSON of each value of ``column`` (null: ``null``)."""
    dtype = column.dtype
    if dtype in _PLAIN_INTS or dtype == pl.Boolean:
        text = column.cast(pl.String)
    elif dtype == pl.String and not column.str.contains(_ESCAPED).any():
        text = ('"' + column + '"')
    else:  # floats (integral ones are integers), escapes, dates...: as canonical_json has it
        return _by_value(column)
    return text.fill_null("null")


def _by_value(column: pl.Series) -> pl.Series:
    """``canonical_json`` of each distinct value of ``column``, joined back on the values
    (a manifest's metadata repeats a few values over many segments)."""
    distinct = column.unique(maintain_order=True)
    texts = pl.Series("_json", [canonical_json(v).decode() for v in distinct.to_list()],
                      dtype=pl.String)
    keyed = pl.DataFrame([distinct.alias("_v"), texts]).filter(pl.col("_v").is_not_null())
    joined = pl.DataFrame([column.alias("_v")]).join(keyed, on="_v", how="left",
                                                     maintain_order="left")
    out = joined.get_column("_json")
    if out.len() != column.len() or (out.is_null() & column.is_not_null()).any():
        return pl.Series(column.name, [canonical_json(v).decode() for v in column.to_list()],
                         dtype=pl.String)  # values a join does not match (none known)
    return out.fill_null("null").alias(column.name)


def row_json(frame: pl.DataFrame) -> pl.Series:
    """Per row of ``frame``: ``canonical_json(list(row))`` as text (its columns in order)."""
    if not frame.width:
        return pl.Series("json", ["[]"] * frame.height, dtype=pl.String)
    parts = [_value_json(frame.get_column(c)) for c in frame.columns]
    return pl.select(pl.concat_str([pl.lit("["), pl.concat_str(parts, separator=","),
                                    pl.lit("]")]).alias("json")).to_series()


def identity_ids(identity: pl.DataFrame) -> pl.Series:
    """``manifest_row_id`` of each row of ``identity`` (``set_id``, ``cell_id``, ``cidx``,
    ``protocol``): :func:`windpipe.services.contract.identity.manifest_row_id`, its canonical JSON
    written by :func:`row_json`."""
    keyed = identity.select(pl.lit("manifest_row").alias("kind"),
                            pl.col("set_id").cast(pl.String), pl.col("cell_id").cast(pl.String),
                            pl.col("cidx").cast(pl.Int64), pl.col("protocol").cast(pl.String))
    blake = hashlib.blake2b
    ids = np.fromiter((int.from_bytes(blake(text.encode(), digest_size=8).digest(), "big") >> 1
                       for text in row_json(keyed).to_list()),
                      dtype=np.int64, count=identity.height)
    return pl.Series("manifest_row_id", ids, dtype=pl.Int64)
