"""Plan creation time against plan size, on SQLite and PostgreSQL.

For each size, a dataset of 100 one-column streams is registered and split (not
timed), then ``windpipe.catalog.plans.create_plan`` makes a plan of exactly ``windows``
one-row windows (``batch_size=1, seq_len=1``: one window = one unit); the timed
part is validation, planning and storing the plan in one transaction. PostgreSQL
runs on a scratch database created on ``127.0.0.1:5432`` (user ``postgres``) and
dropped afterwards; when the server is unreachable those rows carry an ``error``
instead of ``seconds``.

``python -m bench.planning --against REV`` times the same plans side by side with the
code of git revision ``REV`` (checked out into a temporary worktree): for each size
and database, runs alternate between the two trees, each in a fresh process on a
fresh database, and the table reports the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.databases import fresh_database

__all__ = ["PG_ADMIN_URL", "compare_revision", "planning_times", "write_planning_dataset"]

PG_ADMIN_URL = os.environ.get("WINDPIPE_BENCH_PG_ADMIN_URL",
                              "postgresql://postgres@127.0.0.1:5432/postgres")
N_STREAMS = 100


def write_planning_dataset(root: Path, windows: int) -> Path:
    """100 streams whose one-row windows add up to exactly ``windows``."""
    root.mkdir(parents=True, exist_ok=True)
    per, extra = divmod(windows, N_STREAMS)
    rows: dict[str, list[Any]] = {k: [] for k in ("set_id", "cell_id", "cidx", "protocol",
                                                  "segment_path")}
    for s in range(N_STREAMS):
        n = per + (1 if s < extra else 0) + 1  # N rows give N-1 one-row windows
        rel = f"seg/{s:03d}.parquet"
        (root / "seg").mkdir(exist_ok=True)
        pq.write_table(pa.table({"v": np.arange(n, dtype=np.float32)}), root / rel,
                       use_dictionary=False)
        for key, value in (("set_id", "a"), ("cell_id", f"c{s:03d}"), ("cidx", 0),
                           ("protocol", "cycling"), ("segment_path", rel)):
            rows[key].append(value)
    pq.write_table(pa.table(rows), root / "manifest.parquet")
    return root


@contextmanager
def _sqlite_database(work_dir: Path) -> Iterator[str]:
    path = work_dir / f"catalog-{uuid.uuid4().hex[:8]}.db"
    try:
        yield f"sqlite:///{path}"
    finally:
        path.unlink(missing_ok=True)


def _time_plan(url: str, root: Path, windows: int) -> float:
    from sqlalchemy.orm import sessionmaker  # noqa: PLC0415

    from windpipe.catalog.context import CatalogContext  # noqa: PLC0415
    from windpipe.catalog.plans import create_plan  # noqa: PLC0415
    from windpipe.catalog.service import create_split, register_version  # noqa: PLC0415
    from windpipe.migrations import upgrade_database  # noqa: PLC0415
    from windpipe.services.contract.configs import LoaderConfig, ValidationConfig, WindowConfig  # noqa: PLC0415
    from windpipe.services.database import create_engine  # noqa: PLC0415

    upgrade_database(url)
    engine = create_engine(url)
    try:
        ctx = CatalogContext(sessions=sessionmaker(engine, expire_on_commit=False))
        version = register_version(ctx, "planning", root=root.resolve().as_uri(),
                                   manifest="manifest.parquet").value
        split = create_split(ctx, version.id, ValidationConfig.sample(fraction=0.0)).value
        config = LoaderConfig(default_window=WindowConfig(batch_size=1, seq_len=1),
                              inputs={"cycling": ("v",)}, targets={"cycling": ("v",)})
        t0 = time.perf_counter()
        plan = create_plan(ctx, split.id, config).value
        seconds = time.perf_counter() - t0
        if plan.n_units != windows:
            msg = f"planned {plan.n_units} windows, expected {windows}"
            raise RuntimeError(msg)
        return seconds
    finally:
        engine.dispose()


def planning_times(sizes: Sequence[int] = (10_000, 100_000, 1_000_000), *,
                   work_dir: Path) -> list[dict[str, Any]]:
    """``[{windows, database, seconds}]`` for each size on SQLite and PostgreSQL."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    for windows in sizes:
        root = write_planning_dataset(work_dir / f"data-{windows}", windows)
        for database in ("sqlite", "postgresql"):
            row: dict[str, Any] = {"windows": int(windows), "database": database}
            try:
                db = (_sqlite_database(work_dir) if database == "sqlite"
                      else fresh_database(PG_ADMIN_URL))
                with db as url:
                    row["seconds"] = _time_plan(url, root, windows)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            out.append(row)
        shutil.rmtree(root, ignore_errors=True)
    return out


