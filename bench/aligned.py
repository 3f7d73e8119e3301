"""``python -m bench.aligned``: aligned multi-protocol batches (SEMANTICS 9), side by side.

One synthetic dataset (cycling every cycle, HPPC and EIS on an irregular subset of
cycles), one ``align_by="alignment_key"`` shuffled plan, and three contenders, each in
its own process, reading the same batches (the plan's schedule, epoch after epoch):

* ``numpy_memmap_aligned``: what a careful user writes instead: each protocol's rows
  decoded once into one float32 ``.npy`` (inputs, then targets), memory-mapped; per
  batch and protocol one fancy-index gather of B windows of T+1 rows, padded where a
  key has fewer rows or no data (``-2.0`` / NaN / mask False), plus ``has_data``;
* ``windpipe_local``: ``plan.batches(transport="local")`` (the host's tier);
* ``windpipe_flight``: ``plan.batches(transport="flight")``.

Every contender yields per protocol ``inputs``, ``targets``, ``mask`` and ``has_data``
as torch tensors. The catalog and the Flight server run in this process; contenders
are clients. Reported: tokens/s (every lane of every part counts, padding included,
the same for all) after the first batch, the ratio to ``numpy_memmap_aligned``, the
time to the first batch (``startup_seconds``: connections, the plan, the maps) and each
contender process's peak RSS. Data preparation (decoding into ``.npy``, warming the
tier) is not timed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.runner import start_flight_server
from windpipe.sdk import AlignedBatch, Catalog, ValidationConfig
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["ALIGNED_CONTENDERS", "aligned_config", "main", "memmap_batches", "prepare_memmaps"]

INPUTS = {"cycling": ("current_a", "temperature_c", "soc_pct"), "eis": ("freq_hz",),
          "hppc": ("current_a", "soc_pct")}
TARGETS = {"cycling": ("voltage_v",), "eis": ("z_real_ohm", "z_imag_ohm"),
           "hppc": ("voltage_v",)}
Parts = dict[str, tuple[torch.Tensor, ...]]


def aligned_config(batch_size: int, seq_len: int) -> LoaderConfig:
    """The benchmarked plan: every protocol aligned by cell and cycle, shuffled."""
    return LoaderConfig(
        align_by="alignment_key", strategy="shuffled", inputs=INPUTS, targets=TARGETS,
        default_window=WindowConfig(batch_size=batch_size, seq_len=seq_len),
        window_by_protocol={"eis": WindowConfig(batch_size=batch_size, seq_len=16)},
    )


# -- the user's loader --------------------------------------------------------------------


def prepare_memmaps(artifact: PlanArtifact, root: Path, out: Path) -> list[Path]:
    """Each protocol's streams decoded once into ``out/<protocol>.npy`` (float32, inputs
    then targets, streams end to end in plan order); one path per protocol code."""
    st, spec = artifact.streams, artifact.spec
    paths = []
    for code, protocol in enumerate(st.protocols):
        columns = [*spec.inputs[protocol], *spec.targets[protocol]]
        frames = []
        for s in np.flatnonzero(st.protocol == code).tolist():
            for p in range(int(st.piece_ptr[s]), int(st.piece_ptr[s + 1])):
                table = pq.read_table(root / st.piece_path[p], columns=columns)
                frames.append(np.column_stack([
                    table[c].to_numpy(zero_copy_only=False) for c in columns
                ]).astype(np.float32))
        path = out / f"{protocol}.npy"
        np.save(path, np.concatenate(frames) if frames else np.zeros((0, len(columns)),
                                                                     np.float32))
        paths.append(path)
    return paths


def memmap_batches(artifact: PlanArtifact, npy: list[Path], epochs: int) -> Iterator[Parts]:
    """The aligned batches of ``epochs`` epochs from the memory-mapped ``.npy`` files."""
    st, spec = artifact.streams, artifact.spec
    data = [np.load(p, mmap_mode="r") for p in npy]
    base = np.zeros(st.count, dtype=np.int64)
    for code in range(len(st.protocols)):
        mine = np.flatnonzero(st.protocol == code)
        base[mine] = np.concatenate([[0], np.cumsum(st.n_rows[mine])[:-1]])
    c_in = [len(spec.inputs[p]) for p in st.protocols]
    for epoch in range(epochs):
        sched = artifact.epoch_schedule(epoch)
        parts: Parts = {}
        for g in range(sched.n_batches):
            code, t = int(sched.batch_protocol[g]), int(sched.batch_seq_len[g])
            lo, hi = int(sched.batch_lane_ptr[g]), int(sched.batch_lane_ptr[g + 1])
            s, o = sched.lane_stream[lo:hi], sched.lane_offset[lo:hi]
            has = s >= 0
            s0 = np.maximum(s, 0)
            row = o[:, None] + np.arange(t + 1)[None, :]
            ok = (o >= 0)[:, None] & (row < st.n_rows[s0][:, None])
            window = data[code][np.where(ok, base[s0][:, None] + row, 0)]
            x, y = window[:, :t, : c_in[code]], window[:, 1:, c_in[code]:]
            x = np.where(ok[:, :t, None] & ~np.isnan(x), x, np.float32(-2.0))
            y = np.where(ok[:, 1:, None], y, np.float32("nan"))
            parts[st.protocols[code]] = (torch.from_numpy(x), torch.from_numpy(y),
                                         torch.from_numpy(ok[:, 1:]), torch.from_numpy(has))
            if len(parts) == sched.parts:
                yield parts
                parts = {}


# -- the contenders, each in its own process ----------------------------------------------


def _windpipe(url: str, plan_id: str, epochs: int, transport: str) -> Iterator[Parts]:
    with Catalog(url) as cat:
        plan = cat.plan(plan_id)
        for epoch in range(epochs):
            for batch in plan.batches(epoch=epoch, transport=transport):
                assert isinstance(batch, AlignedBatch)
                yield {p: (batch.inputs[p], batch.targets[p], batch.mask[p], batch.has_data[p])
                       for p in batch.protocols}


def _run(name: str, job: dict[str, Any], queue: Any) -> None:
    if name == "numpy_memmap_aligned":
        artifact = PlanArtifact.from_ipc(Path(job["artifact"]).read_bytes())
        batches = memmap_batches(artifact, [Path(p) for p in job["npy"]], job["epochs"])
    else:
        batches = _windpipe(job["url"], job["plan_id"], job["epochs"],
                            name.removeprefix("windpipe_"))
    t0 = time.perf_counter()
    first = next(batches)  # connections, plan and maps: timed apart, as startup
    start = time.perf_counter()
    n = tokens = 0
    checksum = float(next(iter(first.values()))[0][0, 0, 0])
    for parts in batches:
        n += 1
        for x, *_ in parts.values():
            tokens += int(x.shape[0] * x.shape[1])
            checksum += float(x[0, 0, 0])
    seconds = time.perf_counter() - start
    queue.put({"name": name, "batches": n, "tokens": tokens, "seconds": seconds,
               "startup_seconds": start - t0, "checksum": checksum,
               "peak_rss_bytes": _peak_rss()})


def _peak_rss() -> int:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss`` would count the
    parent's memory at fork, which exec does not forget)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


ALIGNED_CONTENDERS = ("numpy_memmap_aligned", "windpipe_local", "windpipe_flight")


def _contender(name: str, job: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(name, job, queue), daemon=True)
    proc.start()
    try:
        result: dict[str, Any] = queue.get(timeout=900)
    finally:
        proc.join(timeout=30)
    result["tokens_per_s"] = result["tokens"] / result["seconds"] if result["seconds"] else 0.0
    return result


def run(*, cells: int, cycles: int, rows_per_cycle: int, batch_size: int, seq_len: int,
        epochs: int, work_dir: Path) -> dict[str, Any]:
    """Everything side by side in one run; returns the record :func:`main` prints."""
    data = write_synthetic_dataset(work_dir / "data", cells=cells, cycles=cycles,
                                   rows_per_cycle=rows_per_cycle, seed=1, zarr_fraction=0.0,
                                   hppc_every=2, eis_every=3, missed_tests=0.3)
    settings = Settings(data_dir=work_dir / "state", port=0, flight_port=0, log_level="WARNING",
                        cache_bytes=256 << 20, tier_bytes=1 << 30,
                        allowed_roots=(str(data.path),))
    with ExitStack() as stack:
        flight = start_flight_server(settings, backend=DatabaseBackend.from_settings(settings))
        stack.callback(flight.stop, grace_s=5.0)
        settings = settings.model_copy(update={"flight_locations": (flight.location,)})
        catalog = start_catalog_server(settings, port=0)
        stack.callback(catalog.stop, grace_s=5.0)
        with Catalog(catalog.url) as cat:
            version = cat.register("bench-aligned", root=data.path.as_uri(),
                                   manifest="manifest.parquet")
            split = version.split(ValidationConfig.sample(fraction=0.2, seed=1))
            plan = split.plan(aligned_config(batch_size, seq_len))
            plan.transport("local")  # warms the tier once, untimed
            raw = httpx.get(f"{catalog.url}/v1/plans/{plan.id}/artifact", timeout=60).content
        artifact_path = work_dir / "plan.arrow"
        artifact_path.write_bytes(raw)
        artifact = PlanArtifact.from_ipc(pa.py_buffer(raw))
        npy = prepare_memmaps(artifact, data.path, work_dir)
        job = {"url": catalog.url, "plan_id": plan.id, "epochs": epochs,
               "artifact": str(artifact_path), "npy": [str(p) for p in npy]}
        results = {name: _contender(name, job) for name in ALIGNED_CONTENDERS}
    baseline = results["numpy_memmap_aligned"]["tokens_per_s"] or 1.0
    for r in results.values():
        r["ratio_to_numpy"] = r["tokens_per_s"] / baseline
    return {"rows": data.n_rows, "batch_size": batch_size, "seq_len": seq_len,
            "protocols": list(artifact.streams.protocols), "epochs": epochs,
            "contenders": results}


def main(argv: list[str] | None = None) -> int:
    """Run the aligned benchmark and print its table (``--json PATH`` keeps the record)."""
    parser = argparse.ArgumentParser(prog="python -m bench.aligned", description=__doc__)
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=24)
    parser.add_argument("--rows-per-cycle", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="windpipe-bench-aligned-") as tmp:
        record = run(cells=args.cells, cycles=args.cycles, rows_per_cycle=args.rows_per_cycle,
                     batch_size=args.batch_size, seq_len=args.seq_len, epochs=args.epochs,
                     work_dir=Path(tmp))
    print(f"aligned {'+'.join(record['protocols'])}, B={record['batch_size']}, "
          f"T={record['seq_len']}, {record['rows']:,} rows, {record['epochs']} epochs")
    print("| contender | batches | M tokens/s | x numpy | first batch s | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in record["contenders"].values():
        print(f"| {r['name']} | {r['batches']} | {r['tokens_per_s'] / 1e6:.2f} | "
              f"{r['ratio_to_numpy']:.2f} | {r['startup_seconds']:.2f} | "
              f"{r['peak_rss_bytes'] / 2**20:.0f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
