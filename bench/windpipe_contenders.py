"""windpipe as a contender: a real catalog + Flight server in its own process, a client here.

The server process (spawned, so nothing is shared with the client) creates a SQLite
catalog in a temporary directory, registers the workload's dataset, makes a split
with everything in ``train`` and a plan with the workload's shape (sequential plain
windows, ``drop_incomplete=True``, phase 0), and serves it with
``flight_server.runner.start_flight_server`` on a free loopback port. Setup is not
timed. The client consumes with ``pyarrow.flight`` and turns each record batch into
a ``Batch`` with ``sdk.batch_from_arrow``, exactly what ``plan.batches()`` does (torch
tensors over the Arrow buffers, no copy; provenance decoded only when read).

Each contender returns the runner's record plus the server's own figures:
``server_peak_rss_bytes`` (``ru_maxrss`` of the server process), ``server_cpu_s``,
``server_base_rss_bytes`` (RSS once ready, before any chunk was loaded),
``cache_budget_bytes``, ``cache_peak_bytes`` and ``storage_bytes`` (decoded bytes
read from storage).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import resource
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from bench.measure import consume
from bench.workload import INPUTS, TARGETS, Workload
from planning.sizes import chunk_row_bytes

__all__ = ["WINDPIPE_CONTENDERS", "ServerHandle", "concurrency", "plan_config"]

_MiB = 1 << 20
_SECRET = "windpipe-bench-secret"


def plan_config(w: Workload, *,
                data_access: Literal["windowed", "full_in_mem"] = "windowed") -> Any:
    """The ``LoaderConfig`` of the workload's schedule."""
    from contract.configs import LoaderConfig, WindowConfig  # noqa: PLC0415

    return LoaderConfig(
        split="train",
        default_window=WindowConfig(batch_size=w.batch_size, seq_len=w.seq_len,
                                    drop_incomplete=True),
        inputs={"cycling": INPUTS}, targets={"cycling": TARGETS},
        strategy="sequential", phase_shift=False, data_access=data_access,
    )


def data_bytes(w: Workload) -> int:
    """Bytes of the workload's streams as cached chunks (float32 inputs + targets)."""
    return int(sum(w.stream_rows)) * chunk_row_bytes(len(INPUTS), len(TARGETS))


def _rusage() -> dict[str, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_bytes": me.ru_maxrss * 1024, "cpu_s": me.ru_utime + me.ru_stime,
            "rss_bytes": psutil.Process().memory_info().rss}


def _server_main(root: str, config_json: dict[str, Any], cache_bytes: int, conn: Any) -> None:
    """The server process: catalog in SQLite, register, split, plan, serve; obey ``conn``."""
    from pydantic import SecretStr  # noqa: PLC0415
    from sqlalchemy.orm import sessionmaker  # noqa: PLC0415

    from catalog.plans import create_plan  # noqa: PLC0415
    from catalog.service import CatalogContext, create_split, register_version  # noqa: PLC0415
    from contract.configs import LoaderConfig, ValidationConfig  # noqa: PLC0415
    from flight_server.runner import start_flight_server  # noqa: PLC0415
    from migrations import upgrade_database  # noqa: PLC0415
    from services.database import create_engine  # noqa: PLC0415
    from services.logging import configure_logging  # noqa: PLC0415
    from services.settings import Settings  # noqa: PLC0415

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
        settings = Settings(data_dir=Path(tmp), database_url=url, flight_host="127.0.0.1",
                            ticket_secret=SecretStr(_SECRET), log_level="WARNING")
        running = start_flight_server(settings, engine=engine, port=0, cache_bytes=cache_bytes)
        running.server.plans.get(plan.id)  # load the plan now, not inside the timed part
        conn.send({"location": running.location, "plan_id": plan.id,
                   "n_batches": int(plan.n_batches), "setup_s": time.perf_counter() - t0,
                   **{f"base_{k}": v for k, v in _rusage().items()}})
        try:
            while True:
                msg = conn.recv()
                if msg == "stats":
                    conn.send({**_rusage(), "cache": running.server.cache.stats().as_dict()})
                elif msg == "stop":
                    break
        finally:
            running.stop(grace_s=5.0)
            engine.dispose()
            conn.send("stopped")


@dataclass
class ServerHandle:
    """A windpipe server process serving the workload's plan."""

    process: Any
    conn: Any
    location: str
    plan_id: str
    n_batches: int
    cache_bytes: int
    ready: dict[str, Any]

    @classmethod
    def start(cls, w: Workload, *, cache_bytes: int, timeout_s: float = 600.0) -> ServerHandle:
        """Spawn the server and wait until it serves the plan."""
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        config = plan_config(w).model_dump(mode="json")
        proc = ctx.Process(target=_server_main, args=(w.root, config, cache_bytes, child),
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
                   plan_id=ready["plan_id"], n_batches=ready["n_batches"],
                   cache_bytes=cache_bytes, ready=ready)

    def stats(self) -> dict[str, Any]:
        """The server's rusage and cache statistics now."""
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


def _server_figures(server: ServerHandle, final: dict[str, Any]) -> dict[str, Any]:
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


