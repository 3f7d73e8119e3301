"""``python -m bench.jax_throughput``: JAX batches against the numpy pass they are made of.

One synthetic dataset, one shuffled plan, a catalog and a Flight server with a host tier
in this process, and contenders, each a client in its own process, reading the same
batches epoch after epoch, over the same-host path (``local``: built in the client from
the tier) and over Flight:

* ``numpy``: the numpy pass ``windpipe.jax`` reads (``windpipe.sdk._arrays``: the batches built
  into 64-byte-aligned memory), each batch's ``target_valid`` computed;
* ``numpy-dense`` (context, not a target): the same numpy pass, each batch made
  C-contiguous as XLA needs it (``ArrayBatch.dense()``: ``inputs`` / ``targets`` copied
  out of the window block, ``target_valid`` computed), the host work a JAX batch pays
  before placement;
* ``jax``: ``windpipe.jax.loader(plan)`` (``windpipe.sdk._jax.JaxLoader``) on the CPU device: the
  same batches as ``jax.Array`` s (``inputs`` / ``targets`` copied out of the window
  block and ``target_valid`` computed on the host, the arrays then the numpy memory
  itself where aligned), read ahead in a thread, every array of ``batch.arrays()``
  waited for (``jax.block_until_ready``);
* ``torch``: ``plan.batches()`` (torch tensors), each batch's ``target_valid``.

Reported: tokens/s after the first batch (the first pays the compiles and the opening),
the ratio to ``numpy``, the same per CPU-second of the contender's process (every
thread: what a shared machine's load moves least), the first batch's seconds, each
process's peak RSS, and a checksum (valid targets counted) that must be the same for
all.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.runner import start_flight_server
from windpipe.sdk import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["CONTENDERS", "main"]

# (reader, transport)
CONTENDERS = (("numpy", "local"), ("numpy-dense", "local"), ("jax", "local"),
              ("torch", "local"),
              ("numpy", "flight"), ("jax", "flight"))


def _config(batch_size: int, seq_len: int) -> LoaderConfig:
    return LoaderConfig(
        default_window=WindowConfig(batch_size=batch_size, seq_len=seq_len),
        strategy="shuffled", seed=1,
        inputs={"cycling": ("current_a", "temperature_c", "soc_pct")},
        targets={"cycling": ("voltage_v",)},
        scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),
                 ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0),
                 ScalingSpec(column="soc_pct", input_min=0.0, input_max=100.0),
                 ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2)))


def _numpy(plan: Any, epoch: int, transport: str) -> Iterator[tuple[int, int]]:
    from windpipe.sdk._arrays import AlignedMemory, ArrayBatch, array_batches  # noqa: PLC0415

    source = plan._source(epoch=epoch, progress=False, transport=transport)
    for batch in array_batches(source.records(epoch=epoch, rank=0, world_size=1,
                                              start_batch=0, memory=AlignedMemory())):
        assert isinstance(batch, ArrayBatch)
        yield batch.mask.size, int(batch.target_valid.sum())


def _numpy_dense(plan: Any, epoch: int, transport: str) -> Iterator[tuple[int, int]]:
    from windpipe.sdk._arrays import AlignedMemory, ArrayBatch, array_batches  # noqa: PLC0415

    source = plan._source(epoch=epoch, progress=False, transport=transport)
    for batch in array_batches(source.records(epoch=epoch, rank=0, world_size=1,
                                              start_batch=0, memory=AlignedMemory())):
        assert isinstance(batch, ArrayBatch)
        arrays = batch.dense()
        yield arrays["mask"].size, int(arrays["target_valid"].sum())


def _jax(plan: Any, epoch: int, transport: str) -> Iterator[tuple[int, int]]:
    import jax  # noqa: PLC0415

    from windpipe.sdk._jax import JaxLoader  # noqa: PLC0415

    for batch in JaxLoader(plan, epoch, device=jax.devices("cpu")[0], transport=transport):
        arrays = jax.block_until_ready(batch.arrays())
        # counted on the host (a CPU array's memory): a jax reduction would compile per shape
        yield arrays["mask"].size, int(np.asarray(arrays["target_valid"]).sum())


def _torch(plan: Any, epoch: int, transport: str) -> Iterator[tuple[int, int]]:
    for batch in plan.batches(epoch, progress=False, transport=transport):
        yield batch.mask.numel(), int(batch.target_valid.sum())


def _run(name: str, transport: str, url: str, plan_id: str, epochs: int, out: Any) -> None:
    warnings.simplefilter("ignore")
    passes = {"numpy": _numpy, "numpy-dense": _numpy_dense, "jax": _jax,
              "torch": _torch}[name]
    t0 = time.perf_counter()
    with Catalog(url) as cat:
        plan = cat.plan(plan_id)
        tokens = batches = checksum = 0
        first = start = cpu = 0.0
        for epoch in range(epochs):
            for n_tokens, valid in passes(plan, epoch, transport):
                if not first:
                    first = time.perf_counter() - t0
                    start = time.perf_counter()
                    cpu = time.process_time()
                else:
                    tokens += n_tokens
                batches += 1
                checksum += valid
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu
    out.put({"name": f"{name} {transport}", "batches": batches, "tokens": tokens,
             "seconds": seconds, "cpu_seconds": cpu_seconds, "first_batch_seconds": first,
             "checksum": checksum, "peak_rss_bytes": _peak_rss()})


def _peak_rss() -> int:
    """This process's peak RSS since its exec (``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-cycle", type=int, default=20000)
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=40,
                        help="passes over the plan (default %(default)s: shorter runs vary by 3x)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    names = [f"{n} {t}" for n, t in CONTENDERS]
    parser.add_argument("--only", nargs="+", choices=names, default=names,
                        help="these contenders only ('numpy local', the baseline, always runs)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="jax-bench-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        data = write_synthetic_dataset(base / "data", cells=args.cells, cycles=6,
                                       rows_per_cycle=args.rows_per_cycle, seed=0)
        settings = Settings(data_dir=base / "state", port=0, flight_port=0,
                            log_level="WARNING", cache_bytes=256 << 20, tier_bytes=1 << 30,
                            allowed_roots=(str(data.path),))
        flight = start_flight_server(settings, backend=DatabaseBackend.from_settings(settings))
        stack.callback(flight.stop, grace_s=5.0)
        settings = settings.model_copy(update={"flight_locations": (flight.location,)})
        catalog = start_catalog_server(settings, port=0)
        stack.callback(catalog.stop, grace_s=5.0)
        with Catalog(catalog.url) as cat:
            ver = cat.register("bench", root=data.path.as_uri(), manifest="manifest.parquet")
            split = ver.split(ValidationConfig.sample(fraction=0.2, seed=1))
            plan = split.plan(_config(args.batch_size, args.seq_len))
            plan.transport("local")  # warms the tier once, untimed
        ctx = mp.get_context("spawn")
        results = []
        chosen = {"numpy local", *args.only}
        for name, transport in CONTENDERS:
            if f"{name} {transport}" not in chosen:
                continue
            out = ctx.Queue()
            proc = ctx.Process(target=_run, args=(name, transport, catalog.url, plan.id,
                                                  args.epochs, out))
            proc.start()
            results.append(out.get(timeout=900))
            proc.join(timeout=30)
    base = next(r for r in results if r["name"] == "numpy local")
    base_rate, base_cpu = base["tokens"] / base["seconds"], base["tokens"] / base["cpu_seconds"]
    print(f"plan {args.batch_size}x{args.seq_len}, {args.epochs} epochs, "
          f"{results[0]['batches']} batches, python {sys.version.split()[0]}")
    print("| contender | M tokens/s | x numpy local | M tokens/CPU-s | x numpy local (CPU) "
          "| first batch s | peak RSS MiB | checksum |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        rate, per_cpu = r["tokens"] / r["seconds"], r["tokens"] / r["cpu_seconds"]
        r["tokens_per_s"], r["ratio_to_numpy"] = rate, rate / base_rate
        r["tokens_per_cpu_s"], r["cpu_ratio_to_numpy"] = per_cpu, per_cpu / base_cpu
        print(f"| {r['name']} | {rate / 1e6:.1f} | {rate / base_rate:.2f} | "
              f"{per_cpu / 1e6:.1f} | {per_cpu / base_cpu:.2f} | "
              f"{r['first_batch_seconds']:.2f} | {r['peak_rss_bytes'] / 2**20:.0f} | "
              f"{r['checksum']} |")
    if len({r["checksum"] for r in results}) != 1 or len({r["batches"] for r in results}) != 1:
        print("the contenders read different batches", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
