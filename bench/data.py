"""The benchmark dataset: synthetic cycling streams, one parquet segment each.

Each cycling stream holds ``WINDOWS_PER_STREAM`` complete ``B*T`` windows of the
benchmark's batch shape (plus the one extra target row), so every batch of the
schedule is full and little of the data is left over.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["ROWS_PER_CYCLE", "dataset_shape", "ensure_dataset"]

WINDOWS_PER_STREAM = 4
ROWS_PER_CYCLE = WINDOWS_PER_STREAM * 64 * 1024 + 1


def dataset_shape(cycling_rows: int) -> tuple[int, int]:
    """``(cells, cycles)`` giving at least ``cycling_rows`` cycling rows."""
    cells = 8 if cycling_rows >= 8 * 4 * ROWS_PER_CYCLE else 4
    cycles = max(1, math.ceil(cycling_rows / (cells * ROWS_PER_CYCLE)))
    return cells, cycles


def ensure_dataset(directory: Path, *, cycling_rows: int, seed: int = 7,
                   row_group_rows: int = 131_072) -> Path:
    """Write the dataset once (deterministic for ``seed``); reuse it when present.

    ``row_group_rows``: parquet row group (= cached chunk) size; smaller groups let a
    tiny dataset still be several times a cache that holds one shuffled batch's chunks.
    """
    from windpipe.services.synth import write_synthetic_dataset  # noqa: PLC0415

    if (directory / "manifest.parquet").exists():
        return directory
    cells, cycles = dataset_shape(cycling_rows)
    write_synthetic_dataset(
        directory, cells=cells, cycles=cycles, rows_per_cycle=ROWS_PER_CYCLE, seed=seed,
        zarr_fraction=0.0, split_fraction=0.0, null_fraction=0.0, row_group_rows=row_group_rows,
    )
    return directory
