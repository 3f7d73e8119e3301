"""A zarr v3 group described from its ``zarr.json`` documents alone, without opening it.

Registration reads every document once to fingerprint a group
(:mod:`windpipe.services.storage.formats.zarr`); for the plain groups windpipe writes (1-D arrays
of numpy types on a regular chunk grid, sharded or not, no nested groups) those bytes
say everything a :class:`~services.storage.formats.base.SegmentInfo` needs, so the group
is not opened again through zarr. Anything else answers None and the caller opens the
group with zarr (the same answer, or the same problem, the slow way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from windpipe.services.storage.formats.base import ColumnInfo, is_numeric

__all__ = ["GroupLayout", "layout_from_docs"]

_PLAIN_TYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """The columns (in the group's order), the row count and the rows per chunk (or shard)."""

    columns: tuple[ColumnInfo, ...]
    row_count: int
    chunk_len: int


def _array(doc: dict[str, Any]) -> tuple[int, int] | None:
    """``(length, rows per chunk or shard)`` of a plain 1-D array document."""
    shape = doc.get("shape")
    grid = doc.get("chunk_grid")
    dtype = doc.get("data_type")
    if (not isinstance(shape, list) or len(shape) != 1 or not isinstance(shape[0], int)
            or not isinstance(grid, dict) or grid.get("name") != "regular"
            or not isinstance(dtype, str) or dtype not in _PLAIN_TYPES):
        return None
    chunk = (grid.get("configuration") or {}).get("chunk_shape")
    if not isinstance(chunk, list) or len(chunk) != 1 or not isinstance(chunk[0], int):
        return None
    return int(shape[0]), int(chunk[0])


def layout_from_docs(rel: str, docs: dict[str, bytes]) -> GroupLayout | None:
    """The layout of the group at ``rel`` from its documents (``{path: bytes}``, every
    ``zarr.json`` under it), or None when the group is not plain enough to say."""
    try:
        parsed = {p: json.loads(b) for p, b in docs.items()}
    except (ValueError, UnicodeDecodeError):
        return None
    group = parsed.pop(f"{rel}/zarr.json", None)
    if not isinstance(group, dict) or group.get("node_type") != "group" \
            or group.get("zarr_format") != 3:
        return None
    arrays: dict[str, dict[str, Any]] = {}
    for path, doc in parsed.items():
        name = path[len(rel) + 1 : -len("/zarr.json")]
        if not isinstance(doc, dict) or "/" in name or not name \
                or doc.get("node_type") != "array" or doc.get("zarr_format") != 3:
            return None
        arrays[name] = doc
    if not arrays:
        return None
    attrs = group.get("attributes")
    order = attrs.get("columns") if isinstance(attrs, dict) else None
    names = ([str(n) for n in order]
             if isinstance(order, list) and sorted(map(str, order)) == sorted(arrays)
             else sorted(arrays))
    columns = []
    lengths = set()
    chunk_len = 0
    for name in names:
        found = _array(arrays[name])
        if found is None:
            return None
        length, chunk = found
        lengths.add(length)
        chunk_len = max(chunk_len, chunk)
        dtype = pa.from_numpy_dtype(np.dtype(arrays[name]["data_type"]))
        columns.append(ColumnInfo(name, str(dtype), is_numeric(dtype)))
    if len(lengths) != 1:
        return None
    return GroupLayout(tuple(columns), lengths.pop(), max(chunk_len, 1))
