"""Reads of a local root's files with plain system calls: one ``open`` and one ``pread``,
not a round trip through the object-store client (which costs several times as much for
the small files registration reads by the thousand: footers, ``zarr.json`` documents,
small chunk files). The caller has validated the path; any failure to read is "no such
object", as the object store's local backend answers it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["has_link", "read_local"]


def read_local(full: Path, *, rel: str, root_uri: str, start: int = 0,
               end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` (``end`` None: to the end) of the regular file ``full``;
    ``FileNotFoundError`` naming ``rel`` under ``root_uri`` when it cannot be read."""
    try:
        fd = os.open(full, os.O_RDONLY)
    except OSError as exc:
        raise FileNotFoundError(f"no object at {rel!r} under {root_uri}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(f"no object at {rel!r} under {root_uri}")
        stop = st.st_size if end is None else min(end, st.st_size)
        if stop <= start:
            return b""
        return os.pread(fd, stop - start, start)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileNotFoundError(f"no object at {rel!r} under {root_uri}") from exc
    finally:
        os.close(fd)


def has_link(root: Path, rel: str) -> bool:
    """Whether a component of the normalized relative path ``rel`` (no ``..``, no empty
    parts) under ``root`` is a symbolic link: one ``lstat`` per component of ``rel``, none
    for ``root``'s own. Without a link such a path cannot leave ``root``; with one, the
    caller resolves it. A component that does not exist ends the walk (nothing below it
    exists either)."""
    current = str(root)
    for part in rel.split("/"):
        current = f"{current}/{part}"
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return True
    return False
