"""The segment formats, one small module each, chosen from :data:`FORMATS` by name.

| name | module | chunks | fingerprint |
|---|---|---|---|
| ``parquet`` | :mod:`.parquet` | row groups | size and footer |
| ``zarr`` | :mod:`.zarr` | chunks (shards) along axis 0 | file names, sizes, ``zarr.json`` bytes |

Each implements :class:`~services.storage.formats.base.SegmentFormatReader`;
:mod:`windpipe.services.storage.segments` finds a path's format (:func:`format_of_path`) or a
registered segment's (:func:`format_named`) and wraps its errors.
"""

from __future__ import annotations

from windpipe.services.storage.formats.base import SegmentFormatReader, segment_problem
from windpipe.services.storage.formats.parquet import PARQUET
from windpipe.services.storage.formats.zarr import ZARR
from windpipe.services.storage.store import Storage

__all__ = ["DEFAULT_FORMAT", "FORMATS", "SegmentFormatReader", "format_named", "format_of_path"]

FORMATS: dict[str, SegmentFormatReader] = {fmt.name: fmt for fmt in (PARQUET, ZARR)}
DEFAULT_FORMAT: SegmentFormatReader = PARQUET  # a path neither named nor marked as a format


def format_of_path(storage: Storage, path: str) -> SegmentFormatReader:
    """The format ``path``'s name says, else the one whose marker ``storage`` holds there,
    else :data:`DEFAULT_FORMAT`."""
    for fmt in FORMATS.values():
        if fmt.named(path):
            return fmt
    for fmt in FORMATS.values():
        if fmt.marked(storage, path):
            return fmt
    return DEFAULT_FORMAT


def format_named(name: str, *, path: str) -> SegmentFormatReader:
    """The format called ``name`` (a registered segment's); :class:`SegmentError` for a
    format this build does not read."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise segment_problem(f"segment {path!r} has format {name!r}; windpipe reads "
                             f"{sorted(FORMATS)}", path=path)
    return fmt
