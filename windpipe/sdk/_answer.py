"""What the handles over a catalog answer share (``DatasetVersion``, ``Split``,
``Plan``): one ``from_json`` that builds a handle from the server's JSON answer, and the
answer's ``retired_at``.

A handle is a frozen dataclass with the fields ``id``, ``created``, ``raw`` (the
answer) and ``_state`` (the :class:`~sdk._state.ClientState` of its catalog), plus the
ones it reads from the answer, named once in its :attr:`FromAnswer.ANSWER_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:
    from windpipe.sdk._state import ClientState

__all__ = ["AnswerFields", "FromAnswer"]

AnswerFields = Mapping[str, tuple[str, Callable[[Any], Any]]]
"""``field: (answer key, conversion)`` for each field a handle reads from its answer."""


class FromAnswer:
    """A handle made from a catalog answer (see the module docstring)."""

    ANSWER_FIELDS: ClassVar[AnswerFields] = {}

    raw: dict[str, Any]

    @classmethod
    def from_json(cls, state: ClientState, body: dict[str, Any], *, created: bool = False,
                  **given: Any) -> Self:
        """From a ``create_*`` / ``get_*`` / ``retire_*`` answer: ``id`` and each of
        :attr:`ANSWER_FIELDS` converted from ``body``, unless ``given`` holds a value
        for it (not None: a ``Plan``'s ``config`` keeps the caller's runtime options)."""
        fields = {name: value for name, value in given.items() if value is not None}
        for name, (key, convert) in cls.ANSWER_FIELDS.items():
            if name not in fields:
                fields[name] = convert(body[key])
        make: Callable[..., Self] = cls  # a dataclass: its fields are its keywords
        return make(id=str(body["id"]), created=created, raw=body, _state=state, **fields)

    @property
    def retired_at(self) -> str | None:
        """When this (or what it was made from: its split, its version) was retired (ISO
        8601), or None."""
        value = self.raw.get("retired_at")
        return None if value is None else str(value)
