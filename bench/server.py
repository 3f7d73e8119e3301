"""A windpipe deployment for the benchmarks: catalog + Flight server in their own process.

The server process (spawned, so nothing is shared with the client) creates a SQLite
catalog in a temporary directory, registers the workload's dataset, makes a split
with everything in ``train`` and the workload's plan, and serves it with the real
Flight server and the real catalog app (REST) on free loopback ports; with
``tier_bytes`` the Flight server shares a tier of decoded blocks with this host.
Setup is not timed. Once set up the process runs as ``windpipe serve`` does (startup
heap frozen, the allocator trimmer started), trimmed once first: the setup's freed heap
is not counted as the server's.

:func:`server_figures` gives the server's own numbers: ``server_peak_rss_bytes``
(``ru_maxrss`` of the server process), ``server_cpu_s``, ``server_base_rss_bytes``
(RSS once ready, before any chunk was loaded), ``cache_budget_bytes``,
``cache_peak_bytes`` and ``storage_bytes`` (decoded bytes read from storage).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow.parquet as pq
from pydantic import SecretStr
from sqlalchemy.orm import sessionmaker

from bench.workload import INPUTS, TARGETS, Workload
from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.catalog.plans import create_plan
from windpipe.catalog.service import create_split, register_version
from windpipe.flight_server.runner import start_flight_server
from windpipe.migrations import upgrade_database
from windpipe.services.allocator_trim import AllocatorTrimmer, trim_allocators
from windpipe.services.contract.configs import LoaderConfig, ValidationConfig
from windpipe.services.database import create_engine
from windpipe.services.logging import configure_logging
from windpipe.services.planning.sizes import chunk_row_bytes
from windpipe.services.runtime import freeze_startup_heap
from windpipe.services.settings import Settings

__all__ = [
    "MiB", "ServerHandle", "data_bytes", "pss_bytes", "rusage", "server_figures",
    "working_set_bytes",
]

MiB = 1 << 20
_SECRET = "windpipe-bench-secret"


def data_bytes(w: Workload) -> int:
    """Bytes of the workload's streams as cached chunks (float32 inputs + targets)."""
    return int(sum(w.stream_rows)) * chunk_row_bytes(len(INPUTS), len(TARGETS))


def working_set_bytes(w: Workload) -> int:
    """The most chunk bytes one batch of the workload's first epoch pins (parquet row groups
    its lanes touch, cached as float32 inputs + targets)."""
    per_row = chunk_row_bytes(len(INPUTS), len(TARGETS))
    bounds = []
    for path in w.stream_paths:
        meta = pq.ParquetFile(f"{w.root}/{path}").metadata
        group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        bounds.append((np.cumsum([0, *group_rows]), np.asarray(group_rows)))
    worst = 0
    for b in range(w.n_batches):
        touched: dict[tuple[int, int], int] = {}
        for s, o in zip(*w.lanes(0, b), strict=True):
            starts, rows = bounds[int(s)]
            first = int(np.searchsorted(starts, o, side="right")) - 1
            last = int(np.searchsorted(starts, o + w.seq_len, side="right")) - 1
            for c in range(first, min(last, len(rows) - 1) + 1):
                touched[(int(s), c)] = int(rows[c])
        worst = max(worst, sum(touched.values()) * per_row)
    return worst


def pss_bytes(pid: int | None = None) -> int:
    """Proportional set size of a process (shared pages split among their users)."""
    return int(psutil.Process(pid).memory_full_info().pss)


