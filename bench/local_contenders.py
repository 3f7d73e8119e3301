"""windpipe on the same host: batches built in the training process from the host's tier.

The bench server (``bench.server``) runs with a tier; the client is the SDK itself,
``Catalog(url).plan(id).batches(epoch, transport="local")``: the server decodes each
block once into the tier, the client maps it and builds every batch with the
materializer, as a training job on the Flight server's host would. The warm (the
server filling the tier) is done once before the timed part and reported.

:func:`local_concurrency` runs 1, 2, 4 such consumer processes on one fresh server
each: aggregate tokens/s, bytes read from storage, the consumers' summed PSS
(proportional set size: shared pages split among the processes that map them), the
part of it their reading added (the tier's pages; the rest is each interpreter and
its libraries) and the tier's size.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.measure import consume
from bench.server import MiB, ServerHandle, data_bytes, pss_bytes, rusage, server_figures
from bench.workload import EPOCHS, Workload
from windpipe.sdk import Catalog, Plan

__all__ = ["local_concurrency", "windpipe_local"]

_TIER_MARGIN = 64 * MiB


def _passes(plan: Plan) -> Iterator[tuple[Any, ...]]:
    """Pass after pass of ``plan``: a handle made just before the clock starts, as the
    careful loader maps its file before it (setup, not per-batch work). Reading the plan
    also answers the SDK's liveness check for the next second (``windpipe.sdk._state``), so a run
    of a few hundred milliseconds sends the catalog no request, as a training loop sends
    one a second at most."""
    epoch = 0
    while True:
        for batch in plan.batches(epoch=epoch % EPOCHS, transport="local", progress=False):
            yield batch.inputs, batch.targets, batch.mask
        epoch += 1


def _tier_used(server: ServerHandle) -> int:
    return sum(p.stat().st_size for p in Path(server.ready["tier_dir"]).glob("*.wpb"))


def windpipe_local(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The same-host path: ``plan.batches(transport="local")`` in the training process."""
    budget = data_bytes(w) + _TIER_MARGIN
    with ServerHandle.start(w, cache_bytes=budget, tier_bytes=budget) as server:
        cat = Catalog(server.catalog_url)
        try:
            t0 = time.perf_counter()
            assert cat.plan(server.plan_id).transport("local") == "local"  # warms the tier
            warm_s = time.perf_counter() - t0
            plan = cat.plan(server.plan_id)  # the handle, read live: no request in the run
            result = consume(_passes(plan), max_batches=max_batches, max_seconds=max_seconds)
            result["client_pss_bytes"] = pss_bytes()
        finally:
            cat.close()
        result["tier_bytes"] = _tier_used(server)
        final = server.stop()
    return {**result, **server_figures(server, final), "warm_seconds": warm_s,
            "batches_per_pass": server.n_batches, "consumer": "sdk plan.batches(local)"}


def _consumer_main(url: str, plan_id: str, max_seconds: float, go: Any, conn: Any) -> None:
    import torch  # noqa: PLC0415 - not in the spawned process's import of this module

    torch.set_num_threads(1)
    cat = Catalog(url)
    plan = cat.plan(plan_id)
    plan.transport("local")  # attach the tier before the clock starts
    before = pss_bytes()
    conn.send("ready")
    go.wait()
    result = consume(_passes(plan), max_batches=1 << 30, max_seconds=max_seconds)
    result.update(pss_bytes=pss_bytes(), pss_before_bytes=before, **rusage())
    cat.close()
    conn.send(result)


def local_concurrency(w: Workload, *, consumers: tuple[int, ...] = (1, 2, 4),
                      max_seconds: float = 10.0) -> list[dict[str, Any]]:
    """N same-host consumer processes sharing one tier (see the module docstring)."""
    ctx = mp.get_context("spawn")
    budget = data_bytes(w) + _TIER_MARGIN
    out: list[dict[str, Any]] = []
    for n in consumers:
        with ServerHandle.start(w, cache_bytes=budget, tier_bytes=budget) as server:
            go = ctx.Event()
            pipes, procs = [], []
            for _ in range(n):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_consumer_main, daemon=True,
                                   args=(server.catalog_url, server.plan_id, max_seconds, go,
                                         child))
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            for pipe in pipes:
                if not pipe.poll(300) or pipe.recv() != "ready":
                    msg = "a bench consumer did not start"
                    raise RuntimeError(msg)
            t0 = time.perf_counter()
            go.set()
            results = [pipe.recv() for pipe in pipes]
            wall = time.perf_counter() - t0
            for proc in procs:
                proc.join(30)
            tier = _tier_used(server)
            final = server.stop()
        batches = sum(r["batches"] for r in results)
        out.append({
            "consumers": n, "batches": batches, "seconds": wall,
            "tokens_per_s": batches * w.tokens_per_batch / wall if wall else 0.0,
            "storage_bytes": int(final["cache"]["bytes_read"]),
            "consumers_pss_bytes": sum(int(r["pss_bytes"]) for r in results),
            # what reading added: the tier's pages, split among the processes mapping them
            "consumers_pss_added_bytes": sum(int(r["pss_bytes"]) - int(r["pss_before_bytes"])
                                             for r in results),
            "consumers_cpu_s": sum(float(r["cpu_s"]) for r in results),
            "server_pss_bytes": int(final["pss_bytes"]),
            "tier_bytes": tier,
        })
    return out