def _epoch_tensors(client: Any, plan_id: str, epoch: int) -> Iterator[tuple[Any, ...]]:
    """One epoch's batches as ``(inputs, targets, mask)`` torch tensors, decoded by the SDK.

    ``sdk.batch_from_arrow`` is what ``plan.batches()`` runs on every record batch:
    zero-copy tensors, provenance decoded only when read.
    """
    from contract.wire import FlightCommand  # noqa: PLC0415
    from sdk import batch_from_arrow  # noqa: PLC0415

    info = client.get_flight_info(FlightCommand(plan_id=plan_id, epoch=epoch).descriptor())
    for endpoint in info.endpoints:
        reader = client.do_get(endpoint.ticket)
        try:
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                batch = batch_from_arrow(chunk.data, chunk.app_metadata)
                yield batch.inputs, batch.targets, batch.mask
        finally:
            reader.cancel()


def _passes(client: Any, plan_id: str, *, first_epoch: int = 0) -> Iterator[tuple[Any, ...]]:
    epoch = first_epoch
    while True:
        yield from _epoch_tensors(client, plan_id, epoch)
        epoch += 1


def _client(location: str) -> Any:
    import pyarrow.flight as fl  # noqa: PLC0415

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    return fl.connect(location)


def _run(w: Workload, *, cache_bytes: int, max_batches: int, max_seconds: float,
         warm_pass: bool, warm_action: bool) -> dict[str, Any]:
    with ServerHandle.start(w, cache_bytes=cache_bytes) as server:
        client = _client(server.location)
        extra: dict[str, Any] = {}
        try:
            first_epoch = 0
            if warm_action:
                t0 = time.perf_counter()
                import pyarrow.flight as fl  # noqa: PLC0415

                from contract.wire import ACTION_WARM  # noqa: PLC0415

                body = json.dumps({"plan_id": server.plan_id}).encode()
                steps = list(client.do_action(fl.Action(ACTION_WARM, body)))
                extra["warm_seconds"] = time.perf_counter() - t0
                extra["warm_steps"] = len(steps)
            if warm_pass:
                t0 = time.perf_counter()
                for _ in _epoch_tensors(client, server.plan_id, 0):
                    pass
                extra["warm_seconds"] = time.perf_counter() - t0
                first_epoch = 1
            result = consume(_passes(client, server.plan_id, first_epoch=first_epoch),
                              max_batches=max_batches, max_seconds=max_seconds)
        finally:
            client.close()
        final = server.stop()
    return {**result, **extra, **_server_figures(server, final),
            "batches_per_pass": server.n_batches, "consumer": "sdk.batch_from_arrow"}


def windpipe_flight_warm(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None) -> dict[str, Any]:
    """Flight on loopback, cache warm (one unmeasured pass first), budget above the data."""
    budget = cache_bytes or data_bytes(w) + 64 * _MiB
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=True, warm_action=False)


def windpipe_flight_cold(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None) -> dict[str, Any]:
    """A fresh server whose cache budget is a quarter of the data: every pass reads storage."""
    budget = cache_bytes or max(16 * _MiB, data_bytes(w) // 4)
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=False, warm_action=False)


def windpipe_full_in_mem(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None) -> dict[str, Any]:
    """``data_access="full_in_mem"``: the split is warmed into the cache (``warm`` action)."""
    budget = cache_bytes or data_bytes(w) + 64 * _MiB
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=False, warm_action=True)


def _consumer_main(location: str, plan_id: str, max_seconds: float, go: Any, conn: Any) -> None:
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    client = _client(location)
    conn.send("ready")
    go.wait()
    result = consume(_passes(client, plan_id), max_batches=1 << 30, max_seconds=max_seconds)
    client.close()
    conn.send(result)


def concurrency(w: Workload, *, consumers: tuple[int, ...] = (1, 2, 4),
                max_seconds: float = 10.0) -> list[dict[str, Any]]:
    """Aggregate throughput and storage reads of N concurrent consumers of one plan.

    Each N gets a fresh server (budget above the data) and N consumer processes that
    start together at batch 0 of epoch 0 and read pass after pass for ``max_seconds``.
    ``storage_bytes`` is the cache's ``bytes_read``: with one shared cache it stays at
    one pass of the data whatever N is.
    """
    ctx = mp.get_context("spawn")
    out: list[dict[str, Any]] = []
    for n in consumers:
        with ServerHandle.start(w, cache_bytes=data_bytes(w) + 64 * _MiB) as server:
            go = ctx.Event()
            pipes, procs = [], []
            for _ in range(n):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_consumer_main, daemon=True,
                                   args=(server.location, server.plan_id, max_seconds, go, child))
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            for pipe in pipes:
                if not pipe.poll(120) or pipe.recv() != "ready":
                    msg = "a bench consumer did not start"
                    raise RuntimeError(msg)
            t0 = time.perf_counter()
            go.set()
            results = [pipe.recv() for pipe in pipes]
            wall = time.perf_counter() - t0
            for proc in procs:
                proc.join(30)
            final = server.stop()
        batches = sum(r["batches"] for r in results)
        out.append({
            "consumers": n, "batches": batches, "seconds": wall,
            "tokens_per_s": batches * w.tokens_per_batch / wall if wall else 0.0,
            "storage_bytes": int(final["cache"]["bytes_read"]),
            "server_peak_rss_bytes": int(final["peak_rss_bytes"]),
            "server_cpu_s": float(final["cpu_s"]),
        })
    return out


WINDPIPE_CONTENDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "windpipe_flight_warm": windpipe_flight_warm,
    "windpipe_flight_cold": windpipe_flight_cold,
    "windpipe_full_in_mem": windpipe_full_in_mem,
}