def rusage() -> dict[str, float]:
    """This process's peak RSS, CPU seconds and RSS now."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_bytes": me.ru_maxrss * 1024, "cpu_s": me.ru_utime + me.ru_stime,
            "rss_bytes": psutil.Process().memory_info().rss}


def _server_main(root: str, config_json: dict[str, Any], cache_bytes: int,
                 options: dict[str, Any], conn: Any) -> None:
    """The server process: catalog in SQLite, register, split, plan, serve; obey ``conn``."""
    configure_logging(level="WARNING")
    with tempfile.TemporaryDirectory(prefix="windpipe-bench-") as tmp:
        url = f"sqlite:///{tmp}/catalog.db"
        t0 = time.perf_counter()
        upgrade_database(url)
        engine = create_engine(url)
        ctx = CatalogContext(sessions=sessionmaker(engine, expire_on_commit=False))
        version = register_version(ctx, "bench", root=Path(root).resolve().as_uri(),
                                   manifest="manifest.parquet").value
        split = create_split(ctx, version.id, ValidationConfig.sample(fraction=0.0)).value
        plan = create_plan(ctx, split.id, LoaderConfig.model_validate(config_json)).value
        settings = Settings(data_dir=Path(tmp), database_url=url, host="127.0.0.1",
                            flight_host="127.0.0.1", ticket_secret=SecretStr(_SECRET),
                            log_level="WARNING", tier_dir=Path(tmp) / "tier",
                            allowed_roots=(str(Path(root).resolve()),),
                            **{"tier_bytes": 0, **options})
        running = start_flight_server(
            settings, backend=DatabaseBackend.from_settings(settings, engine=engine), port=0,
            cache_bytes=cache_bytes)
        catalog = start_catalog_server(
            settings.model_copy(update={"flight_locations": (running.location,)}), port=0)
        running.server.plans.get(plan.id)  # load the plan now, not inside the timed part
        # as `windpipe serve` runs once started (its trimmer every allocator_trim_s), and
        # trimmed once now: a deployment registers and plans long before a job trains,
        # and by then its trimmer has handed the setup's freed heap back
        freeze_startup_heap()
        trim_allocators()
        trimmer = AllocatorTrimmer(interval_s=settings.allocator_trim_s)
        trimmer.start()
        conn.send({"location": running.location, "catalog_url": catalog.url,
                   "plan_id": plan.id, "n_batches": int(plan.n_batches),
                   "tier_dir": str(Path(tmp) / "tier"), "setup_s": time.perf_counter() - t0,
                   **{f"base_{k}": v for k, v in rusage().items()}})
        try:
            while True:
                msg = conn.recv()
                if msg == "stats":
                    conn.send({**rusage(), "pss_bytes": pss_bytes(),
                               "cache": running.server.cache.stats().as_dict()})
                elif msg == "stop":
                    break
        finally:
            trimmer.stop()
            catalog.stop(grace_s=5.0)
            running.stop(grace_s=5.0)
            engine.dispose()
            conn.send("stopped")


@dataclass
class ServerHandle:
    """A windpipe server process serving the workload's plan."""

    process: Any
    conn: Any
    location: str
    catalog_url: str
    plan_id: str
    n_batches: int
    cache_bytes: int
    ready: dict[str, Any]

    @classmethod
    def start(cls, w: Workload, *, cache_bytes: int, config: LoaderConfig | None = None,
              timeout_s: float = 600.0, **options: Any) -> ServerHandle:
        """Spawn the server and wait until it serves the plan (``config``: default the
        workload's own; ``options``: ``Settings`` fields such as ``tier_bytes``)."""
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        plan = (config or w.config()).model_dump(mode="json")
        proc = ctx.Process(target=_server_main,
                           args=(w.root, plan, cache_bytes, options, child),
                           daemon=True, name="windpipe-bench-server")
        proc.start()
        child.close()
        if not parent.poll(timeout_s):
            proc.terminate()
            msg = "the windpipe bench server did not start in time"
            raise RuntimeError(msg)
        try:
            ready = parent.recv()
        except EOFError:
            proc.join(5)
            msg = f"the windpipe bench server died during setup (exit {proc.exitcode})"
            raise RuntimeError(msg) from None
        return cls(process=proc, conn=parent, location=ready["location"],
                   catalog_url=ready["catalog_url"], plan_id=ready["plan_id"],
                   n_batches=ready["n_batches"], cache_bytes=cache_bytes, ready=ready)

    def stats(self) -> dict[str, Any]:
        """The server's rusage, PSS and cache statistics now."""
        self.conn.send("stats")
        out: dict[str, Any] = self.conn.recv()
        return out

    def stop(self) -> dict[str, Any]:
        """Final statistics, then stop and reap the process."""
        final = self.stats()
        try:
            self.conn.send("stop")
            if self.conn.poll(30):
                self.conn.recv()
        finally:
            self.process.join(30)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(5)
        return final

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process.is_alive():
            self.stop()


def server_figures(server: ServerHandle, final: dict[str, Any]) -> dict[str, Any]:
    """What the server process spent and held (see the module docstring)."""
    cache = final["cache"]
    return {
        "server_peak_rss_bytes": int(final["peak_rss_bytes"]),
        "server_cpu_s": float(final["cpu_s"]),
        "server_base_rss_bytes": int(server.ready["base_rss_bytes"]),
        "server_setup_s": float(server.ready["setup_s"]),
        "cache_budget_bytes": int(cache["budget_bytes"]),
        "cache_peak_bytes": int(cache["peak_bytes"]),
        "storage_bytes": int(cache["bytes_read"]),
        "cache_hits": int(cache["hits"]), "cache_misses": int(cache["misses"]),
        "server_overhead_bytes": int(final["peak_rss_bytes"]) - int(cache["peak_bytes"]),
    }
