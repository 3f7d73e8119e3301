"""The benchmark dataset: synthetic cycling streams, one parquet segment each."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ensure_dataset"]

ROWS_PER_CYCLE = 50_000


def ensure_dataset(directory: Path, *, cycling_rows: int, seed: int = 7) -> Path:
    """Write the dataset once (deterministic for ``seed``); reuse it when present."""
    from services.synth import write_synthetic_dataset  # noqa: PLC0415

    if (directory / "manifest.parquet").exists():
        return directory
    cells = 8 if cycling_rows >= 8 * 10 * ROWS_PER_CYCLE else 4
    cycles = max(1, cycling_rows // (cells * ROWS_PER_CYCLE))
    write_synthetic_dataset(
        directory, cells=cells, cycles=cycles, rows_per_cycle=ROWS_PER_CYCLE, seed=seed,
        zarr_fraction=0.0, split_fraction=0.0, null_fraction=0.0, row_group_rows=131_072,
    )
    return directory
