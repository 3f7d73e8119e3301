"""What became of every data row of a cycler export, for the ingest summary.

A reader says how many data rows of its files a measurement stands for and which it
left out, by reason (:class:`~services.ingest.base.Measurement`); the writer writes the
rest. :func:`account` checks that the two add up (a row neither written nor counted is
refused, never lost quietly) and counts, among the rows written, those whose time does
not advance past the previous row's in their cycle. Those are kept: a segment's rows
need not increase in time (registration warns of such steps, docs/data.md), and they
are the file's data; the summary says how many there are, so a reader of ``dt_s``
knows to expect a step of 0 s or one back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from windpipe.services.ingest.base import IngestError, Measurement

__all__ = ["BACK", "BACK_AT_STEP", "BACK_IN_STEP", "SAME_TIME", "FileRows", "account",
           "time_steps"]

SAME_TIME = "same time as the previous row"
BACK = "time goes back"
BACK_IN_STEP = "time goes back within a step"
BACK_AT_STEP = "time goes back at a step change"


@dataclass(frozen=True, slots=True)
class FileRows:
    """The data rows of one file, or of one test's files read together (``files`` as
    the manifest's ``source_files`` says them): ``read`` from the files, ``written`` to
    segments, ``dropped`` by reason (``read == written + sum(dropped)``), and
    ``time_not_increasing``: rows written whose time does not advance past the previous
    row's in their cycle, by kind (:data:`SAME_TIME`; :data:`BACK`, or where the file
    records steps :data:`BACK_IN_STEP` and :data:`BACK_AT_STEP`)."""

    files: str
    read: int
    written: int
    dropped: Mapping[str, int]
    time_not_increasing: Mapping[str, int]

    @property
    def n_dropped(self) -> int:
        """The rows left out, for any reason."""
        return sum(self.dropped.values())

    def plus(self, other: FileRows) -> FileRows:
        """Both counts together (the files of one name read twice)."""
        return FileRows(self.files, self.read + other.read, self.written + other.written,
                        dict(Counter(self.dropped) + Counter(other.dropped)),
                        dict(Counter(self.time_not_increasing)
                             + Counter(other.time_not_increasing)))

    def as_json(self) -> dict[str, Any]:
        """What ``ingest.json``'s ``rows`` holds for these files."""
        return {"read": self.read, "written": self.written,
                "dropped": dict(sorted(self.dropped.items())),
                "time_not_increasing": dict(sorted(self.time_not_increasing.items()))}


def time_steps(frame: pl.DataFrame) -> Counter[str]:
    """A time series' rows whose time does not advance past the previous row's of
    their cycle (as the segment's ``dt_s`` will show them), by kind."""
    if "test_time_s" not in frame.columns or frame.height < 2:
        return Counter()
    step = "step" in frame.columns
    steps = frame.select(  # a cycle's first row: no previous row, a null difference
        dt=pl.col("test_time_s").diff().over("cycle"),
        changed=(pl.col("step").diff().over("cycle") != 0) if step else pl.lit(value=False))
    found: Counter[str] = Counter()
    found[SAME_TIME] = steps.filter(pl.col("dt") == 0).height
    back = steps.filter(pl.col("dt") < 0)
    if step:
        found[BACK_AT_STEP] = back.filter(pl.col("changed")).height
        found[BACK_IN_STEP] = back.height - found[BACK_AT_STEP]
    else:
        found[BACK] = back.height
    return +found  # the kinds that occur


def account(reader: str, first: Path, measures: Sequence[Measurement]) -> list[FileRows]:
    """The rows of one unit's measurements, per ``files``; an :class:`IngestError`
    naming ``first`` when ``reader`` left rows out without counting them."""
    read: Counter[str] = Counter()
    written: Counter[str] = Counter()
    dropped: dict[str, Counter[str]] = {}
    steps: dict[str, Counter[str]] = {}
    for measure in measures:
        files = ", ".join(measure.files)
        height = measure.frame.height
        read[files] += height if measure.file_rows is None else measure.file_rows
        written[files] += height
        dropped.setdefault(files, Counter()).update(measure.dropped)
        steps.setdefault(files, Counter()).update(time_steps(measure.frame))
    out = []
    for files in read:
        gone = sum(dropped[files].values())
        if read[files] != written[files] + gone:
            raise IngestError(first, f"the {reader} reader accounts for "
                                     f"{written[files] + gone} of its {read[files]} data "
                                     f"rows ({written[files]} written, {gone} dropped with a "
                                     "reason); a row it loses without one is refused")
        out.append(FileRows(files, read[files], written[files], dict(+dropped[files]),
                            dict(steps[files])))
    return out
