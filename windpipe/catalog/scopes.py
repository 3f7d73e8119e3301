"""Dataset scopes compared with each other, and the dataset an audit row is about.

A scope is a glob of dataset names (``lab-*``) or None (every dataset). A scoped
principal may hand out, list and revoke only tokens whose scope lies *within* its
own, and reads only the audit rows of datasets it can see. "Within" is decided
conservatively, on the text of the two globs, never by guessing at names:

- anything is within no scope (None: an unscoped principal);
- no scope (None) is within a scope: an unscoped token is never inside a glob;
- a glob is within itself;
- a plain name (no ``*``, ``?`` or ``[``) is within a glob that matches it;
- when the outer glob is a literal prefix followed by one ``*`` (``lab-*``), every
  glob whose literal start (the text before its first ``*``, ``?`` or ``[``) begins
  with that prefix is within it (``lab-a*``, ``lab-?``, ``lab-[ab]x``): all its
  matches begin with the prefix.

Anything else is not within (``lab-*`` is not within ``*-a``, although some names
match both), so a scoped caller asking for it is refused, never given more.
"""

from __future__ import annotations

import fnmatch
import re

__all__ = ["SCOPE_RULE", "audit_target", "literal_prefix", "scope_within"]

SCOPE_RULE = ("a scoped token may create, list and revoke only tokens of at most its role "
              "whose dataset scope lies within its own: the same glob, a dataset name the "
              "glob matches, or, for a scope 'prefix*', a glob starting with that prefix")
_META = re.compile(r"[*?\[]")
_TARGET_KEYS = frozenset({"name", "version_id", "split_id", "plan_id", "token_name"})


def literal_prefix(glob: str) -> str:
    """The text of ``glob`` before its first ``*``, ``?`` or ``[`` (all of it if none)."""
    match = _META.search(glob)
    return glob if match is None else glob[: match.start()]


def scope_within(inner: str | None, outer: str | None) -> bool:
    """Whether every dataset scope ``inner`` admits is admitted by ``outer`` (None: all).

    Conservative: True only in the cases the module docstring lists."""
    if outer is None:
        return True
    if inner is None:
        return False
    if inner == outer:
        return True
    prefix = literal_prefix(inner)
    if prefix == inner:  # a plain dataset name
        return fnmatch.fnmatchcase(inner, outer)
    head = outer[:-1]
    return outer.endswith("*") and literal_prefix(head) == head and prefix.startswith(head)


def audit_target(target: str | None) -> tuple[str, str] | None:
    """``(key, value)`` of an audit row's target (``version_id=v-...``), or None when it
    names no single resource of a known kind (no target, several, an unknown key)."""
    if not target:
        return None
    key, sep, value = target.partition("=")
    if not sep or key not in _TARGET_KEYS or not value or "," in value:
        return None
    return key, value
