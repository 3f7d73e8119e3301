"""The profile's figures summed as the checks go, not kept per segment.

Registration's checks count the values of every small parquet segment they read whole
(:mod:`windpipe.catalog.figures`), and a collection has 100,000 of them: keeping each segment's
counts until the version is stored would grow the server by a few hundred bytes a
segment. A :class:`FigureTally` keeps sums instead, per protocol and column, and the
few things the profile's rules may still need per segment:

- which segments have no figures (zarr groups, larger files, a page that did not
  decode): the profile reads them (:func:`windpipe.catalog.profile.profile_version`);
- which segments' nulls of a column came from the footer (a column that is not
  floating): the profile's rules count a column's nulls from the footer only when the
  column is not floating in the *version's* schema, known once every segment is
  checked; should another segment hold it as a float (its type then ``mixed``), those
  segments are read for it, as a read of every segment would count it;
- the first :data:`MAX_LISTED` irregularly sampled segments of each protocol, in
  manifest order (the profile lists the first of all).

The sums follow exactly the rules of a read of each segment
(``windpipe.catalog.profile._profile_segment``): a test compares both on the same versions.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from windpipe.catalog.figures import FLOATING, Counted, Sampling, count_group
from windpipe.services.contract.stats import TIME_COLUMN
from windpipe.services.storage.segments import SegmentInfo, SegmentValues

__all__ = ["MAX_LISTED", "Cell", "FigureTally", "Irregular", "Keep", "plain"]

Keep = Callable[[Sequence[SegmentInfo], Counted], None]
"""Given a counted group: its segments (in the group's order) and what was counted."""

MAX_LISTED = 100

# (segment index, path, protocol, rows, sampling) of an irregularly sampled segment
Irregular = tuple[int, str, str, int, Sampling]


def plain(name: str, dtype: str) -> bool:
    """Whether a column's nulls may come from a footer under the profile's rules: neither
    the time column (its steps are read) nor floating (no footer counts NaN)."""
    return name != TIME_COLUMN and not any(f in dtype for f in FLOATING)


@dataclass
class Cell:
    """The sums of one protocol's column over the segments counted so far: ``rows`` of the
    segments holding it, ``nan`` and ``inf`` of those that read it, ``footer`` nulls of
    those that counted it from their footer (``footer_segments`` of them; ``footer_at``:
    their indices, rows > 0)."""

    rows: int = 0
    nan: int = 0
    inf: int = 0
    footer: int = 0
    footer_segments: int = 0
    footer_at: array[int] = field(default_factory=lambda: array("q"))

    def merge(self, other: Cell) -> None:
        """Add ``other``'s sums."""
        self.rows += other.rows
        self.nan += other.nan
        self.inf += other.inf
        self.footer += other.footer
        self.footer_segments += other.footer_segments
        self.footer_at.extend(other.footer_at)


_GroupKey = tuple[str, int, int, tuple[str, ...]]


class FigureTally:
    """The profile figures of the segments checked so far (see the module docstring)."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], Cell] = {}
        self.unfigured: array[int] = array("q")  # segments the profile must read
        self.figured = 0
        self.irregular: dict[str, int] = defaultdict(int)
        self.listed: dict[str, list[Irregular]] = defaultdict(list)

    def __len__(self) -> int:
        """The segments whose figures are summed here."""
        return self.figured

    def _cell(self, protocol: str, name: str) -> Cell:
        cell = self.cells.get((protocol, name))
        if cell is None:
            cell = self.cells[(protocol, name)] = Cell()
        return cell

    def add_batch(self, indices: Sequence[int], protocols: Sequence[str],
                  found: Sequence[tuple[SegmentInfo, SegmentValues | None] | None], *,
                  keep: Keep | None = None) -> None:
        """Count segments ``indices`` (manifest order): ``found[i]`` is segment
        ``indices[i]``'s description and values (values None: it has no figures;
        ``found[i]`` None: it failed its checks, nothing to count), ``protocols[i]`` its
        protocol. ``keep(infos, counted)``: given each group's stacked columns once
        counted (registration's pack)."""
        groups: dict[_GroupKey, list[int]] = {}
        for i, item in enumerate(found):
            if item is None:
                continue
            info, values = item
            if values is None:
                self.unfigured.append(indices[i])
                continue
            # the columns read follow from the column list and those its footer counted
            key = (protocols[i], id(info.columns), values.table.num_columns,
                   tuple(values.footer_nulls))
            members = groups.get(key)
            if members is None:
                groups[key] = [i]
            else:
                members.append(i)
        for (protocol, _columns, _read, footer_names), members in groups.items():
            names = tuple(found[members[0]][1].table.column_names)  # type: ignore[index,union-attr]
            self._add_group(protocol, names, footer_names,
                            items=[found[i] for i in members],  # type: ignore[misc]
                            at=[indices[i] for i in members], keep=keep)

    def _add_group(self, protocol: str, names: tuple[str, ...], footer_names: tuple[str, ...],
                   *, items: list[tuple[SegmentInfo, SegmentValues]], at: list[int],
                   keep: Keep | None = None) -> None:
        """Sum one group: segments of one protocol and columns, reading the same ones."""
        infos = [info for info, _values in items]
        rows = [info.row_count for info in infos]
        counted: list[tuple[list[int], Counted]] = []
        if names:
            tables = [values.table for _info, values in items]
            try:
                counted.append((list(range(len(items))), count_group(tables, names)))
            except pa.ArrowInvalid:  # types differ after all: one segment at a time
                counted.extend(([k], count_group([t], names)) for k, t in enumerate(tables))
        self.figured += len(items)
        total_rows = sum(rows)
        for column in infos[0].columns:
            if column.numeric:
                self._cell(protocol, column.name).rows += total_rows
        for positions, found in counted:
            if keep is not None:
                keep([infos[k] for k in positions], found)
            for j, name in enumerate(found.names):
                cell = self._cell(protocol, name)
                cell.nan += int(found.nan[j].sum())
                cell.inf += int(found.inf[j].sum())
            for k, sampling in sorted(found.irregular.items()):
                self._irregular(at[positions[k]], infos[positions[k]], protocol, sampling)
        for name in footer_names:
            cell = self._cell(protocol, name)
            cell.footer += sum(values.footer_nulls[name] for _info, values in items)
            cell.footer_segments += len(items)
            cell.footer_at.extend(k for k, n in zip(at, rows, strict=True) if n)

    def _irregular(self, index: int, info: SegmentInfo, protocol: str,
                   sampling: Sampling) -> None:
        self.irregular[protocol] += 1
        listed = self.listed[protocol]
        listed.append((index, info.path, protocol, info.row_count, sampling))
        if len(listed) > MAX_LISTED:
            listed.sort()
            del listed[MAX_LISTED:]

    def add_read(self, index: int, info: SegmentInfo, protocol: str,
                 counts: dict[str, tuple[int, int]], sampling: Sampling | None, *,
                 names: Sequence[str], rows: bool = True) -> None:
        """Add the figures of segment ``index`` read by the profile: ``counts`` per column
        (``(nulls, non_finite)``), its ``sampling``; ``rows``: also count its rows for
        ``names`` (False for a segment already summed, read again for some columns)."""
        for name in names:
            cell = self._cell(protocol, name)
            if rows:
                cell.rows += info.row_count
            nulls, inf = counts.get(name, (0, 0))
            cell.nan += nulls
            cell.inf += inf
        if sampling is not None and (sampling[0] or sampling[1]):
            self._irregular(index, info, protocol, sampling)

    def merge(self, other: FigureTally) -> None:
        """Add ``other``'s figures (segments after this tally's, in manifest order)."""
        for key, cell in other.cells.items():
            mine = self.cells.get(key)
            if mine is None:
                self.cells[key] = cell
            else:
                mine.merge(cell)
        self.unfigured.extend(other.unfigured)
        self.figured += other.figured
        for protocol, count in other.irregular.items():
            self.irregular[protocol] += count
            listed = self.listed[protocol]
            listed.extend(other.listed[protocol])
            listed.sort()
            del listed[MAX_LISTED:]

    def renumber(self, new_index: np.ndarray) -> None:
        """Number the segments again once some were left out of the version
        (``on_bad_file="skip"``): ``new_index[k]`` is segment ``k``'s new index. Only
        segments with nothing here (that failed their checks) may be left out: the sums
        stay as they are."""
        def moved(indices: array[int]) -> array[int]:
            out = array("q")
            out.frombytes(new_index[np.asarray(indices, dtype=np.int64)].astype(
                np.int64).tobytes())
            return out

        self.unfigured = moved(self.unfigured)
        for cell in self.cells.values():
            cell.footer_at = moved(cell.footer_at)
        for listed in self.listed.values():
            listed[:] = [(int(new_index[k]), path, protocol, rows, sampling)
                         for k, path, protocol, rows, sampling in listed]

    def listing(self, protocols: set[str]) -> list[Irregular]:
        """The first :data:`MAX_LISTED` irregular segments of ``protocols``, manifest
        order."""
        every = [entry for p in protocols for entry in self.listed.get(p, ())]
        return sorted(every)[:MAX_LISTED]

    def state(self) -> dict[str, Any]:
        """A plain view of the sums (for tests and logs)."""
        return {"figured": self.figured, "unfigured": len(self.unfigured),
                "cells": {f"{p}/{c}": (v.rows, v.nan, v.inf, v.footer, v.footer_segments,
                                       len(v.footer_at)) for (p, c), v in self.cells.items()},
                "irregular": dict(self.irregular)}

