"""The operator's allow-list of storage roots: the only places a dataset may live.

A client names a dataset's root when it registers a version; without a list the
catalog would read any file or bucket the server's own identity reaches (every
segment path is confined to its root, but the root itself was the client's choice).
:class:`AllowedRoots` is checked by :func:`windpipe.services.storage.store.open_root` *before* the
root
is opened, stat-ed or listed, so a refused root answers the same ``forbidden`` whether
it exists or not.

Local entries are absolute directories (``/data``, ``file:///data``), compared after
resolving symlinks on both sides, so a root that is a symlink out of an allowed
directory is refused. S3 entries are ``s3://bucket`` or ``s3://bucket/prefix``; a
root is inside when its bucket matches and its prefix starts with the entry's prefix
on ``/`` boundaries (``s3://b/lab`` allows ``s3://b/lab/x``, not ``s3://b/lab-x``).

:class:`RootScopes` binds roots to dataset names (``lab-*=/data/lab``): a registration
root that lies inside a bound root, or holds one, registers only datasets whose name
a glob bound to that root matches, so no dataset reaches another's files by naming
their root (or a directory around it). Roots bound to nothing stay open to every name.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from windpipe.services.contract.errors import Forbidden, InvalidRequest

__all__ = ["AllowedRoots", "RootScopes"]

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


def _relative(uri: str) -> bool:
    """Whether ``uri`` is a relative local directory (``demo-data``, ``file:demo``)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
        return False
    raw = unquote(parsed.path) if parsed.scheme == "file" else uri
    return bool(raw) and not Path(raw).is_absolute()


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
        """Raise ``forbidden`` unless :meth:`permits` (the message names no allowed root);
        a relative directory is ``invalid_request`` (it names no place on the server).

        A scheme no store supports passes: opening it is ``invalid_request`` anyway."""
        if _relative(uri):
            raise InvalidRequest(
                f"storage root {uri!r} is not absolute: name a directory from / "
                "(file:///data/lab or /data/lab) or s3://bucket/prefix",
                details={"root": uri},
            )
        if urlparse(uri).scheme in ("", "file", *_S3) and not self.permits(uri):
            raise Forbidden(
                f"storage root {uri!r} is not one this server may read; the operator "
                "allows roots with --allow-root or WINDPIPE_ALLOWED_ROOTS",
                details={"root": uri},
            )


def _overlap(uri: str, root: AllowedRoots) -> bool:
    """Whether ``uri`` lies inside the one root of ``root`` or holds it (either way round,
    so neither a root inside a bound one nor a directory around it escapes the binding)."""
    if urlparse(uri).scheme in _S3:
        parts = _s3_parts(uri)
        return parts is not None and any(
            parts[0] == bucket and (parts[1][: len(prefix)] == prefix
                                    or prefix[: len(parts[1])] == parts[1])
            for bucket, prefix in root.s3)
    path = _local_path(uri)
    return path is not None and any(
        path.is_relative_to(bound) or bound.is_relative_to(path) for bound in root.local)


@dataclass(frozen=True, slots=True)
class RootScopes:
    """The operator's bindings of storage roots to globs of dataset names.

    ``bindings``: per bound root (its text, and the root parsed like an allowed one),
    the globs of the dataset names it may be registered under.
    """

    bindings: tuple[tuple[str, AllowedRoots, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> RootScopes:
        """Parse ``glob=root`` entries (several globs may bind one root); a malformed
        entry is a ``ValueError``."""
        globs: dict[str, list[str]] = {}
        for entry in entries:
            glob, sep, root = str(entry).partition("=")
            glob, root = glob.strip(), root.strip()
            if not sep or not glob or not root:
                msg = f"root scope {entry!r} is not glob=/abs/dir or glob=s3://bucket/prefix"
                raise ValueError(msg)
            globs.setdefault(root, []).append(glob)
        return cls(bindings=tuple((root, AllowedRoots.parse([root]), tuple(g))
                                  for root, g in globs.items()))

    def permits(self, uri: str, *, dataset: str) -> bool:
        """Whether dataset ``dataset`` may be registered from root ``uri``: every bound
        root ``uri`` lies in or holds has a glob matching ``dataset``."""
        return all(any(fnmatch.fnmatchcase(dataset, g) for g in globs)
                   for _, root, globs in self.bindings if _overlap(uri, root))

    def check(self, uri: str, *, dataset: str) -> None:
        """Raise ``forbidden`` unless :meth:`permits` (before anything is read; the message
        names neither the bound roots nor their globs)."""
        if not self.permits(uri, dataset=dataset):
            raise Forbidden(
                f"storage root {uri!r} is bound to other datasets than {dataset!r}; the "
                "operator binds roots to dataset names with --root-scope or "
                "WINDPIPE_ROOT_SCOPES",
                details={"root": uri, "dataset": dataset},
            )
