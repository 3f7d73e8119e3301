"""Reads of a local root's files with plain system calls: one ``open`` and one ``pread``,
not a round trip through the object-store client (which costs several times as much for
the small files registration reads by the thousand: footers, ``zarr.json`` documents,
small chunk files). The caller has validated the path; any failure to read is "no such
object", as the object store's local backend answers it.

The link check of a path (:class:`LinkCheck`) walks its components once per directory,
not once per file: a block fill over thousands of small segments in a few hundred
directories pays one ``stat`` of the file's directory and one ``lstat`` of the file,
not an ``lstat`` per component."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

__all__ = ["LinkCheck", "has_link", "read_local"]

_DIRS_KEPT = 4096  # directories a root's link check remembers (a few hundred KiB)


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


class LinkCheck:
    """:func:`has_link` of one root's paths, with the directories it proved link-free
    remembered: a path in such a directory costs a ``stat`` of the directory and an
    ``lstat`` of its last component instead of an ``lstat`` per component (a path below
    a remembered ancestor: the ``stat`` and an ``lstat`` per component below it).

    A directory ``d`` is remembered when a walk found none of its components a link,
    with the identity of the directory it was (device, inode, change time). Later,
    ``stat(root/d)`` (following links) must reach a directory of that same identity,
    else the whole path is walked again. So a link planted in ``d`` or above it after
    the walk (pointing outside, or anywhere else) is refused as the walk refuses it:
    the path then reaches another directory. Every component below ``d`` is
    ``lstat``-ed each time, so a link planted there is found too.

    What the identity lets through is a path that still reaches *the very directory*
    proven, through a link planted above it: that directory moved out of the root and
    linked back (or its inode number reused by a new directory). Its entries are then
    the ones it had when it was proven (adding, removing or renaming an entry changes
    its change time), and nothing below it is a link; so what such a path reads is a
    chain of real directories that were inside the root, what a writer of the root
    could have put there anyway, never a file a link points to. (The walk itself, like
    any check before an ``open``, cannot see a link planted between the check and the
    read.)
    """

    def __init__(self, root: Path, *, kept: int = _DIRS_KEPT) -> None:
        self._root = str(root)
        self._kept = kept
        self._dirs: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def __call__(self, rel: str) -> bool:
        """Whether a component of the normalized relative path ``rel`` is a symbolic
        link (:func:`has_link`, same answer): the components below its deepest
        remembered directory are walked (only the last one when its folder is known)."""
        parts = rel.split("/")
        start, folder = 0, rel
        while "/" in folder:
            folder = folder.rpartition("/")[0]
            proven = self._dirs.get(folder)
            if proven is None:
                continue
            try:
                st = os.stat(f"{self._root}/{folder}")
            except OSError:
                st = None
            if st is not None and (st.st_dev, st.st_ino, st.st_ctime_ns) == proven:
                start = folder.count("/") + 1
            else:
                with self._lock:
                    self._dirs.pop(folder, None)
            break
        return self._walk(parts, start)

    def _walk(self, parts: list[str], start: int) -> bool:
        """:func:`has_link`'s walk of ``parts[start:]`` (``parts[:start]``: a remembered
        directory); each directory found link-free on the way is remembered."""
        current = "/".join([self._root, *parts[:start]])
        for k in range(start, len(parts)):
            current = f"{current}/{parts[k]}"
            try:
                st = os.lstat(current)
            except OSError:
                return False
            if stat.S_ISLNK(st.st_mode):
                return True
            if k < len(parts) - 1 and stat.S_ISDIR(st.st_mode):
                self._remember("/".join(parts[: k + 1]),
                               (st.st_dev, st.st_ino, st.st_ctime_ns))
        return False

    def _remember(self, folder: str, identity: tuple[int, int, int]) -> None:
        with self._lock:
            if len(self._dirs) >= self._kept:
                self._dirs.pop(next(iter(self._dirs)))  # the oldest first
            self._dirs[folder] = identity
