"""One test's files read in turn, each file's cycles continuing the previous file's.

The Arbin readers (CSV and ``.res``) and the BatteryArchive reader take a cell's files
as one test: the first file's lowest cycle index is cycle 0 and each further file
starts after the previous file's last cycle. They differ only in how one file is read
and what of it is left out, so the loop that chains the files, adds up their rows and
the rows dropped, and hands back one :class:`~services.ingest.base.Measurement` lives
here once (the row accounting must not drift apart between readers).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from windpipe.services.ingest.base import Measurement

__all__ = ["FilePart", "read_in_turn"]


@dataclass(frozen=True)
class FilePart:
    """What one file gave: ``rows`` (its data rows, all of them), ``frame`` (the rows
    kept, cycles already counted on from the previous file) and ``dropped`` (the rows
    left out, by reason; ``rows == frame.height + sum(dropped)``)."""

    rows: int
    frame: pl.DataFrame
    dropped: Mapping[str, int] = field(default_factory=dict)


def read_in_turn(files: Sequence[Path],
                 read_file: Callable[[Path, int], FilePart]) -> list[Measurement]:
    """One measurement of ``files`` read in order by ``read_file(path, first_cycle)``,
    each file's first cycle one after the previous file's last."""
    frames: list[pl.DataFrame] = []
    rows = 0
    dropped: Counter[str] = Counter()
    next_cycle = 0
    for path in files:
        part = read_file(path, next_cycle)
        rows += part.rows
        dropped.update(part.dropped)
        frames.append(part.frame)
        next_cycle = int(part.frame.get_column("cycle").max()) + 1  # type: ignore[arg-type]
    frame = pl.concat(frames, how="diagonal_relaxed")
    return [Measurement(None, frame, tuple(p.name for p in files), file_rows=rows,
                        dropped=dict(+dropped))]
