"""A storage root listed one folder at a time, confined to the root.

:func:`list_folder` answers the folders and files directly under one folder of a root
(a delimiter listing: one request on S3, one directory read on a local disk), so a
caller walking a known depth never enumerates what lies below it (a zarr group's chunk
files, say). On a local root a folder that resolves outside the root (a symlink) is
refused before it is listed, as every read is (:meth:`Storage.validate_relative_path`).
"""

from __future__ import annotations

from dataclasses import dataclass

import obstore
from obstore.exceptions import GenericError, NotFoundError

from windpipe.services.contract.errors import Unavailable
from windpipe.services.storage.store import Storage

__all__ = ["Folder", "list_folder"]


@dataclass(frozen=True, slots=True)
class Folder:
    """What lies directly under one folder: sub-folders and files (``(path, size)``), each
    as a path relative to the root, sorted."""

    folders: tuple[str, ...]
    files: tuple[tuple[str, int], ...]


def list_folder(storage: Storage, folder: str = "") -> Folder:
    """The folders and files directly under ``folder`` (``""``: the root itself).

    A folder that does not exist lists as empty; one outside the root raises
    :class:`windpipe.services.storage.store.PathEscapeError`; an object store that does not
    answer is ``unavailable``.
    """
    rel = "" if folder.strip("/") in ("", ".") else storage.validate_relative_path(folder)
    try:
        answer = obstore.list_with_delimiter(storage.store, rel or None)
    except (NotFoundError, FileNotFoundError):
        return Folder((), ())
    except GenericError as exc:
        if storage.is_local:
            return Folder((), ())  # a file where a folder was expected: nothing under it
        raise Unavailable(
            f"the object store of {storage.uri} did not answer a listing of "
            f"{rel or '(the root)'!r} ({type(exc).__name__})",
            details={"root": storage.uri, "path": rel},
        ) from exc
    folders = sorted(str(p).rstrip("/") for p in answer["common_prefixes"])
    files = sorted((str(m["path"]), int(m["size"])) for m in answer["objects"])
    return Folder(tuple(folders), tuple(files))
