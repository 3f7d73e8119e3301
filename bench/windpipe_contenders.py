"""windpipe over Flight as a contender: the bench server process (``bench.server``), a
client here.

The client consumes with ``pyarrow.flight`` and turns each record batch into a
``Batch`` with ``windpipe.sdk.batch_from_arrow``, exactly what ``plan.batches(transport="flight")``
does (torch tensors over the Arrow buffers, no copy; provenance decoded only when
read). Epochs cycle as the workload's do (``bench.workload.EPOCHS``), so every
contender reads the same windows in the same order. Each contender returns the
runner's record plus the server's own figures (``bench.server.server_figures``);
extra options (``build_ahead_bytes=...``, ``auto_blocks=False``) go to the server's
``Settings``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow.flight as fl

from bench.local_contenders import local_concurrency, windpipe_local
from bench.measure import consume
from bench.server import MiB, ServerHandle, data_bytes, server_figures, working_set_bytes
from bench.workload import EPOCHS, Workload
from windpipe.sdk import batch_from_arrow
from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.contract.wire import ACTION_WARM, FlightCommand

__all__ = ["WINDPIPE_CONTENDERS", "concurrency", "epoch_tensors", "local_concurrency"]


def _epoch_tensors(client: Any, plan_id: str, epoch: int) -> Generator[tuple[Any, ...]]:
    """One epoch's batches as ``(inputs, targets, mask)`` torch tensors, decoded by the SDK.

    ``windpipe.sdk.batch_from_arrow`` is what ``plan.batches()`` runs on every record batch:
    zero-copy tensors, provenance decoded only when read.
    """
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


def epoch_tensors(client: Any, plan_id: str, epoch: int) -> Generator[tuple[Any, ...]]:
    """One epoch's batches read as the Flight contenders read them (for other bench
    modules: the same client code, so their rows compare with these)."""
    return _epoch_tensors(client, plan_id, epoch)


def _passes(client: Any, plan_id: str) -> Iterator[tuple[Any, ...]]:
    epoch = 0
    while True:
        yield from _epoch_tensors(client, plan_id, epoch % EPOCHS)
        epoch += 1


def _client(location: str) -> Any:
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    return fl.connect(location)


def _run(w: Workload, *, cache_bytes: int, max_batches: int, max_seconds: float,
         warm_pass: bool, warm_action: bool, config: LoaderConfig | None = None,
         **options: Any) -> dict[str, Any]:
    with ServerHandle.start(w, cache_bytes=cache_bytes, config=config, **options) as server:
        client = _client(server.location)
        extra: dict[str, Any] = {}
        try:
            if warm_action:
                t0 = time.perf_counter()
                body = json.dumps({"plan_id": server.plan_id}).encode()
                steps = list(client.do_action(fl.Action(ACTION_WARM, body)))
                extra["warm_seconds"] = time.perf_counter() - t0
                extra["warm_steps"] = len(steps)
            if warm_pass:
                t0 = time.perf_counter()
                for _ in _epoch_tensors(client, server.plan_id, 0):
                    pass
                extra["warm_seconds"] = time.perf_counter() - t0
            result = consume(_passes(client, server.plan_id),
                             max_batches=max_batches, max_seconds=max_seconds)
        finally:
            client.close()
        final = server.stop()
    return {**result, **extra, **server_figures(server, final),
            "batches_per_pass": server.n_batches, "consumer": "windpipe.sdk.batch_from_arrow"}


def windpipe_flight_warm(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None, **options: Any) -> dict[str, Any]:
    """Flight on loopback, cache warm (one unmeasured pass first), budget above the data."""
    budget = cache_bytes or data_bytes(w) + 64 * MiB
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=True, warm_action=False, **options)


def windpipe_flight_cold(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None, **options: Any) -> dict[str, Any]:
    """A fresh server whose cache holds a quarter of the data, or one shuffled batch's chunks
    and a little read-ahead if that is more: passes read storage again."""
    budget = cache_bytes or max(16 * MiB, data_bytes(w) // 4, working_set_bytes(w) + 16 * MiB)
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=False, warm_action=False, **options)


def windpipe_flight_warm_sequential(
    w: Workload, *, max_batches: int, max_seconds: float, cache_bytes: int | None = None,
    **options: Any,
) -> dict[str, Any]:
    """As ``windpipe_flight_warm``, on the sequential plan of the same windows (3a)."""
    budget = cache_bytes or data_bytes(w) + 64 * MiB
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=True, warm_action=False, config=w.config(strategy="sequential"),
                **options)


def windpipe_full_in_mem(w: Workload, *, max_batches: int, max_seconds: float,
                         cache_bytes: int | None = None, **options: Any) -> dict[str, Any]:
    """``data_access="full_in_mem"``: the split is warmed into the cache (``warm`` action)."""
    budget = cache_bytes or data_bytes(w) + 64 * MiB
    return _run(w, cache_bytes=budget, max_batches=max_batches, max_seconds=max_seconds,
                warm_pass=False, warm_action=True, **options)


def _consumer_main(location: str, plan_id: str, max_seconds: float, go: Any, conn: Any) -> None:
    import torch  # noqa: PLC0415 - not in the spawned process's import of this module

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
        with ServerHandle.start(w, cache_bytes=data_bytes(w) + 64 * MiB) as server:
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
    "windpipe_local": windpipe_local,
    "windpipe_flight_warm": windpipe_flight_warm,
    "windpipe_flight_cold": windpipe_flight_cold,
    "windpipe_full_in_mem": windpipe_full_in_mem,
    "windpipe_flight_warm_sequential": windpipe_flight_warm_sequential,
}
