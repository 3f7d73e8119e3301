"""A path pattern's syntax, its bounds and a matcher whose cost is bounded by construction.

``windpipe.catalog.pattern`` walks the files under a root; this module checks a pattern
(``"{cell_id}/{protocol}/cycle_{cidx}.parquet"``) and matches one path against it. A
component is literal text and fields (``{name}`` or ``{name:type}``); a field matches
one or more characters other than ``/`` and two fields are separated by literal text.

The values are those of a backtracking regular expression whose fields are greedy
(``lit0([^/]+)lit1([^/]+)...litK``, ``fullmatch``): the first field as long as the rest
still matches, then the second, and so on. Such an expression tries every split of the
name among its fields, which is name length to the power of the fields: a 60-character
name against 7 fields took seconds, under the interpreter lock. :meth:`Component.match`
computes the same answer without trying splits: since a field takes any run of
characters, the parts from field ``i`` on match a suffix starting at ``p`` exactly when
``p`` is before the last feasible end of field ``i``, so one backwards pass of
``str.rfind`` (the last occurrence of each literal that leaves room for the fields
after it) gives every field's end, and the greedy values are the slices between. Its
work is at most (name length) x (the pattern's literal text), both bounded here:
:data:`MAX_NAME_CHARS`, :data:`MAX_PATTERN_CHARS` and :data:`MAX_PATTERN_FIELDS`.

A registration's ``exclude`` globs (:func:`compile_excludes`) leave paths out of the
walk. Each is matched against a whole path relative to the root by
:func:`fnmatch.fnmatchcase`'s rules (``*`` also crosses ``/``), all of them as one
expression; :func:`fnmatch.translate` makes each ``*`` an atomic group, so a match costs
at most the path's length times the globs' (:data:`MAX_EXCLUDE_GLOBS` of at most
:data:`MAX_GLOB_CHARS` characters), never a search of splits.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from windpipe.catalog.manifest import RESERVED_COLUMNS
from windpipe.services.contract.errors import InvalidRequest, WindpipeError

__all__ = [
    "FIELD_TYPES",
    "MAX_EXCLUDE_GLOBS",
    "MAX_GLOB_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_FIELDS",
    "Component",
    "ParsedPattern",
    "bad_pattern",
    "compile_excludes",
    "exclude_problem",
    "match_path",
    "parse_pattern",
]

#: The fields of one pattern, all components together: more than any layout needs (the
#: identity is at most four fields), few enough that an error listing them stays readable.
MAX_PATTERN_FIELDS = 16
#: The characters of one file or folder name a pattern matches: what local file systems
#: allow (255 bytes of UTF-8 is at most 255 characters); a longer name is a problem.
MAX_NAME_CHARS = 255
#: The characters of a pattern: a few levels of names at the bound above.
MAX_PATTERN_CHARS = 1024
#: The globs of one registration's ``exclude``: a few folders or files left out, not a
#: listing of them (name what stays with the pattern instead).
MAX_EXCLUDE_GLOBS = 64
#: The characters of one ``exclude`` glob: those of a pattern.
MAX_GLOB_CHARS = MAX_PATTERN_CHARS
#: A field's types (``{name:type}``).
FIELD_TYPES = ("float", "int", "str")

_FIELD = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT = re.compile(r"^[+-]?\d+$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_SUFFIXES = (".parquet", ".pq", ".zarr")


@dataclass(frozen=True)
class Component:
    """One ``/``-separated part of a pattern: ``literals[0]``, then each field followed
    by the next literal (``len(literals) == len(fields) + 1``; between two fields the
    literal is never empty)."""

    text: str
    literals: tuple[str, ...]
    fields: tuple[str, ...]

    def match(self, name: str) -> tuple[str, ...] | None:
        """The fields' values in ``name`` (pattern order), or None when it does not match.

        The greedy values (see the module's docstring): ``ends[i]``, where field ``i``
        ends, is the last place the literal after it occurs that leaves at least one
        character for every later field; computed from the last field back, in at most
        one ``rfind`` per field. A name over :data:`MAX_NAME_CHARS` matches nothing."""
        literals = self.literals
        if not self.fields:
            return () if name == literals[0] else None
        head, tail = literals[0], literals[-1]
        if len(name) > MAX_NAME_CHARS or "/" in name \
                or not name.startswith(head) or not name.endswith(tail):
            return None
        count = len(self.fields)
        ends = [0] * count
        ends[-1] = len(name) - len(tail)
        for i in range(count - 2, -1, -1):
            # the literal after field i ends at least one character before field i+1 does
            room = ends[i + 1] - 1
            at = name.rfind(literals[i + 1], 0, room) if room > 0 else -1
            if at < 0:
                return None
            ends[i] = at
        if ends[0] <= len(head):  # the first field needs a character too
            return None
        values: list[str] = []
        start = len(head)
        for i, end in enumerate(ends):
            values.append(name[start:end])
            start = end + len(literals[i + 1])
        return tuple(values)


@dataclass(frozen=True)
class ParsedPattern:
    """A checked pattern: its leading literal folders, the components below them, each
    field's type (pattern order) and whether it names zarr groups."""

    text: str
    prefix: tuple[str, ...]
    components: tuple[Component, ...]
    types: dict[str, str]
    zarr: bool

    @property
    def start(self) -> str:
        """The folder the walk starts in (``""``: the root)."""
        return "/".join(self.prefix)


def bad_pattern(text: Any, why: str, **details: Any) -> WindpipeError:
    """The ``invalid_request`` for a pattern, saying why."""
    return InvalidRequest(f"pattern {text!r}: {why}", details={"pattern": str(text), **details})


def _component(text: str, part: str, types: dict[str, str]) -> Component:
    literals: list[str] = []
    fields: list[str] = []
    last = 0
    for match in _FIELD.finditer(part):
        literal = part[last:match.start()]
        if "{" in literal or "}" in literal:
            raise bad_pattern(text, f"unbalanced brace in {part!r}")
        if fields and not literal:
            raise bad_pattern(text, f"fields {fields[-1]!r} and the next one in {part!r} need "
                                    "literal text between them")
        name, _, kind = match.group(1).partition(":")
        name, kind = name.strip(), kind.strip()
        if not _NAME.match(name):
            raise bad_pattern(text, f"{{{match.group(1)}}} is not a field: a field is {{name}} "
                                    "or {name:type} with a Python identifier as name")
        if kind and kind not in FIELD_TYPES:
            raise bad_pattern(text, f"field {name!r} has type {kind!r}; types are "
                                    f"{list(FIELD_TYPES)}")
        if name in types:
            raise bad_pattern(text, f"field {name!r} appears twice")
        if len(types) == MAX_PATTERN_FIELDS:
            raise bad_pattern(text, f"has more than {MAX_PATTERN_FIELDS} fields, the most a "
                                    "pattern may have", bound="fields", max=MAX_PATTERN_FIELDS)
        types[name] = kind or ("int" if name == "cidx" else "str")
        literals.append(literal)
        fields.append(name)
        last = match.end()
    tail = part[last:]
    if "{" in tail or "}" in tail:
        raise bad_pattern(text, f"unbalanced brace in {part!r}")
    return Component(part, (*literals, tail), tuple(fields))


def parse_pattern(text: str) -> ParsedPattern:
    """Check ``text`` and compile it; ``invalid_request`` naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise bad_pattern(text, "is empty")
    if len(text) > MAX_PATTERN_CHARS:  # named by its start: the whole would flood the answer
        raise bad_pattern(f"{text[:64]}...", f"is {len(text)} characters, above the bound of "
                          f"{MAX_PATTERN_CHARS} for a pattern", bound="characters",
                          max=MAX_PATTERN_CHARS)
    if text.startswith("/") or "\\" in text or any(ord(c) < 32 for c in text) \
            or _SCHEME.match(text):
        raise bad_pattern(text, "must be a path relative to the root (no leading '/', scheme, "
                                "backslash or control character)")
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise bad_pattern(text, "has an empty, '.' or '..' component")
    types: dict[str, str] = {}
    components = [_component(text, part, types) for part in parts]
    if not text.endswith(_SUFFIXES):
        raise bad_pattern(text, "must end in the segments' suffix: .parquet, .pq or .zarr")
    for name in ("cell_id", "cidx"):
        if name not in types:
            raise bad_pattern(text, f"needs the field {{{name}}}")
    if types["cidx"] != "int":
        raise bad_pattern(text, "the field cidx is an integer ({cidx} or {cidx:int})")
    for name in ("set_id", "cell_id", "protocol"):
        if types.get(name, "str") != "str":
            raise bad_pattern(text, f"the field {name} is a string")
    for name in types:
        if name in RESERVED_COLUMNS or name in ("segment_path", "row_count"):
            raise bad_pattern(text, f"the field name {name!r} is reserved")
    n_prefix = next(i for i, c in enumerate(components) if c.fields or i == len(components) - 1)
    return ParsedPattern(text=text, prefix=tuple(parts[:n_prefix]),
                         components=tuple(components[n_prefix:]), types=types,
                         zarr=text.endswith(".zarr"))


def match_path(parsed: ParsedPattern, path: str) -> dict[str, Any] | str:
    """The typed field values of ``path`` (a path at the pattern's depth, under its
    leading folders), or the problem's text."""
    parts = path.split("/")[len(parsed.prefix):]
    values: dict[str, Any] = {}
    for i, (part, comp) in enumerate(zip(parts, parsed.components, strict=True)):
        what = "name" if i == len(parts) - 1 else "folder"
        if len(part) > MAX_NAME_CHARS:
            return (f"{what} {part[:64]!r}... is {len(part)} characters, above the bound of "
                    f"{MAX_NAME_CHARS} for a name a pattern matches")
        raws = comp.match(part)
        if raws is None:
            return f"{what} {part!r} does not match {comp.text!r}"
        for name, raw in zip(comp.fields, raws, strict=True):
            kind = parsed.types[name]
            if kind == "int":
                if not _INT.match(raw):
                    return f"field {name!r} is {raw!r}, not an integer"
                values[name] = int(raw)
            elif kind == "float":
                try:
                    values[name] = float(raw)
                except ValueError:
                    return f"field {name!r} is {raw!r}, not a number"
                if not math.isfinite(values[name]):
                    return f"field {name!r} is {raw!r}, not a finite number"
            else:
                values[name] = raw
    protocol = values.get("protocol")
    if protocol is not None and protocol != protocol.strip().lower():
        return f"protocol {protocol!r}: protocol names are lower-case"
    return values


def exclude_problem(glob: Any) -> str | None:
    """Why ``glob`` cannot be an ``exclude`` glob (one that could name a path outside the
    root, or none at all), or None."""
    if not isinstance(glob, str) or not glob:
        return "is empty"
    if len(glob) > MAX_GLOB_CHARS:
        return f"is {len(glob)} characters, above the bound of {MAX_GLOB_CHARS} for a glob"
    if glob.startswith("/") or "\\" in glob or any(ord(c) < 32 for c in glob) \
            or _SCHEME.match(glob):
        return ("must be relative to the root (no leading '/', scheme, backslash or control "
                "character)")
    if any(p in ("", ".", "..") for p in glob.split("/")):
        return "has an empty, '.' or '..' component: a glob names paths under the root"
    return None


def compile_excludes(globs: Sequence[str]) -> Callable[[str], bool]:
    """A test of a path relative to the root: whether one of ``globs`` matches all of it
    (:func:`fnmatch.fnmatchcase`'s rules); ``invalid_request`` naming a glob that is not
    one (:func:`exclude_problem`) or more than :data:`MAX_EXCLUDE_GLOBS` of them."""
    if len(globs) > MAX_EXCLUDE_GLOBS:
        raise InvalidRequest(f"exclude has {len(globs)} globs, above the bound of "
                             f"{MAX_EXCLUDE_GLOBS}", details={"bound": "exclude",
                                                              "max": MAX_EXCLUDE_GLOBS})
    for glob in globs:
        why = exclude_problem(glob)
        if why is not None:
            shown = glob if not isinstance(glob, str) or len(glob) <= 64 else f"{glob[:64]}..."
            raise InvalidRequest(f"exclude glob {shown!r} {why}", details={"exclude": shown})
    if not globs:
        return lambda _path: False
    matcher = re.compile("|".join(fnmatch.translate(g) for g in dict.fromkeys(globs)))
    return lambda path: matcher.match(path) is not None
