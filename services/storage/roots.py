"""The operator's allow-list of storage roots: the only places a dataset may live.

A client names a dataset's root when it registers a version; without a list the
catalog would read any file or bucket the server's own identity reaches (every
segment path is confined to its root, but the root itself was the client's choice).
:class:`AllowedRoots` is checked by :func:`services.storage.store.open_root` *before* the root
is opened, stat-ed or listed, so a refused root answers the same ``forbidden`` whether
it exists or not.

Local entries are absolute directories (``/data``, ``file:///data``), compared after
resolving symlinks on both sides, so a root that is a symlink out of an allowed
directory is refused. S3 entries are ``s3://bucket`` or ``s3://bucket/prefix``; a
root is inside when its bucket matches and its prefix starts with the entry's prefix
on ``/`` boundaries (``s3://b/lab`` allows ``s3://b/lab/x``, not ``s3://b/lab-x``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from services.contract.errors import ErrorType, WindpipeError

__all__ = ["AllowedRoots"]

_S3 = ("s3", "s3a")


def _local_path(uri: str) -> Path | None:
    """The absolute, resolved path of a ``file://`` URI or bare path; None if it is not one."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            return None
        raw = unquote(parsed.path)
    elif parsed.scheme == "":
        raw = uri
    else:
        return None
    path = Path(raw)
    if not raw or not path.is_absolute() or any(ord(c) < 32 for c in raw):
        return None
    return path.resolve()


def _s3_parts(uri: str) -> tuple[str, tuple[str, ...]] | None:
    """``(bucket, prefix parts)`` of an ``s3://`` URI; None if it is not a plain one."""
    parsed = urlparse(uri)
    if parsed.scheme not in _S3 or not parsed.netloc or parsed.query or parsed.fragment:
        return None
    parts = tuple(p for p in parsed.path.split("/") if p)
    if any(p in (".", "..") or "\\" in p for p in parts):
        return None
    return parsed.netloc, parts


@dataclass(frozen=True, slots=True)
class AllowedRoots:
    """Directories and S3 prefixes a server may open as dataset roots."""

    local: tuple[Path, ...] = ()
    s3: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str | Path]) -> AllowedRoots:
        """Parse operator entries; a relative path or unknown scheme is a ``ValueError``."""
        local: list[Path] = []
        s3: list[tuple[str, tuple[str, ...]]] = []
        for entry in entries:
            text = str(entry).strip()
            if not text:
                continue
            bucket = _s3_parts(text)
            if bucket is not None:
                s3.append(bucket)
                continue
            path = _local_path(text)
            if path is None:
                msg = (f"allowed root {text!r} is neither an absolute directory nor "
                       "s3://bucket[/prefix]")
                raise ValueError(msg)
            local.append(path)
        return cls(local=tuple(dict.fromkeys(local)), s3=tuple(dict.fromkeys(s3)))

    def permits(self, uri: str) -> bool:
        """Whether ``uri`` lies inside one of the allowed roots (nothing else is read)."""
        if urlparse(uri).scheme in _S3:
            parts = _s3_parts(uri)
            return parts is not None and any(
                parts[0] == bucket and parts[1][: len(prefix)] == prefix
                for bucket, prefix in self.s3
            )
        path = _local_path(uri)
        return path is not None and any(path.is_relative_to(root) for root in self.local)

    def check(self, uri: str) -> None:
        """Raise ``forbidden`` unless :meth:`permits` (the message names no allowed root).

        A scheme no store supports passes: opening it is ``invalid_request`` anyway."""
        if urlparse(uri).scheme in ("", "file", *_S3) and not self.permits(uri):
            raise WindpipeError(
                ErrorType.FORBIDDEN,
                f"storage root {uri!r} is not one this server may read; the operator "
                "allows roots with --allow-root or WINDPIPE_ALLOWED_ROOTS",
                details={"root": uri},
            )
