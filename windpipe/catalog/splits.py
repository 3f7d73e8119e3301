"""Train/val splits of an ML index (SEMANTICS section 2).

A group is the tuple of a row's ``group_by`` values; every row of a group lands in
the same split. ``sample`` draws each group independently of every other group:

    u(group) = contract.identity.unit_interval(seed, [v1, v2, ...])
             = blake2b-64(canonical_json([seed, [v1, v2, ...]])) / 2**64

with the values in ``group_by`` order, numpy scalars unwrapped and integral floats
written as integers (``cidx`` ``3.0`` and ``3`` draw alike). A group is ``val`` iff
``u < fraction``. Adding or removing other groups never moves a group.

Groups finer than a cell (the default: one cycle) put one cell's cycles on both sides;
:func:`cell_leakage` counts those cells once, when the split is made, and the answer
carries the count (``windpipe.services.contract.leakage``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from windpipe.services.contract.configs import DEFAULT_GROUP_BY, Selector, ValidationConfig
from windpipe.services.contract.errors import InvalidConfig
from windpipe.services.contract.identity import unit_interval
from windpipe.services.contract.leakage import CELL_COLUMNS, LEAKAGE_EXAMPLES, SplitLeakage

__all__ = [
    "SPLITS", "assign_splits", "cell_leakage", "group_draws", "selector_mask", "split_counts",
]

SPLITS: tuple[str, str] = ("train", "val")

_GROUP = "__wp_group"


def _check_columns(frame: pl.DataFrame, columns: Sequence[str], *, what: str) -> None:
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        raise InvalidConfig(
            f"{what} names unknown column(s) {unknown}; the index has {frame.columns}",
            details={"unknown_columns": unknown, "columns": frame.columns, "where": what},
        )


def group_draws(groups: pl.DataFrame, seed: int) -> np.ndarray:
    """``u(seed, group)`` for each row of ``groups`` (one row per distinct group)."""
    return np.fromiter(
        (unit_interval(seed, list(values)) for values in groups.iter_rows()),
        dtype=np.float64,
        count=groups.height,
    )


def _value_matches(series: pl.Series, value: Any) -> pl.Series | None:
    """Equality mask of ``series == value`` with numeric type tolerance; None if types differ."""
    dtype = series.dtype
    if isinstance(value, bool):
        return series == value if dtype == pl.Boolean else None
    if isinstance(value, (int, float)):
        if dtype.is_integer():
            if float(value).is_integer():
                try:
                    return series == int(value)  # exact, also above 2**53
                except OverflowError:
                    pass
            return pl.Series(series.name, [False] * len(series))  # 3.5, or out of range
        if dtype.is_numeric():
            return series.cast(pl.Float64) == float(value)
        return None
    if isinstance(value, str):
        if dtype in (pl.String, pl.Categorical, pl.Enum):
            return series.cast(pl.String) == value
        return None
    return None


def selector_mask(frame: pl.DataFrame, selector: Mapping[str, Any]) -> np.ndarray:
    """Rows of ``frame`` a selector matches (every named column equals its value).

    Numbers compare by value (``3 == 3.0``), strings exactly; a value whose type
    does not fit the column matches nothing. Unknown columns raise ``invalid_config``.
    """
    _check_columns(frame, list(selector), what=f"selector {dict(selector)!r}")
    mask = np.ones(frame.height, dtype=bool)
    for column, value in selector.items():
        hit = _value_matches(frame[column], value)
        if hit is None:
            return np.zeros(frame.height, dtype=bool)
        mask &= hit.fill_null(value=False).to_numpy()
    return mask


def _provided_rows(frame: pl.DataFrame, selectors: Sequence[Selector]) -> np.ndarray:
    rows = np.zeros(frame.height, dtype=bool)
    for selector in selectors:
        hit = selector_mask(frame, selector)
        if not hit.any():
            raise InvalidConfig(
                f"selector {dict(selector)!r} matches no row of the index (a typo?)",
                details={"selector": dict(selector)},
            )
        rows |= hit
    return rows


def assign_splits(index: pl.DataFrame, config: ValidationConfig) -> pl.DataFrame:
    """``index`` in its own order with a ``split`` column (``train`` / ``val``).

    A group is ``val`` when a selector matches any of its rows (``provide``), when
    its draw is below ``fraction`` (``sample``), or either (``merge``).
    """
    group_by = list(config.group_by)
    _check_columns(index, group_by, what="group_by")
    frame = index.drop("split", strict=False)
    groups = frame.select(group_by).unique(maintain_order=True)
    groups = groups.with_row_index(_GROUP)
    keyed = frame.select(group_by).join(
        groups, on=group_by, how="left", nulls_equal=True, maintain_order="left"
    )
    row_group = keyed[_GROUP].to_numpy().astype(np.int64)
    val = np.zeros(groups.height, dtype=bool)
    if config.strategy in ("provide", "merge"):
        rows = _provided_rows(frame, config.provided)
        val[np.unique(row_group[rows])] = True
    if config.strategy in ("sample", "merge") and config.fraction > 0.0:
        val |= group_draws(groups.drop(_GROUP), config.seed) < config.fraction
    split = np.where(val[row_group], "val", "train")
    return frame.with_columns(pl.Series("split", split, dtype=pl.String))


def split_counts(
    frame: pl.DataFrame, *, group_by: Sequence[str] = DEFAULT_GROUP_BY
) -> dict[str, dict[str, int]]:
    """``{split: {"groups", "manifest_rows", "rows"}}`` for ``train``, ``val`` and any other.

    ``rows`` is the sum of ``row_count``; ``groups`` counts distinct ``group_by`` tuples.
    """
    _check_columns(frame, ["split", *group_by], what="split_counts")
    out: dict[str, dict[str, int]] = {
        name: {"groups": 0, "manifest_rows": 0, "rows": 0} for name in SPLITS
    }
    has_rows = "row_count" in frame.columns
    for name in frame["split"].unique().sort().to_list():
        part = frame.filter(pl.col("split") == name)
        out[str(name)] = {
            "groups": part.select(list(group_by)).unique().height,
            "manifest_rows": part.height,
            "rows": int(part["row_count"].sum()) if has_rows else 0,
        }
    return out


def cell_leakage(frame: pl.DataFrame) -> SplitLeakage:
    """The cells (``(set_id, cell_id)``) of an assigned index with rows on both sides.

    Measured on the assignment itself, not inferred from ``group_by``: a ``provide``
    selector naming a cell holds it out whole even with the default cycle groups, and
    a ``sample`` of cycles splits most cells. One group-by over the frame, whatever its
    size; ``examples`` are the first cells in identity order.
    """
    _check_columns(frame, ["split", *CELL_COLUMNS], what="cell_leakage")
    cells = list(CELL_COLUMNS)
    sides = frame.group_by(cells).agg(pl.col("split").n_unique().alias("sides"))
    both = sides.filter(pl.col("sides") > 1)
    examples = (
        both.select(pl.col(c).cast(pl.String) for c in cells)
        .sort(cells, nulls_last=True)
        .head(LEAKAGE_EXAMPLES)
    )
    return SplitLeakage.model_validate({
        "cells": sides.height,
        "cells_on_both_sides": both.height,
        "examples": examples.to_dicts(),
    })
