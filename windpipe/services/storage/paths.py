"""The syntactic checks of a path relative to a storage root (no file system access):
:class:`~services.storage.store.Storage` runs them on every path it is given."""

from __future__ import annotations

import re

__all__ = ["PathEscapeError", "normalized_path"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_CONTROL = re.compile(r"[\x00-\x1f]")


class PathEscapeError(ValueError):
    """A path that is not a plain relative path inside the storage root."""


def normalized_path(path: str) -> str:
    """``path`` with ``./`` and doubled ``/`` removed; :class:`PathEscapeError` for
    non-strings, empty paths, absolute paths, backslashes, URL schemes, ``..`` components
    and control characters."""
    if not isinstance(path, str):
        raise PathEscapeError(f"path {path!r} is not a string")
    reason = None
    if not path.strip():
        reason = "is empty"
    elif path.startswith("/"):
        reason = "is absolute"
    elif "\\" in path:
        reason = "contains a backslash"
    elif _SCHEME.match(path):
        reason = "is a URL, not a path relative to the storage root"
    elif _CONTROL.search(path):
        reason = "contains a control character"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if reason is None and ".." in parts:
        reason = "contains '..'"
    if reason is None and not parts:
        reason = "names the root itself"
    if reason is not None:
        raise PathEscapeError(f"path {path!r} {reason}")
    return "/".join(parts)
