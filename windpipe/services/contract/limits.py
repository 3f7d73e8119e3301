"""The bounds every request is held to, and the one error that names a broken bound.

A request that would cost more than a bound allows is refused before any work is
done, with ``invalid_request`` (a query parameter or a body) or ``invalid_config``
(a plan spec), 422, naming the limit, its value and the ``WINDPIPE_*`` setting that
raises it (``details.limit``, ``details.max``, ``details.setting``). The defaults
are documented in ``docs/operations.md``; ``windpipe.services.settings.Settings`` reads the
environment and :meth:`Limits` is built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from windpipe.services.contract.errors import ErrorType, WindpipeError, error_class

__all__ = ["INT64_MAX", "Limits", "check_limit", "check_world_size", "limit_error"]

INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Limits:
    """The configurable bounds (``WINDPIPE_MAX_*``, and the Flight servers' cache budget
    the catalog checks plans against). The defaults written here are the only ones:
    ``windpipe.services.settings.Settings`` takes each of its fields' defaults from them."""

    max_batch_size: int = 65_536
    max_seq_len: int = 1 << 20
    max_world_size: int = 65_536
    max_plan_windows: int = 20_000_000
    max_batch_bytes: int = 1 << 30
    max_body_bytes: int = 64 << 20
    max_config_body_bytes: int = 256 << 10
    max_description_chars: int = 4096
    max_manifest_rows: int = 1_000_000
    max_manifest_bytes: int = 256 << 20
    max_stats_bytes: int = 1 << 30
    cache_bytes: int = 1 << 30

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        """The limits of a ``windpipe.services.settings.Settings`` (its ``max_*`` fields)."""
        return cls(**{name: int(getattr(settings, name)) for name in cls.__slots__})

    def as_dict(self) -> dict[str, int]:
        """``{name: value}`` (``GET /v1/config`` lists them)."""
        return {name: int(getattr(self, name)) for name in self.__slots__}


def limit_error(
    limit: str, value: int, maximum: int, *, what: str,
    kind: ErrorType = ErrorType.INVALID_REQUEST, **details: Any,
) -> WindpipeError:
    """The 422 for ``what`` (= ``value``) above ``limit`` (= ``maximum``)."""
    setting = f"WINDPIPE_{limit.upper()}"
    return error_class(kind)(
        f"{what} is {value}, above the limit {limit} = {maximum} (setting {setting})",
        details={"limit": limit, "value": value, "max": maximum, "setting": setting, **details},
    )


def check_limit(
    limit: str, value: int, maximum: int, *, what: str,
    kind: ErrorType = ErrorType.INVALID_REQUEST, **details: Any,
) -> None:
    """Raise :func:`limit_error` when ``value > maximum``."""
    if value > maximum:
        raise limit_error(limit, value, maximum, what=what, kind=kind, **details)


def check_world_size(world_size: int, limits: Limits) -> None:
    """The ranks a report, schedule or Flight pass is computed for (the catalog and
    every Flight server check it alike)."""
    check_limit("max_world_size", world_size, limits.max_world_size, what="world_size")
