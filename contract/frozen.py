"""Immutable config models: the frozen pydantic base and read-only dict fields.

A config that validated once must stay valid: every field is frozen, dict fields
become :class:`ReadOnlyDict` (reads and serialization as a dict, no mutation, hashable
so configs can be dict keys).
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen", "ReadOnlyDict", "freeze"]


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A dict field of a frozen config: reads and serialization as a dict, no mutation
    (which would skip validation), hashable so configs can be dict keys."""

    __slots__ = ()

    def _read_only(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        msg = "configs are immutable; make a new one (or model_copy(update=...))"
        raise TypeError(msg)

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyDict, (dict(self),))

    def __copy__(self) -> ReadOnlyDict:
        return self

    def __deepcopy__(self, _memo: Any) -> ReadOnlyDict:
        return self


def freeze(model: BaseModel, *names: str) -> None:
    """Replace dict fields (or tuples of dicts) of a validated frozen model by read-only ones."""
    for name in names:
        value = getattr(model, name)
        if isinstance(value, dict):
            object.__setattr__(model, name, ReadOnlyDict(value))
        elif isinstance(value, tuple):
            object.__setattr__(model, name, tuple(
                ReadOnlyDict(v) if isinstance(v, dict) else v for v in value))


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
