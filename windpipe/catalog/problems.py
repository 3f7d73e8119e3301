"""The problems of a manifest: the first few listed, all of them counted.

A manifest of a million rows can have a million problems; the answer lists the first
:data:`MAX_LISTED` by manifest row (``details.problems``) and counts the rest
(``details.problem_count``), and :class:`ProblemLog` keeps no more than that in memory
however many are added. Each problem is a dict with ``row`` (0-based, ``None`` for the
whole manifest or a column), ``problem`` and, where it applies, ``column`` or
``segment_path``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any

from windpipe.services.contract.errors import InvalidManifest, WindpipeError

__all__ = ["MAX_LISTED", "ProblemLog", "manifest_error"]

MAX_LISTED = 100


class ProblemLog:
    """The ``listed`` problems with the smallest rows (ties: first added) and a count of all.

    ``complete`` is False once a check stopped early (segment inspection, after
    ``listed`` segments failed): then ``count`` is a lower bound.
    """

    def __init__(self, *, listed: int = MAX_LISTED) -> None:
        self.listed = listed
        self.count = 0
        self.complete = True
        self.note = ""
        self._heap: list[tuple[int, int, dict[str, Any]]] = []  # (-row, -seq, problem)
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, problem: dict[str, Any]) -> None:
        """Count ``problem``; keep it if it is among the first ``listed``."""
        self.count += 1
        row = problem.get("row")
        item = (-(row if row is not None else -1), -next(self._seq), problem)
        if len(self._heap) < self.listed:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            heapq.heapreplace(self._heap, item)

    def extend(self, problems: Iterable[dict[str, Any]], *, more: int = 0) -> None:
        """Add ``problems`` and count ``more`` that were not built (beyond the listed)."""
        for problem in problems:
            self.add(problem)
        self.count += more

    def full(self) -> bool:
        """Whether ``listed`` problems are held (later checks may stop early)."""
        return len(self._heap) >= self.listed

    def problems(self) -> list[dict[str, Any]]:
        """The listed problems, by row (``None`` first), then in the order added."""
        return [p for _r, _s, p in sorted(self._heap, reverse=True)]

    def stop(self, note: str) -> None:
        """Mark the count a lower bound: a check stopped early (``note`` says which)."""
        self.complete = False
        self.note = note

    def error(self) -> WindpipeError:
        """The ``invalid_manifest`` error of these problems."""
        return manifest_error(self)


def manifest_error(problems: list[dict[str, Any]] | ProblemLog) -> WindpipeError:
    """The ``invalid_manifest`` error listing ``problems`` (dicts with ``row``, ``problem``):
    the first :data:`MAX_LISTED` by row in ``details.problems``, their number in
    ``details.problem_count`` (``details.problems_complete`` False: at least that many)."""
    if not isinstance(problems, ProblemLog):
        log = ProblemLog()
        log.extend(problems)
        problems = log
    listed = problems.problems()
    first = listed[0]
    where = f"row {first['row']}" if first.get("row") is not None else "manifest"
    column = f", column {first['column']!r}" if first.get("column") else ""
    if first.get("segment_path"):
        column += f" (segment {first['segment_path']!r})"
    count = problems.count
    total = f"{count}" if problems.complete else f"at least {count}"
    shown = f" ({len(listed)} listed)" if len(listed) < count else ""
    note = f"; {problems.note}" if problems.note else ""
    return InvalidManifest(
        f"{total} problem{'s' if count != 1 else ''} in manifest{shown}{note}: "
        f"first: {where}{column}: {first['problem']}",
        details={"problems": listed, "problem_count": count,
                 "problems_complete": problems.complete},
    )