_TIME_ONE = (
    "import sys; from pathlib import Path; from bench.planning import _time_plan; "
    "print('SECONDS', _time_plan(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))"
)
_REPO = Path(__file__).resolve().parents[1]


def _time_in_tree(tree: Path, url: str, root: Path, windows: int) -> float:
    """``_time_plan`` run by the code of ``tree`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", _TIME_ONE, url, str(root), str(windows)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SECONDS ")]
    if proc.returncode != 0 or not lines:
        msg = f"timing in {tree} failed: {(proc.stderr or proc.stdout)[-1500:]}"
        raise RuntimeError(msg)
    return float(lines[-1].split()[1])


def compare_revision(rev: str, sizes: Sequence[int], *, work_dir: Path,
                     repeats: int = 3) -> list[dict[str, Any]]:
    """Plan creation of this tree and of git revision ``rev``, alternating, in one run.

    Returns ``[{windows, database, this_s, rev_s, ratio}]`` (medians of ``repeats``;
    ``ratio`` = this / rev, below 1 is faster).
    """
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="windpipe-rev-") as tmp:
        old = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), rev], cwd=_REPO,
                       check=True, capture_output=True)
        try:
            for windows in sizes:
                root = write_planning_dataset(work_dir / f"data-{windows}", windows)
                for database in ("sqlite", "postgresql"):
                    times: dict[str, list[float]] = {"this": [], "rev": []}
                    for _ in range(repeats):
                        for name, tree in (("this", _REPO), ("rev", old)):
                            db = (_sqlite_database(work_dir) if database == "sqlite"
                                  else fresh_database(PG_ADMIN_URL))
                            with db as url:
                                times[name].append(_time_in_tree(tree, url, root, windows))
                    this, then = statistics.median(times["this"]), statistics.median(times["rev"])
                    out.append({"windows": int(windows), "database": database,
                                "this_s": this, "rev_s": then, "ratio": this / then,
                                "runs": times})
                shutil.rmtree(root, ignore_errors=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=_REPO,
                           check=False, capture_output=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.planning [--against REV] [--sizes N ...] [--json PATH]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.planning",
                                     description="plan creation time against plan size")
    parser.add_argument("--against", metavar="REV", help="git revision to time side by side")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=Path("bench/out/planning"))
    parser.add_argument("--json", type=Path, dest="json_path")
    args = parser.parse_args(argv)
    if args.against:
        rows = compare_revision(args.against, args.sizes, work_dir=args.work_dir,
                                repeats=args.repeats)
        print(f"| windows | database | this (s) | {args.against} (s) | this / {args.against} |")
        print("|---:|---|---:|---:|---:|")
        for r in rows:
            print(f"| {r['windows']:,} | {r['database']} | {r['this_s']:.2f} | "
                  f"{r['rev_s']:.2f} | {r['ratio']:.2f} |")
    else:
        rows = planning_times(args.sizes, work_dir=args.work_dir)
        for r in rows:
            print(r)
    if args.json_path:
        args.json_path.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
