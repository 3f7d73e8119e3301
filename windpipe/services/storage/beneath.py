"""Many files of a local root read below directories opened once, no link followed.

Registration reads every segment of a collection once, tens of thousands of small files
a few directories deep. Checking each path for links the usual way
(:meth:`Storage.validate_relative_path`: one ``lstat`` per component, then an ``open``
that follows links again) costs about as much as reading the file's footer. Here each
directory is opened once (``O_DIRECTORY | O_NOFOLLOW``, relative to its parent's
descriptor, from the root's) and kept while the caller reads the files in it, and each
file is opened relative to its directory with ``O_NOFOLLOW``: no component can be a
link, so the file lies inside the root, and a directory swapped for a link after it was
opened is not followed (stricter than the ``lstat`` walk, which a swap between the
check and the open defeats).

A path with a link anywhere in it, or a component that is not a directory, is not
decided here (:meth:`Beneath.read` answers None): the caller takes the usual checked
path, which allows links that resolve inside the root and says what is wrong.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import OrderedDict
from pathlib import Path
from types import TracebackType

__all__ = ["Beneath", "Read"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_UNDECIDED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)  # a link, or not a directory

Read = tuple[int, str, bytes]
"""``(size, version token, bytes)`` of one file: the token is the file's inode and
modification time (``Storage.version_token``'s form), the bytes its last ``nbytes``
(the whole file when it is at most ``whole_up_to`` bytes)."""


class Beneath:
    """Reads of files below one local root (a context manager: it holds at most
    ``keep`` directory descriptors, closed on exit). Not thread-safe: one per thread."""

    def __init__(self, root: Path, *, keep: int = 16) -> None:
        """``root``: the resolved root directory (``Storage.local_root``)."""
        self._root = root
        self._keep = max(1, keep)
        self._dirs: OrderedDict[str, int] = OrderedDict()
        self._root_fd: int | None = None

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every directory descriptor held."""
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None

    def read(self, rel: str, *, nbytes: int, whole_up_to: int = 0) -> Read | None:
        """The size, token and tail (see :data:`Read`) of the regular file ``rel`` (a
        normalized relative path: ``paths.normalized_path``); None when a component is a
        link or not a directory (the caller checks the path the usual way).
        ``FileNotFoundError`` when there is no regular file there."""
        head, _, name = rel.rpartition("/")
        parent = self._directory(head)
        if parent is None:
            return None
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in _UNDECIDED:
                return None
            raise FileNotFoundError(f"no object at {rel!r}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(f"no object at {rel!r}")
            size = int(st.st_size)
            start = 0 if size <= whole_up_to else max(0, size - nbytes)
            data = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        return size, f"{st.st_ino:x}-{st.st_mtime_ns:x}", data

    def _directory(self, head: str) -> int | None:
        """The descriptor of directory ``head`` ("" for the root), opened component by
        component from the deepest one held; None when a component is a link or not a
        directory."""
        if self._root_fd is None:
            self._root_fd = os.open(self._root, _DIR_FLAGS & ~os.O_NOFOLLOW)
        if not head:
            return self._root_fd
        fd = self._dirs.get(head)
        if fd is not None:
            self._dirs.move_to_end(head)
            return fd
        base, _, part = head.rpartition("/")
        parent = self._directory(base)
        if parent is None:
            return None
        try:
            fd = os.open(part, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in _UNDECIDED:
                return None
            raise FileNotFoundError(f"no directory {head!r}") from exc
        self._dirs[head] = fd
        while len(self._dirs) > self._keep:
            os.close(self._dirs.popitem(last=False)[1])
        return fd
