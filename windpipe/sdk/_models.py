"""Plain result values of the catalog client: what the REST API answered.

Each keeps the raw JSON answer in ``raw`` (nothing the server says is lost) and
exposes the fields users look at as attributes, with a readable ``repr`` and a
``_repr_html_`` for notebooks. The active objects (``DatasetVersion``, ``Split``,
``Plan`` in ``windpipe.sdk._handles``) wrap these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from windpipe.sdk._exceptions import InvalidRequest
from windpipe.sdk._html import html_table, human_bytes, human_count, text_table
from windpipe.services.contract.reports import PlanReportData

__all__ = ["DatasetInfo", "MlDatasetIndex", "PlanReport"]


@dataclass(frozen=True)
class DatasetInfo:
    """A named dataset as listed by ``Catalog.datasets()``."""

    name: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> DatasetInfo:
        """From one item of ``GET /v1/datasets``."""
        return cls(name=str(body.get("name")), raw=body)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]


@dataclass(frozen=True, eq=False)
class MlDatasetIndex:
    """The ML index of a version (SEMANTICS section 1) as a polars frame.

    Sorted by ``(set_id, cell_id, cidx, protocol)``; an index obtained from a split
    has a ``split`` column (``train`` / ``val``).
    """

    frame: pl.DataFrame

    def filter_split(self, split: str) -> MlDatasetIndex:
        """Only the rows of ``split``; needs an index obtained from a split."""
        if "split" not in self.frame.columns:
            msg = (
                "this index has no 'split' column: take it from a split "
                "(version.split(ValidationConfig...).index())"
            )
            raise InvalidRequest(msg)
        known = set(self.frame.get_column("split").unique().to_list())
        if split not in known | {"train", "val"}:
            msg = f"unknown split {split!r}; this index has {sorted(known)}"
            raise InvalidRequest(msg)
        return MlDatasetIndex(self.frame.filter(pl.col("split") == split))

    def __len__(self) -> int:
        return self.frame.height

    @property
    def n_rows(self) -> int:
        """Source rows over all manifest rows (``row_count`` summed), when present."""
        if "row_count" in self.frame.columns:
            return int(self.frame.get_column("row_count").sum())
        return 0

    def __repr__(self) -> str:
        return f"MlDatasetIndex({self.frame.height} manifest rows)\n{self.frame!r}"

    def _repr_html_(self) -> str:
        inner = getattr(self.frame, "_repr_html_", lambda: "")()
        return f"<div><b>MlDatasetIndex</b> ({self.frame.height} manifest rows){inner}</div>"


@dataclass(frozen=True, eq=False)
class PlanReport:
    """What a plan yields per epoch (and per rank for ``world_size``), and what it drops.

    ``GET /v1/plans/{id}/report``, validated as the wire contract's
    :class:`windpipe.services.contract.reports.PlanReportData` (``model``). Its fields read as
    attributes (``report.batches``, ``report.dropped.distributed_trimmed_batches``,
    ``report.protocols["cycling"].tokens``); ``report["name"]`` and ``raw`` give the
    JSON the server answered. ``warnings`` lists what the plan does that is probably not
    meant (more than half of a protocol's tokens padding); the repr shows each.
    """

    plan_id: str
    world_size: int
    raw: dict[str, Any]
    model: PlanReportData = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", PlanReportData.model_validate(self.raw))

    def __getattr__(self, name: str) -> Any:
        """A field of the report (``batches``, ``tokens``, ``dropped``, ...)."""
        if name.startswith("_") or name == "model":  # not set yet: no recursion
            raise AttributeError(name)
        try:
            return getattr(self.model, name)
        except AttributeError:
            msg = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(msg) from None

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.fields()})

    def fields(self) -> list[str]:
        """The report's field names, in display order (the contract's, then any other
        key the server sent)."""
        known = [k for k in PlanReportData.model_fields if k in self.raw]
        return known + [k for k in self.raw if k not in known]

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        """A report field as JSON, or ``default``."""
        return self.raw.get(key, default)

    def _rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("world_size", self.world_size)]
        for key in self.fields():
            value = self.raw[key]
            if key in ("world_size", "plan_id"):
                continue
            if key == "warnings" and isinstance(value, list):  # one line each, said plainly
                rows += [("warning", w.get("message", w)) for w in value]
                continue
            if key == "dropped" and isinstance(value, dict):  # what it drops, not the zeros
                value = {k: v for k, v in value.items() if v} or "nothing"
            if key.endswith("bytes") and isinstance(value, int | float):
                value = human_bytes(value)
            elif key.endswith("tokens") and isinstance(value, int | float):
                value = f"{value} ({human_count(value)})"
            rows.append((key, value))
        return rows

    def __repr__(self) -> str:
        return text_table(f"PlanReport {self.plan_id}", self._rows())

    def __str__(self) -> str:
        return self.__repr__()

    def _repr_html_(self) -> str:
        return html_table(f"PlanReport {self.plan_id}", self._rows())
