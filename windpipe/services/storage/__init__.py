"""Where segments live and how they are read: storage roots, segment formats, zarr chunk files.

Shared by the catalog (registration inspects every segment) and the materializer
(chunk loads). No HTTP, no SQL.
"""

from windpipe.services.storage.segments import ColumnInfo, SegmentInfo, inspect_segment, read_chunk
from windpipe.services.storage.store import (
    PathEscapeError,
    Storage,
    StorageOptions,
    StorageRoots,
    open_root,
)

__all__ = [
    "ColumnInfo",
    "PathEscapeError",
    "SegmentInfo",
    "Storage",
    "StorageOptions",
    "StorageRoots",
    "inspect_segment",
    "open_root",
    "read_chunk",
]
