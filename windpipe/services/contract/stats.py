"""What the data holds: statistics of one side of a split, and a version's profile.

:class:`SplitStatsData` is ``POST /v1/splits/{id}/stats`` (SEMANTICS section 6a): per
protocol and column, over the rows of one side of a split (``train`` by default)
and nothing else, the counts, bounds, moments and quantiles a fitted
:class:`~services.contract.scaling.ScalingSpec` needs (``ScalingSpec.from_stats``), with
a small fixed-bin histogram. The catalog computes it once (``windpipe.catalog.stats``), stores
it keyed by split, side and columns, and answers the stored one afterwards; the SDK
reads it back (``windpipe.sdk.SplitStats``, the user's class, subclasses it; ``Data``: these are
the statistics as the wire carries them).

:class:`VersionProfile` is what registration learned about the values
(``windpipe.catalog.profile``): per protocol and column the null and non-finite counts, and,
for a protocol with a time column, the segments whose sampling is irregular. The
version's answer carries it (``VersionOut.profile``) and its findings as warnings.

Definitions (the same in both): a value is *null* when it is null or NaN (one thing
to windpipe: SEMANTICS 5; zarr stores nulls as NaN), *non-finite* when it is +inf or
-inf, and *finite* otherwise; ``count`` counts finite values, and every statistic is
over them. Rows of manifest rows that lack a column (SEMANTICS 5a) are ``absent_rows``,
never nulls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from windpipe.services.contract.errors import InvalidConfig
from windpipe.services.contract.text import StoredText

__all__ = [
    "DATA_WARNINGS",
    "GAP_FACTOR",
    "HISTOGRAM_BINS",
    "QUANTILES",
    "QUANTILE_METHOD",
    "SIDES",
    "TIME_COLUMN",
    "ColumnProfile",
    "ColumnStats",
    "Histogram",
    "SamplingProblem",
    "Side",
    "SplitStatsData",
    "StatsRequest",
    "VersionProfile",
    "pooled_stats",
]

Side = Literal["train", "val"]
SIDES: tuple[Side, ...] = ("train", "val")
QUANTILES: tuple[float, ...] = (0.01, 0.5, 0.99)
QUANTILE_METHOD = ("exact: numpy.quantile(method='linear') over every finite value of "
                   "the side (no sketch, no sample)")
HISTOGRAM_BINS = 32
TIME_COLUMN = "time_s"
GAP_FACTOR = 10.0
# the registration warnings about values (the profile's findings; the SDK raises them as
# sdk.DataWarning, the others as sdk.RegistrationWarning)
DATA_WARNINGS = frozenset({"null_values", "non_finite_values", "irregular_sampling"})


class _Wire(BaseModel):
    """An immutable wire value that keeps keys it does not know."""

    model_config = ConfigDict(frozen=True, extra="allow")


class Histogram(_Wire):
    """Counts of the finite values in equal bins: ``len(edges) == len(counts) + 1``; the
    last bin holds its right edge (``numpy.histogram``)."""

    edges: list[float]
    counts: list[int]


class ColumnStats(_Wire):
    """One column of one protocol over one side of a split."""

    protocol: str
    column: str
    rows: int = Field(description="rows of the side whose manifest row has the column")
    absent_rows: int = Field(
        default=0, description="rows of the side whose manifest row lacks the column "
                               "(a missing channel, SEMANTICS 5a): not read, not nulls")
    count: int = Field(description="finite values")
    nulls: int = Field(description="null or NaN values")
    non_finite: int = Field(description="+inf or -inf values")
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = Field(default=None, description="population standard deviation "
                                                        "(ddof=0, as StandardScaler)")
    p1: float | None = None
    p50: float | None = None
    p99: float | None = None
    histogram: Histogram | None = None


class StatsRequest(BaseModel):
    """``POST /v1/splits/{id}/stats``: which side, which columns (None: every numeric
    column of every protocol the side has)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    side: Side = "train"
    columns: tuple[StoredText, ...] | None = Field(
        default=None, description="columns to describe; null: every numeric column")

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, value: Any) -> Any:
        if value is None:
            return None
        cols = (value,) if isinstance(value, str) else tuple(value)
        if not cols:
            msg = "columns names at least one column (or is null: every numeric column)"
            raise ValueError(msg)
        for col in cols:
            if not isinstance(col, str) or not col:
                msg = f"column names are non-empty strings, got {col!r}"
                raise ValueError(msg)
        return tuple(sorted(set(cols)))


