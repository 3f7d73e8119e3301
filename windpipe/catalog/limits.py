"""The catalog's request bounds (``windpipe.services.contract.limits``) applied to its inputs.

Each check runs before the work it guards and refuses with a 422 that names the
limit and its ``WINDPIPE_*`` setting: a plan's batch shape and bytes before it is
planned, its lanes before it is stored, a description and a manifest before they are
read further, the memory of a split's statistics before a segment is read. The world
size, which every Flight server checks too, is bounded by
:func:`windpipe.services.contract.limits.check_world_size`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import ErrorType, error_class
from windpipe.services.contract.limits import INT64_MAX, Limits, check_limit
from windpipe.services.planning.sizes import channel_counts, token_bytes

__all__ = [
    "check_cache_fit",
    "check_description",
    "check_int64",
    "check_manifest_bytes",
    "check_manifest_rows",
    "check_plan_spec",
    "check_plan_windows",
    "check_stats_bytes",
]

_CONFIG = ErrorType.INVALID_CONFIG


def _ints(value: Any, where: str) -> Iterator[tuple[str, int]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _ints(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _ints(v, f"{where}[{i}]")


def check_int64(body: Any, *, kind: ErrorType = _CONFIG) -> None:
    """Every integer of a JSON-like ``body`` fits a signed 64-bit integer, or 422."""
    for where, value in _ints(body, ""):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise error_class(kind)(
                f"{where}: {value} does not fit a 64-bit signed integer",
                details={"field": where, "value": str(value)},
            )


def check_plan_spec(spec: PlanSpec, limits: Limits) -> None:
    """Batch size, sequence length and bytes of one full batch of each protocol."""
    check_int64(spec.planning_dict())
    for protocol in spec.ordered_protocols():
        w = spec.window_for(protocol)
        check_limit("max_batch_size", w.batch_size, limits.max_batch_size,
                    what=f"batch_size of {protocol!r}", kind=_CONFIG, protocol=protocol)
        check_limit("max_seq_len", w.seq_len, limits.max_seq_len,
                    what=f"seq_len of {protocol!r}", kind=_CONFIG, protocol=protocol)
        nbytes = w.batch_size * w.seq_len * token_bytes(*channel_counts(spec, protocol))
        check_limit("max_batch_bytes", nbytes, limits.max_batch_bytes,
                    what=f"one batch of {protocol!r} (bytes)", kind=_CONFIG, protocol=protocol)


def check_cache_fit(working_set_bytes: int, limits: Limits) -> None:
    """The chunk bytes one batch pins (the report's ``cache_working_set_bytes``) fit the
    Flight servers' cache budget: refused at plan time, not on the first read."""
    check_limit("cache_bytes", working_set_bytes, limits.cache_bytes,
                what="the cached chunk bytes one batch needs", kind=_CONFIG)


def check_plan_windows(lanes: int, limits: Limits) -> None:
    """The lanes of one epoch of a plan."""
    check_limit("max_plan_windows", lanes, limits.max_plan_windows,
                what="lanes (windows) in one epoch of this plan", kind=_CONFIG)


def check_description(description: str | None, limits: Limits) -> None:
    """A description's length (characters)."""
    if description is not None:
        check_limit("max_description_chars", len(description), limits.max_description_chars,
                    what="description length (characters)")


def check_manifest_rows(rows: int, limits: Limits) -> None:
    """The rows of one manifest."""
    check_limit("max_manifest_rows", rows, limits.max_manifest_rows,
                what="manifest rows", kind=ErrorType.INVALID_MANIFEST)


def check_manifest_bytes(size: int, limits: Limits) -> None:
    """The bytes of one manifest file (checked before it is read)."""
    check_limit("max_manifest_bytes", size, limits.max_manifest_bytes,
                what="manifest file size (bytes)", kind=ErrorType.INVALID_MANIFEST)


def check_stats_bytes(nbytes: int, limits: Limits, **details: Any) -> None:
    """The memory one split-statistics request holds (its columns' finite values)."""
    check_limit("max_stats_bytes", nbytes, limits.max_stats_bytes,
                what="the values these statistics hold for exact quantiles (bytes)",
                **details)
