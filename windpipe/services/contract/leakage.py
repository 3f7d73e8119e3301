"""What a split says about the cells it divides: ``leakage`` of a split's answer.

A split keeps each ``group_by`` group whole, and nothing more. The default groups are
single cycles (``(set_id, cell_id, cidx)``), so the cycles of one cell land on both
sides: validation then scores a model on cells it trained on, and the score says little
about a cell it has never seen. The catalog counts those cells once, when it makes the
split (``windpipe.catalog.splits.cell_leakage``), stores the count with it and answers it as
:class:`SplitLeakage`; the SDK turns a non-zero count into a ``DataWarning``. A split
stored before the catalog counted answers ``leakage: null`` (unknown).

A cell is ``(set_id, cell_id)`` (:data:`CELL_COLUMNS`), whatever ``group_by`` says, so
the count is the same for every way of holding cells out.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CELL_COLUMNS", "CELL_GROUP_BY", "LEAKAGE_EXAMPLES", "CellRef", "SplitLeakage"]

CELL_COLUMNS: tuple[str, str] = ("set_id", "cell_id")
"""The identity of a cell: the columns that name one physical cell."""

CELL_GROUP_BY: tuple[str, ...] = CELL_COLUMNS
"""The ``group_by`` that holds out whole cells (no cell on both sides)."""

LEAKAGE_EXAMPLES = 5
"""How many cells on both sides an answer names, at most (the first in identity order)."""


class CellRef(BaseModel):
    """One cell, by its identity."""

    model_config = ConfigDict(frozen=True)

    set_id: str
    cell_id: str

    def __str__(self) -> str:
        return f"{self.set_id}/{self.cell_id}"


class SplitLeakage(BaseModel):
    """Cells with rows on both sides of a split, counted when the split was made.

    ``cells``: the distinct cells of the version; ``cells_on_both_sides``: those with
    rows in ``train`` and in ``val``; ``examples``: up to :data:`LEAKAGE_EXAMPLES` of them,
    in identity order. Zero when ``group_by`` holds out whole cells
    (``group_by=("set_id", "cell_id")``, or a coarser grouping).
    """

    model_config = ConfigDict(frozen=True)

    cells: int = Field(ge=0)
    cells_on_both_sides: int = Field(ge=0)
    examples: tuple[CellRef, ...] = Field(default=(), max_length=LEAKAGE_EXAMPLES)

    @property
    def leaks(self) -> bool:
        """Whether any cell has rows on both sides."""
        return self.cells_on_both_sides > 0
