"""``python -m bench.stats``: a split side's statistics beside one polars scan.

The benchmark dataset (``bench.data``: parquet segments, float32 columns), registered in
a catalog on SQLite in a temporary directory and split 80/20 (``sample``, seed 1). Timed,
alternating, ``--rounds`` times each (medians), page cache warm:

* ``windpipe_stats``: ``windpipe.catalog.stats.split_stats`` of the train side for the cycling
  and hppc columns, as ``POST /v1/splits/{id}/stats`` computes it the first time (the
  bound check, every segment read once through ``windpipe.services.storage.segments``, the
  summaries, the row stored; the stored row is deleted between rounds);
* ``polars_stats``: what a user writes instead: per protocol one ``scan_parquet`` of the
  same train files computing the same numbers (non-finite and null counts, min, max,
  mean, std, the three quantiles) in one query;
* ``polars_scan``: per protocol one ``scan_parquet(...).select(columns).collect()`` of
  the same files and columns: reading alone, the floor.

Printed: seconds and the ratios ``windpipe_stats / polars_scan`` and ``windpipe_stats /
polars_stats``; ``--json PATH`` keeps the record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import sqlalchemy as sa

from bench.data import ensure_dataset
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.service import create_split, register_version, split_index
from windpipe.catalog.stats import split_stats
from windpipe.migrations import upgrade_engine
from windpipe.services.contract.configs import ValidationConfig
from windpipe.services.contract.stats import SplitStatsData, StatsRequest
from windpipe.services.database import create_engine

__all__ = ["main", "run"]

COLUMNS = ("time_s", "dt_s", "current_a", "voltage_v", "temperature_c", "soc_pct")
PROTOCOLS = ("cycling", "hppc")


def _polars_stats(files: list[str]) -> pl.DataFrame:
    aggs = []
    for c in COLUMNS:
        col = pl.col(c)
        finite = col.filter(col.is_finite())
        aggs += [col.is_finite().sum().alias(f"{c}_count"), col.is_nan().sum().alias(
            f"{c}_nan"), col.null_count().alias(f"{c}_null"),
            col.is_infinite().sum().alias(f"{c}_inf"), finite.min().alias(f"{c}_min"),
            finite.max().alias(f"{c}_max"), finite.mean().alias(f"{c}_mean"),
            finite.std(ddof=0).alias(f"{c}_std"),
            finite.quantile(0.01, "linear").alias(f"{c}_p1"),
            finite.median().alias(f"{c}_p50"),
            finite.quantile(0.99, "linear").alias(f"{c}_p99")]
    return pl.scan_parquet(files).select(aggs).collect()


def _agreement(stats: SplitStatsData, frames: dict[str, pl.DataFrame]) -> dict[str, float]:
    """The two computations agree: counts equal, the largest relative difference of the
    bounds, mean, std and quantiles (polars works in float32 where the column is)."""
    worst, counts_equal = 0.0, True
    for e in stats.stats:
        row = frames[e.protocol].row(0, named=True)
        counts_equal &= row[f"{e.column}_count"] == e.count
        counts_equal &= row[f"{e.column}_nan"] + row[f"{e.column}_null"] == e.nulls
        for key in ("min", "max", "mean", "std", "p1", "p50", "p99"):
            ours, theirs = getattr(e, key), row[f"{e.column}_{key}"]
            worst = max(worst, abs(ours - theirs) / max(abs(ours), 1e-12))
    return {"max_relative_difference": worst, "counts_equal": float(counts_equal)}


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(*, rows: int, out: Path, rounds: int) -> dict[str, Any]:
    """Time the three contenders ``rounds`` times each, alternating."""
    root = ensure_dataset(out / f"data-{rows}", cycling_rows=rows)
    with tempfile.TemporaryDirectory(prefix="windpipe-bench-stats-") as tmp:
        engine = create_engine(f"sqlite:///{tmp}/catalog.db")
        upgrade_engine(engine)
        ctx = CatalogContext.from_engine(engine)
        version = register_version(ctx, "bench-stats", root=root.resolve().as_uri(),
                                   manifest="manifest.parquet").value
        split = create_split(ctx, version.id, ValidationConfig.sample(fraction=0.2, seed=1))
        index = split_index(ctx, split.value.id).filter(pl.col("split") == "train")
        files = {p: [str(root / s) for paths in index.filter(pl.col("protocol") == p)
                     .get_column("segment_paths").to_list() for s in paths]
                 for p in PROTOCOLS}
        n_rows = int(index.filter(pl.col("protocol").is_in(PROTOCOLS))
                     .get_column("row_count").sum())
        request = StatsRequest(side="train", columns=COLUMNS)

        def windpipe() -> None:
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM split_stats"))
            assert split_stats(ctx, split.value.id, request).created

        contenders: dict[str, Callable[[], Any]] = {
            "windpipe_stats": windpipe,
            "polars_stats": lambda: [_polars_stats(files[p]) for p in PROTOCOLS],
            "polars_scan": lambda: [pl.scan_parquet(files[p]).select(COLUMNS).collect()
                                    for p in PROTOCOLS],
        }
        for fn in contenders.values():  # warm the page cache and the imports, untimed
            fn()
        agreement = _agreement(split_stats(ctx, split.value.id, request).value,
                               {p: _polars_stats(files[p]) for p in PROTOCOLS})
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, fn in contenders.items():
                times[name].append(_timed(fn))
        engine.dispose()
    median = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "rows": n_rows, "columns": list(COLUMNS), "protocols": list(PROTOCOLS),
        "segments": sum(len(f) for f in files.values()), "rounds": rounds,
        "seconds": median, "all_seconds": times, "agreement": agreement,
        "ratios": {"windpipe_stats/polars_scan": median["windpipe_stats"]
                   / median["polars_scan"],
                   "windpipe_stats/polars_stats": median["windpipe_stats"]
                   / median["polars_stats"]},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the statistics benchmark and print its table."""
    parser = argparse.ArgumentParser(prog="python -m bench.stats", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2M cycling rows (default 20M)")
    parser.add_argument("--rows", type=int, default=None, help="cycling rows")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = args.rows or (2_000_000 if args.quick else 20_000_000)
    record = run(rows=rows, out=args.out, rounds=args.rounds)
    print(f"train side: {record['rows']:,} rows of {'+'.join(record['protocols'])}, "
          f"{len(record['columns'])} columns, {record['segments']} parquet segments; "
          f"medians of {record['rounds']} alternating rounds")
    print("| contender | seconds |")
    print("|---|---:|")
    for name, seconds in record["seconds"].items():
        print(f"| {name} | {seconds:.3f} |")
    for name, ratio in record["ratios"].items():
        print(f"{name}: {ratio:.2f}x")
    print(f"agreement with polars: {record['agreement']}")
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
