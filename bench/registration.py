"""Registration at collection scale: a served catalog registering many small segments,
beside the floor of reading the same parquet footers with pyarrow in one loop.

    python -m bench.registration --cells 30 --cycles 100 --rows-per-cycle 60

writes a synthetic dataset (``windpipe synth``'s generator; ``--data DIR`` reuses one),
reads every parquet footer once to warm the page cache, then times, side by side: the
footers read again in one loop (the floor), and ``Catalog(url).register(...)`` against
a catalog served on a free loopback port (SQLite under a temporary directory). Prints
both, per segment, and their ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow.parquet as pq

from windpipe.catalog.api.server import start_catalog_server
from windpipe.sdk import Catalog
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["footer_floor", "main", "register_once"]


def footer_floor(root: Path) -> tuple[int, float]:
    """``(parquet segments, seconds)`` reading every segment's footer with pyarrow."""
    files = sorted(p for p in (root / "segments").rglob("*.parquet"))
    start = time.perf_counter()
    for path in files:
        _ = pq.ParquetFile(path).metadata
    return len(files), time.perf_counter() - start


def register_once(root: Path, *, work: Path, name: str = "many") -> tuple[str, int, float]:
    """``(version id, segments, seconds)`` of one registration of ``root``'s manifest
    through the SDK against a fresh catalog served on a free port."""
    settings = Settings(data_dir=work, log_level="WARNING", host="127.0.0.1",
                        allowed_roots=(str(root.resolve()),))
    server = start_catalog_server(settings, port=0)
    try:
        catalog = Catalog(server.url, timeout=600.0, read_timeout=600.0)
        start = time.perf_counter()
        with warnings.catch_warnings():  # the synthetic data's nulls, on purpose
            warnings.simplefilter("ignore")
            version = catalog.register(name, root=str(root.resolve()),
                                       manifest="manifest.parquet", progress=False)
        seconds = time.perf_counter() - start
        return version.id, int(version.raw["n_segments"]), seconds
    finally:
        server.stop(grace_s=5.0)


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, write (or reuse) the data, print the two numbers and their ratio."""
    parser = argparse.ArgumentParser(prog="python -m bench.registration",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--rows-per-cycle", type=int, default=60)
    parser.add_argument("--data", type=Path, default=None,
                        help="a dataset written before (skips writing one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="windpipe-reg-") as tmp:
        root = args.data
        if root is None:
            root = Path(tmp) / "data"
            write_synthetic_dataset(root, cells=args.cells, cycles=args.cycles,
                                    rows_per_cycle=args.rows_per_cycle)
        footer_floor(root)  # warm the page cache: both sides read warm files
        n_parquet, floor_s = footer_floor(root)
        version_id, n_segments, reg_s = register_once(root, work=Path(tmp) / "catalog")
    print(f"segments: {n_segments} ({n_parquet} parquet, {n_segments - n_parquet} zarr)")
    print(f"footer floor   {floor_s:8.3f} s  {floor_s / max(n_parquet, 1) * 1e6:8.1f} us/parquet "
          f"segment  {floor_s / max(n_segments, 1) * 1e6:8.1f} us/segment")
    print(f"registration   {reg_s:8.3f} s  {reg_s / max(n_segments, 1) * 1e6:8.1f} us/segment")
    print(f"ratio          {reg_s / max(floor_s, 1e-9):8.1f} x the floor   ({version_id})")


if __name__ == "__main__":
    main()
