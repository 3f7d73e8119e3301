"""Immutable config models: the frozen pydantic base and read-only dict fields.

A config that validated once must stay valid: every field is frozen, dict fields
become :class:`ReadOnlyDict` (reads and serialization as a dict, no mutation, hashable
so configs can be dict keys).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from windpipe.services.contract.errors import InvalidConfig, WindpipeError
from windpipe.services.contract.text import check_stored

__all__ = ["Frozen", "ReadOnlyDict", "config_error", "freeze"]


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
    """A frozen config value; a mistake in its arguments raises ``invalid_config``.

    Constructing one (``ScalingSpec(colum=...)``) raises :func:`config_error`'s
    :class:`WindpipeError` (the SDK's ``InvalidConfig`` once the SDK is imported), not
    pydantic's ``ValidationError``, so one ``except`` catches every windpipe failure.
    Validation (request bodies, ``model_validate``, nested fields) keeps pydantic's
    errors, which the servers turn into their own 4xx.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _stored_text(cls, data: Any) -> Any:
        """Every string of a config (names, columns, selectors) is text every catalog
        database can store (``windpipe.services.contract.text``): split and plan bodies are."""
        return check_stored(data) if isinstance(data, dict) else data

    if not TYPE_CHECKING:  # keep the fields' keyword signature for type checkers

        def __init__(self, /, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise config_error(type(self), exc) from None

        # pydantic runs a model's own __init__ inside validation unless it is marked as
        # the base one: mark it, so the servers' request validation (nested configs
        # included) still reports pydantic's errors; only a direct call converts
        __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


def config_error(model: type[BaseModel], exc: ValidationError) -> WindpipeError:
    """An ``invalid_config`` error naming each problem of ``exc`` by field (an unknown
    field with the closest known name, e.g. ``colum``: did you mean ``column``?)."""
    # a model that also takes flat keywords (LoaderOptions) names them for suggestions
    fields = [*model.model_fields, *getattr(model, "OPTION_NAMES", ())]
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or model.__name__
        text = str(err["msg"])
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
            close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1)
            text = "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
        problems.append({"field": where, "message": text, "type": err["type"]})
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return InvalidConfig(f"invalid {model.__name__}: {summary}",
                         details={"config": model.__name__, "problems": problems})
