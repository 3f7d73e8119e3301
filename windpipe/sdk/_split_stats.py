"""``SplitStats``: the statistics of one side of a split, in a notebook.

``split.stats(side="train", columns=None)`` answers the wire contract's
:class:`windpipe.services.contract.stats.SplitStatsData` (``POST /v1/splits/{id}/stats``, computed
once by the catalog over that side's rows only) as this subclass: the same fields and
``column_stats``, plus ``frame`` (one polars row per protocol and column), ``plot()``
(per-column histograms) and a readable repr. ``ScalingSpec.from_stats(stats, column,
kind=...)`` fits a scaling from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from windpipe.sdk._html import html_table, human_count, text_table
from windpipe.sdk._plots import plot_split_stats
from windpipe.services.contract.stats import SplitStatsData

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.figure import Figure

__all__ = ["SplitStats"]

_FIELDS = ("protocol", "column", "rows", "absent_rows", "count", "nulls", "non_finite",
           "min", "max", "mean", "std", "p1", "p50", "p99")
_SCHEMA = {name: (pl.String if name in ("protocol", "column")
                  else pl.Int64 if name in ("rows", "absent_rows", "count", "nulls",
                                            "non_finite") else pl.Float64)
           for name in _FIELDS}


class SplitStats(SplitStatsData):
    """Statistics of one side of a split, per protocol and column (SEMANTICS 6a).

    ``stats`` lists :class:`~services.contract.stats.ColumnStats` (``count``, ``nulls``,
    ``non_finite``, ``min``, ``max``, ``mean``, ``std``, ``p1``, ``p50``, ``p99``,
    ``histogram``); ``column_stats(column, protocol=None)`` picks one (or pools
    protocols); ``frame`` is the same as a polars DataFrame.
    """

    @property
    def frame(self) -> pl.DataFrame:
        """One row per protocol and column (the histogram left out)."""
        return pl.DataFrame([{k: getattr(e, k) for k in _FIELDS} for e in self.stats],
                            schema=_SCHEMA)

    def plot(self, *, columns: Sequence[str] | None = None) -> Figure:
        """Per-column histograms with mean, std and p1 / p99 (needs ``windpipe[plot]``)."""
        return plot_split_stats(self, columns=columns)

    def _rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("split", self.split_id), ("side", self.side),
            ("rows", f"{self.rows} ({human_count(self.rows)})"),
            ("quantiles", self.quantile_method),
        ]
        for e in self.stats:
            if e.count:
                value = (f"n={e.count} nulls={e.nulls} inf={e.non_finite} "
                         f"min={e.min:.4g} p1={e.p1:.4g} p50={e.p50:.4g} p99={e.p99:.4g} "
                         f"max={e.max:.4g} mean={e.mean:.4g} std={e.std:.4g}")
            else:
                value = f"no finite value (nulls={e.nulls} inf={e.non_finite})"
            if e.absent_rows:
                value += f" absent_rows={e.absent_rows}"
            rows.append((f"{e.protocol}.{e.column}", value))
        return rows

    def __repr__(self) -> str:
        return text_table(f"SplitStats {self.split_id} [{self.side}]", self._rows())

    def __str__(self) -> str:
        return self.__repr__()

    def _repr_html_(self) -> str:
        return html_table(f"SplitStats {self.split_id} [{self.side}]", self._rows())