class SplitStatsData(_Wire):
    """Statistics of one side of a split, per protocol and column (SEMANTICS 6a)."""

    split_id: str
    version_id: str
    side: Side
    columns: list[str] | None = Field(description="the columns asked for (sorted), or "
                                                  "null: every numeric column")
    rows: int = Field(description="rows of the side in the protocols described")
    quantile_method: str = QUANTILE_METHOD
    seconds: float = Field(default=0.0, description="time the computation took")
    stats: list[ColumnStats] = Field(description="sorted by protocol, then column")

    def protocols_of(self, column: str) -> list[str]:
        """The protocols that have statistics of ``column``."""
        return [s.protocol for s in self.stats if s.column == column]

    def column_stats(self, column: str, protocol: str | Sequence[str] | None = None,
                     ) -> ColumnStats:
        """The statistics of ``column`` in ``protocol``; several protocols pool exactly
        (:func:`pooled_stats`); None: the one protocol that has the column (several:
        ``invalid_config`` asking for ``protocol=``)."""
        have = self.protocols_of(column)
        if not have:
            known = sorted({s.column for s in self.stats})
            raise InvalidConfig(f"these statistics have no column {column!r}; they have {known}",
                                details={"column": column, "columns": known})
        if protocol is None:
            if len(have) > 1:
                raise InvalidConfig(
                    f"column {column!r} has statistics in protocols {have}: pass "
                    "protocol= (one name, or several to pool them)",
                    details={"column": column, "protocols": have})
            wanted = have
        else:
            wanted = [protocol] if isinstance(protocol, str) else list(dict.fromkeys(protocol))
        missing = [p for p in wanted if p not in have]
        if missing or not wanted:
            raise InvalidConfig(f"column {column!r} has no statistics in protocol(s) {missing}; "
                                f"it has {have}",
                                details={"column": column, "protocols": have, "missing": missing})
        entries = [s for s in self.stats if s.column == column and s.protocol in wanted]
        return entries[0] if len(entries) == 1 else pooled_stats(entries)


def pooled_stats(entries: Sequence[ColumnStats]) -> ColumnStats:
    """One column's statistics over several protocols, exact for the counts, bounds,
    mean and std (population variances pooled with the means' spread); quantiles and
    histogram do not pool and are None."""
    n = sum(e.count for e in entries)
    base: dict[str, Any] = {
        "protocol": "+".join(e.protocol for e in entries), "column": entries[0].column,
        "rows": sum(e.rows for e in entries),
        "absent_rows": sum(e.absent_rows for e in entries), "count": n,
        "nulls": sum(e.nulls for e in entries),
        "non_finite": sum(e.non_finite for e in entries),
    }
    full = [e for e in entries if e.count and e.mean is not None and e.std is not None]
    if not n or not full:
        return ColumnStats(**base)
    mean = math.fsum(e.count * float(e.mean) for e in full) / n  # type: ignore[arg-type]
    var = math.fsum(e.count * (float(e.std) ** 2 + (float(e.mean) - mean) ** 2)  # type: ignore[arg-type]
                    for e in full) / n
    return ColumnStats(**base, min=min(float(e.min) for e in full),  # type: ignore[arg-type]
                       max=max(float(e.max) for e in full),  # type: ignore[arg-type]
                       mean=mean, std=math.sqrt(var))


class ColumnProfile(_Wire):
    """Registration's count of one column of one protocol, over every segment."""

    protocol: str
    column: str
    rows: int = Field(description="rows of the segments that have the column")
    nulls: int = Field(description="null or NaN values")
    non_finite: int = Field(description="+inf or -inf values")


class SamplingProblem(_Wire):
    """A segment whose time column is not sampled regularly."""

    path: str
    protocol: str
    rows: int
    gaps: int = Field(description=f"steps more than {GAP_FACTOR:g} times both neighbouring "
                                  "steps, both positive (a hole in the recording)")
    non_monotonic: int = Field(description="steps where time does not increase (<= 0)")
    median_step: float | None = Field(default=None, description="median positive step")
    max_step: float | None = None


class VersionProfile(_Wire):
    """What registration learned about a version's values (``VersionOut.profile``)."""

    columns: list[ColumnProfile] = Field(description="every numeric column, by protocol")
    time_column: str = TIME_COLUMN
    gap_factor: float = GAP_FACTOR
    irregular_segments: dict[str, int] = Field(
        default_factory=dict,
        description="per protocol: segments with a gap or a non-monotonic step")
    sampling: list[SamplingProblem] = Field(
        default_factory=list, description="the first irregular segments (at most 100), in "
                                          "manifest order")
    null_counts_from_footer: int = Field(
        default=0, description="columns of parquet segments whose nulls came from the "
                               "footer's statistics, unread (non-float columns)")
