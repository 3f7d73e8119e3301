"""Plan creation time against plan size, on SQLite and PostgreSQL.

For each size, a dataset of 100 one-column streams is registered and split (not
timed), then ``catalog.plans.create_plan`` makes a plan of exactly ``windows``
one-row windows (``batch_size=1, seq_len=1``: one window = one unit = one stored
row); the timed part is validation, scheduling and storing the plan, its streams
and its units in one transaction. PostgreSQL runs on a scratch database created on
``127.0.0.1:5432`` (user ``postgres``) and dropped afterwards; when the server is
unreachable those rows carry an ``error`` instead of ``seconds``.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["PG_ADMIN_URL", "planning_times", "write_planning_dataset"]

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
def _postgres_database() -> Iterator[str]:
    import psycopg  # noqa: PLC0415

    name = f"wp_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _sqlite_database(work_dir: Path) -> Iterator[str]:
    path = work_dir / f"catalog-{uuid.uuid4().hex[:8]}.db"
    try:
        yield f"sqlite:///{path}"
    finally:
        path.unlink(missing_ok=True)


def _time_plan(url: str, root: Path, windows: int) -> float:
    from sqlalchemy.orm import sessionmaker  # noqa: PLC0415

    from catalog.plans import create_plan  # noqa: PLC0415
    from catalog.service import CatalogContext, create_split, register_version  # noqa: PLC0415
    from contract.configs import LoaderConfig, ValidationConfig, WindowConfig  # noqa: PLC0415
    from migrations import upgrade_database  # noqa: PLC0415
    from services.database import create_engine  # noqa: PLC0415

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
                      else _postgres_database())
                with db as url:
                    row["seconds"] = _time_plan(url, root, windows)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            out.append(row)
        shutil.rmtree(root, ignore_errors=True)
    return out
