"""``DatasetVersion``, ``Split`` and ``Plan``: what the catalog returns, with the next step.

A version gives its index and makes splits; a split gives its index (with a
``split`` column) and makes plans; a plan reports and streams. Each is a frozen
dataclass over the server's JSON answer (``raw``) plus the :class:`~sdk._state.ClientState`
of the catalog it came from, whose public methods it calls (REST, and the plan's
:class:`~sdk._sources.BatchSource`). torch is imported when a plan's batches are first
asked for (``windpipe.sdk._torch_import``). ``Plan`` lives in :mod:`windpipe.sdk._plan` and is
re-exported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from windpipe.sdk._answer import AnswerFields, FromAnswer
from windpipe.sdk._exceptions import DataWarning
from windpipe.sdk._html import html_table, text_table
from windpipe.sdk._models import MlDatasetIndex
from windpipe.sdk._plan import Plan
from windpipe.sdk._plots import plot_split
from windpipe.sdk._split_stats import SplitStats
from windpipe.sdk._train_val import TrainValMixin
from windpipe.services.contract.configs import LoaderConfig, PlanSpec, ValidationConfig
from windpipe.services.contract.leakage import CELL_GROUP_BY, SplitLeakage
from windpipe.services.contract.stats import Side, VersionProfile

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from windpipe.sdk._state import ClientState

__all__ = ["DatasetVersion", "Plan", "Split"]


@dataclass(frozen=True, eq=False)
class DatasetVersion(FromAnswer):
    """An immutable registered version of a dataset (id = digest of its content)."""

    id: str
    dataset: str
    root: str
    created: bool
    raw: dict[str, Any] = field(repr=False)
    _state: ClientState = field(repr=False)

    # from a ``register_version`` / ``get_version`` answer (``VersionOut``)
    ANSWER_FIELDS: ClassVar[AnswerFields] = {
        "dataset": ("dataset", str),
        "root": ("root_uri", str),
    }

    @property
    def warnings(self) -> list[dict[str, Any]]:
        """What registration doubted (``{type, protocol, message, ...}``; only on the
        answer of ``Catalog.register``): a protocol new to the catalog or close to a
        known one (``cyling``)."""
        return list(self.raw.get("warnings") or ())

    @property
    def skipped(self) -> list[dict[str, str]]:
        """The files registration left out (``on_bad_file="skip"``; only on the answer of
        ``Catalog.register``), each ``{path, reason}``: the first 1,000, of
        :attr:`skipped_count`."""
        return [dict(f) for f in self.raw.get("skipped") or ()]

    @property
    def skipped_count(self) -> int:
        """How many files registration left out (0 without ``on_bad_file="skip"``)."""
        return int(self.raw.get("skipped_count") or 0)

    @property
    def profile(self) -> VersionProfile | None:
        """What registration learned about the values: ``columns`` (null and non-finite
        counts per protocol and column), ``irregular_segments`` and ``sampling`` (segments
        whose ``time_s`` has gaps or steps back); None for a version registered before
        profiles existed."""
        body = self.raw.get("profile")
        return None if body is None else VersionProfile.model_validate(body)

    def index(self) -> MlDatasetIndex:
        """The ML index (SEMANTICS section 1) as a polars frame."""
        return MlDatasetIndex(self._state.arrow_frame(f"/v1/versions/{self.id}/index"))

    def segments(self) -> list[dict[str, Any]]:
        """Every normalized segment of the version (path, format, rows, ...)."""
        return list(self._state.pages(f"/v1/versions/{self.id}/segments"))

    def split(self, config: ValidationConfig) -> Split:
        """Split into ``train`` / ``val`` (idempotent: the same config returns the same split).

        A split whose groups are finer than a cell (the default ``group_by``: one
        cycle) puts cycles of one cell on both sides, so validation scores cells the
        model trained on: it is made, with a :class:`DataWarning` naming how many cells
        and how to hold out whole ones (``group_by=("set_id", "cell_id")``);
        ``split.leakage`` has the numbers.
        """
        body, status = self._state.post_json(
            f"/v1/versions/{self.id}/splits", config.model_dump(mode="json")
        )
        split = Split.from_json(self._state, body, created=status == 201)
        leakage = split.leakage
        if leakage is not None and leakage.leaks:
            warnings.warn(_leakage_message(split.id, config, leakage), DataWarning, stacklevel=2)
        return split

    def retire(self) -> DatasetVersion:
        """Retire this version (soft; ``DELETE /v1/versions/{id}``): listings hide it, new
        splits and plans on it raise :class:`Conflict`, running streams finish."""
        body = self._state.delete_json(f"/v1/versions/{self.id}")
        return DatasetVersion.from_json(self._state, body)

    def _rows(self) -> list[tuple[str, Any]]:
        keys = ("n_manifest_rows", "n_segments", "n_rows", "metadata_columns", "created_at",
                "retired_at")
        return [("dataset", self.dataset), ("root", self.root)] + [
            (k, self.raw[k]) for k in keys if k in self.raw
        ] + [("warning", w["message"]) for w in self.warnings]

    def __repr__(self) -> str:
        return text_table(f"DatasetVersion {self.id}", self._rows())

    def _repr_html_(self) -> str:
        return html_table(f"DatasetVersion {self.id}", self._rows())


@dataclass(frozen=True, eq=False)
class Split(TrainValMixin, FromAnswer):
    """A train/val split of a version; ``counts`` has the group and row counts per split;
    ``plans(config)`` / ``loaders(config, epoch=e)``: train and validation of one config."""

    id: str
    version_id: str
    config: ValidationConfig
    counts: dict[str, Any]
    created: bool
    raw: dict[str, Any] = field(repr=False)
    _state: ClientState = field(repr=False)

    # from a ``create_split`` / ``get_split`` answer (``SplitOut``)
    ANSWER_FIELDS: ClassVar[AnswerFields] = {
        "version_id": ("version_id", str),
        "config": ("config", ValidationConfig.model_validate),
        "counts": ("counts", dict),
    }

    @property
    def leakage(self) -> SplitLeakage | None:
        """The cells with rows in both ``train`` and ``val`` (``cells_on_both_sides`` of
        ``cells``, a few ``examples``), counted when the split was made; None for a
        split an older catalog stored (unknown)."""
        body = self.raw.get("leakage")
        return None if body is None else SplitLeakage.model_validate(body)

    def index(self) -> MlDatasetIndex:
        """The version's ML index with a ``split`` column."""
        return MlDatasetIndex(self._state.arrow_frame(f"/v1/splits/{self.id}/index"))

    def stats(self, *, side: Side = "train", columns: Sequence[str] | None = None,
              ) -> SplitStats:
        """Statistics of one side (``"train"``: no validation row is read) per protocol
        and numeric column (``columns``: only those): counts, nulls, min, max, mean, std,
        exact p1 / p50 / p99 and a histogram (SEMANTICS 6a). The catalog computes them
        once and stores them; asking again answers the stored ones. Fit a scaling with
        ``ScalingSpec.from_stats(stats, column, kind="standard")``."""
        body, _status = self._state.post_json(
            f"/v1/splits/{self.id}/stats",
            {"side": side, "columns": None if columns is None else list(columns)})
        return SplitStats.model_validate(body)

    def plan(self, config: LoaderConfig | PlanSpec) -> Plan:
        """A window plan of this split (idempotent for the same planning fields).

        Only the planning fields are sent; a :class:`LoaderConfig`'s runtime options
        stay here and steer :meth:`Plan.loader` (a bare :class:`PlanSpec` gets the
        default options).
        """
        body, status = self._state.post_json(
            f"/v1/splits/{self.id}/plans", config.planning_dict()
        )
        loader = config if isinstance(config, LoaderConfig) else LoaderConfig.model_validate(
            config.planning_dict())
        return Plan.from_json(self._state, body, created=status == 201, config=loader)

    def retire(self) -> Split:
        """Retire this split (soft; ``DELETE /v1/splits/{id}``): new plans of it raise
        :class:`Conflict`, and so do its plans' new streams."""
        body = self._state.delete_json(f"/v1/splits/{self.id}")
        return Split.from_json(self._state, body)

    def plot(self) -> Figure:
        """Groups per split over the grouping columns (needs ``windpipe[plot]``)."""
        return plot_split(self.index().frame, group_by=self.config.group_by,
                          title=f"split {self.id} ({self.config.strategy})")

    def _rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("version", self.version_id), ("strategy", self.config.strategy),
            ("fraction", self.config.fraction), ("seed", self.config.seed),
            ("group_by", self.config.group_by),
        ]
        rows += [(f"counts[{k}]", v) for k, v in self.counts.items()]
        leakage = self.leakage
        if leakage is not None:
            rows.append(("cells on both sides",
                         f"{leakage.cells_on_both_sides} of {leakage.cells}"))
        return rows

    def __repr__(self) -> str:
        return text_table(f"Split {self.id}", self._rows())

    def _repr_html_(self) -> str:
        return html_table(f"Split {self.id}", self._rows())


def _leakage_message(split_id: str, config: ValidationConfig, leakage: SplitLeakage) -> str:
    """What :meth:`DatasetVersion.split` warns: how many cells, which, and the fix."""
    named = ", ".join(str(c) for c in leakage.examples)
    more = ", ..." if leakage.cells_on_both_sides > len(leakage.examples) else ""
    if config.strategy == "sample":
        fix = (f"ValidationConfig.sample(fraction={config.fraction}, seed={config.seed}, "
               f"group_by={CELL_GROUP_BY!r})")
    else:
        fix = f"group_by={CELL_GROUP_BY!r} in the ValidationConfig"
    return (
        f"split {split_id}: {leakage.cells_on_both_sides} of {leakage.cells} cells have rows "
        f"in both train and val ({named}{more}): group_by={config.group_by!r} keeps each "
        f"group of those columns whole, not each cell, so validation scores cells the "
        f"model also trained on. Hold out whole cells with {fix}; if holding out part of "
        f"each cell is intended (its later cycles, say), ignore this warning."
    )
