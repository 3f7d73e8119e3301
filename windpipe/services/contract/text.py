"""Text that every catalog database stores: the one check request bodies make.

SQLite keeps any Python string, PostgreSQL does not: a NUL character (``\\x00``) is
refused in a ``text`` column, and a lone surrogate (``"\\ud800"``, which JSON can
spell as ``\\ud800`` with no partner) is no UTF-8 at all. Found only when the row is
written, either is a 500 after the database's retries, on PostgreSQL only. So text is
checked once, where a request is validated: every free-text or name field the API
stores is :data:`StoredText` (or a :data:`StoredObject` of JSON), and every contract
config (``windpipe.services.contract.frozen.Frozen``: split and plan bodies) runs
:func:`check_stored` over its input, so the answer is the same 422 naming the field
on either database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

__all__ = ["StoredObject", "StoredText", "check_stored", "check_text", "storable", "text_problem"]


def text_problem(value: str) -> str | None:
    """Why a database cannot store ``value``, or None when every one can."""
    at = value.find("\x00")
    if at >= 0:
        return f"holds a NUL character (\\x00) at position {at}, which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"holds a lone surrogate ({value[exc.start]!r}) at position {exc.start}: "
                "not valid UTF-8 text")
    return None


def storable(value: str, *, limit: int = 512) -> str:
    """``value`` as text every database stores, for records of what a caller sent (an
    audit target): NUL and lone surrogates spelled as escapes, cut to ``limit``."""
    text = value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_text(value: str) -> str:
    """``value`` when every catalog database can store it (``ValueError`` otherwise)."""
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _where(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path)


def _walk(value: Any, path: tuple[str | int, ...]) -> None:
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise ValueError(f"{_where(path)}: {problem}" if path else problem)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                problem = text_problem(key)
                if problem is not None:
                    msg = f"the key {key!r}" + (f" of {_where(path)}" if path else "")
                    raise ValueError(f"{msg}: {problem}")
            _walk(item, (*path, key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _walk(item, (*path, i))


def check_stored(value: Any) -> Any:
    """``value`` when every string in it (dict keys too, at any depth) is text every
    catalog database can store; the ``ValueError`` names the first that is not by its
    path (``provided.0.set_id: holds a NUL ...``)."""
    _walk(value, ())
    return value


StoredText = Annotated[str, AfterValidator(check_text)]
"""A string every catalog database can store (no NUL, no lone surrogate)."""

StoredObject = Annotated[dict[str, Any], AfterValidator(check_stored)]
"""A JSON object (a manifest row) whose keys and strings every catalog database can store.
The check is the object's, not its keys' type: an error's location then never holds the
text it refuses (a lone surrogate there could not even be written into the answer)."""
