"""GPU feed check: batches on CUDA equal the CPU path, and copies overlap compute.

Run on a CUDA machine: ``python bench/gpu_check.py`` (``--quick`` for a smaller run).
Without CUDA it says so and exits 0.

1. Equality: a small real deployment (synthetic data, catalog and Flight server in
   this process, SQLite in a temporary directory). The batches of ``plan.batches``
   (CPU, zero-copy) must equal, byte for byte, those of ``plan.loader(device="cuda")``
   in three modes: pinned + prefetch to device (side stream), pinned without
   prefetch, and pageable memory; each over both transports: ``local`` (the host's tier:
   full-window batches gathered straight into page-locked memory, one host copy, the
   window block moved in one host-to-device copy; the loader counts them) and
   ``flight`` (streamed, then copied into page-locked memory).
2. Feed: same-host batches of 64 x 1024 into CUDA, gathered straight into page-locked
   memory (one host copy) against copied into it after being built (two), side by side.
3. Overlap: in-memory batches (so the transport is not the limit) go through the
   loader while the consumer runs a fixed GPU workload per batch. With prefetch the
   host-to-device copies run on a side stream while the previous batch computes;
   without it they run in line. The script prints a per-batch timeline (copy and
   compute intervals from CUDA events), the fraction of copy time hidden under
   compute, and both wall times.

Exit status: 0 when every check holds (or without CUDA), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.runner import start_flight_server
from windpipe.sdk import (
    Batch,
    BatchState,
    Catalog,
    DeviceLoader,
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset


def _no_cuda() -> int:
    print("gpu_check: CUDA is not available on this machine "
          "(torch.cuda.is_available() is False); nothing to check, exiting.")
    return 0


def _equal(a: Any, b: Any) -> bool:
    return (
        torch.equal(a.inputs.cpu(), b.inputs.cpu())
        and torch.equal(a.targets.cpu().nan_to_num(123.0), b.targets.cpu().nan_to_num(123.0))
        and torch.equal(a.mask.cpu(), b.mask.cpu())
        and a.all_valid == b.all_valid and a.state == b.state
    )


@contextmanager
def _deployment(rows_per_cycle: int, *, cells: int, cycles: int) -> Iterator[Any]:
    """A catalog and a Flight server (tier on) in this process over synthetic data: the
    dataset version, registered."""
    with tempfile.TemporaryDirectory(prefix="wp-gpu-") as tmp:
        root = Path(tmp)
        synth = write_synthetic_dataset(root / "data", cells=cells, cycles=cycles,
                                        rows_per_cycle=rows_per_cycle, seed=0)
        settings = Settings(data_dir=root / "state", flight_host="127.0.0.1",
                            database_url=f"sqlite:///{root / 'c.db'}", log_level="WARNING",
                            allowed_roots=(str(synth.path.resolve()),))
        flight = start_flight_server(settings, port=0,
                                     backend=DatabaseBackend.from_settings(settings))
        catalog = start_catalog_server(settings, port=0)
        cat = Catalog(catalog.url, flight_locations=[flight.location])
        try:
            yield cat.register("gpu", root=synth.path.resolve().as_uri(),
                               manifest="manifest.parquet")
        finally:
            cat.close()
            catalog.stop(grace_s=5)
            flight.stop(grace_s=5)


def check_equality(*, quick: bool) -> bool:
    """Stream a small plan on the CPU and on CUDA in three loader modes; compare."""
    ok = True
    with _deployment(600 if quick else 3000, cells=2 if quick else 4,
                     cycles=3 if quick else 6) as ver:
        plan = ver.split(ValidationConfig.sample(0.2)).plan(LoaderConfig(
            default_window=WindowConfig(batch_size=16, seq_len=128, drop_incomplete=True),
            inputs={"cycling": ("current_a", "temperature_c"),
                    "hppc": ("current_a", "voltage_v")},
            targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
            scaling=(ScalingSpec(column="current_a", input_min=-10, input_max=10),),
            strategy="shuffled", stateful_n_windows=2,
        ))
        cpu = list(plan.batches(epoch=1, transport="flight"))
        modes: dict[str, dict[str, Any]] = {
            "pinned+prefetch": {"pin_memory": True, "prefetch_to_device": True},
            "pinned, no prefetch": {"pin_memory": True, "prefetch_to_device": False},
            "pageable": {"pin_memory": False, "prefetch_to_device": False},
        }
        for transport in ("local", "flight"):
            for name, opts in modes.items():
                loader = plan.loader(device="cuda", epoch=1, transport=transport, **opts)
                got = list(loader)
                same = len(got) == len(cpu) and all(
                    g.device.type == "cuda" and _equal(g, c)
                    for g, c in zip(got, cpu, strict=False)
                )
                stats = loader.stats
                gathers = stats.pinned_gathers if stats else 0
                if transport == "local" and opts["pin_memory"]:
                    same &= gathers > 0  # the one-copy path ran
                if transport == "flight":
                    same &= gathers == 0
                ok &= same
                peak = loader.pool.peak if loader.pool is not None else 0
                print(f"equality [{transport:6s} {name:20s}] {len(got)} batches: "
                      f"{'EQUAL to the CPU path' if same else 'DIFFERENT'}; "
                      f"pinned peak {peak / 2**20:.1f} MiB, {gathers} gathered into "
                      f"page-locked memory, {stats.pinned_copies if stats else 0} copied; "
                      f"{stats.verdict if stats else 'no stats'}")
    return ok


def check_feed(*, quick: bool) -> bool:
    """Same-host batches into CUDA with the gather into page-locked memory (one host copy)
    against the same loader copying each built batch into page-locked memory (two host
    copies): batches/s of each, side by side, and equal batches."""
    with _deployment(20_000 if quick else 100_000, cells=4, cycles=4) as ver:
        plan = ver.split(ValidationConfig.sample(0.2)).plan(LoaderConfig(
            default_window=WindowConfig(batch_size=64, seq_len=1024, drop_incomplete=True),
            inputs={"cycling": ("current_a", "temperature_c", "soc_pct")},
            targets={"cycling": ("voltage_v",)}, strategy="shuffled",
        ))
        source = plan._source(transport="local")
        rates: dict[str, float] = {}
        sums: dict[str, float] = {}
        for _ in range(2):
            for name, one_copy in (("one host copy", True), ("two host copies", False)):
                def gather(memory: Any) -> Any:
                    return source.batches(epoch=0, rank=0, world_size=1, start_batch=0,
                                          memory=memory)
                loader = DeviceLoader(
                    lambda: source.batches(epoch=0, rank=0, world_size=1, start_batch=0),
                    device="cuda", pin_memory=True, prefetch_to_device=True,
                    gather_source=gather if one_copy else None)
                t0 = time.perf_counter()
                total = 0.0
                n = 0
                for batch in loader:
                    total += float(batch.inputs[:, :8].sum())
                    n += 1
                torch.cuda.synchronize()
                rates[name] = n / (time.perf_counter() - t0)
                sums[name] = total
                stats = loader.stats
                print(f"feed [{name:16s}] {n} batches, {rates[name]:.0f} batches/s; "
                      f"{stats.pinned_gathers if stats else 0} gathered, "
                      f"{stats.pinned_copies if stats else 0} copied into page-locked memory")
    same = sums["one host copy"] == sums["two host copies"]
    ratio = rates["one host copy"] / rates["two host copies"]
    print(f"feed: one host copy / two host copies = {ratio:.2f}x; batches "
          f"{'EQUAL' if same else 'DIFFERENT'}")
    return same


def _synthetic_batches(n: int, b: int, t: int, c: int) -> list[Any]:
    out = []
    for i in range(n):
        state = BatchState(
            split="train", batch_idx=i, protocols=("cycling",) * b, manifest_paths=("",) * b,
            manifest_row_ids=(0,) * b, group_keys=((),) * b, alignment_keys=((),) * b,
            window_offsets=(0,) * b,
        )
        out.append(Batch(
            inputs=torch.randn(b, t, c), targets=torch.randn(b, t, 1),
            mask=torch.ones(b, t, dtype=torch.bool), all_valid=True, state=state,
        ))
    return out


def _compute(batch: Any, weight: torch.Tensor, reps: int) -> torch.Tensor:
    x = batch.inputs.reshape(-1, batch.inputs.shape[-1])[:, :1].expand(-1, weight.shape[0])
    y = x[: weight.shape[0]] @ weight
    for _ in range(reps):
        y = torch.tanh(y @ weight)
    return y.sum()


def check_overlap(*, quick: bool) -> bool:
    """Copy/compute overlap with and without prefetch to device; prints a timeline."""
    n, b, t, c = (24, 64, 2048, 16) if quick else (64, 64, 4096, 16)
    batches = _synthetic_batches(n, b, t, c)
    mib = batches[0].nbytes / 2**20
    weight = torch.randn(2048, 2048, device="cuda") / 45.0
    # size the compute to roughly twice one batch's copy time
    probe = DeviceLoader(lambda: iter(batches[:4]), device="cuda", timeline=True)
    list(probe)
    torch.cuda.synchronize()
    copy_ms = sum(s.elapsed_time(e) for s, e in probe.copy_events) / len(probe.copy_events)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    _compute(batches[0].to("cuda"), weight, 10)
    end.record()
    torch.cuda.synchronize()
    per_rep = max(start.elapsed_time(end) / 10, 1e-3)
    reps = max(1, int(2 * copy_ms / per_rep))
    print(f"overlap: {n} batches of {mib:.1f} MiB; copy ~{copy_ms:.2f} ms/batch, "
          f"compute {reps} reps ~{reps * per_rep:.2f} ms/batch")

    results: dict[str, float] = {}
    timeline: list[tuple[float, float, float, float]] = []
    runs: tuple[tuple[str, dict[str, Any]], ...] = (
        ("prefetch", {"pin_memory": True, "prefetch_to_device": True}),
        ("in line", {"pin_memory": False, "prefetch_to_device": False}),
    )
    for name, opts in runs:
        loader = DeviceLoader(lambda: iter(batches), device="cuda", read_ahead=4,
                              timeline=name == "prefetch", **opts)
        compute_events = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        origin = torch.cuda.Event(enable_timing=True)
        origin.record()
        for batch in loader:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            _compute(batch, weight, reps)
            e.record()
            compute_events.append((s, e))
        torch.cuda.synchronize()
        results[name] = time.perf_counter() - t0
        if name == "prefetch":
            for (c0, c1), (k0, k1) in zip(loader.copy_events, compute_events, strict=False):
                timeline.append((origin.elapsed_time(c0), origin.elapsed_time(c1),
                                 origin.elapsed_time(k0), origin.elapsed_time(k1)))
    hidden = total = 0.0
    for i, (cs, ce, _, _) in enumerate(timeline):
        total += ce - cs
        for _, _, ks, ke in timeline[max(0, i - 4):i]:
            hidden += max(0.0, min(ce, ke) - max(cs, ks))
    frac = hidden / total if total else 0.0
    print("timeline (ms from start)   copy[start, end]      compute of an earlier batch")
    for i, (cs, ce, ks, ke) in enumerate(timeline[:10]):
        print(f"  batch {i:3d}   copy [{cs:8.2f}, {ce:8.2f}]   compute [{ks:8.2f}, {ke:8.2f}]")
    speedup = results["in line"] / results["prefetch"] if results["prefetch"] else 0.0
    print(f"overlap: {100 * frac:.0f}% of copy time ran under compute; wall "
          f"prefetch {results['prefetch']:.3f} s vs in line {results['in line']:.3f} s "
          f"(x{speedup:.2f})")
    return frac >= 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, faster run")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        return _no_cuda()
    print(f"gpu_check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ok_equal = check_equality(quick=args.quick)
    ok_feed = check_feed(quick=args.quick)
    ok_overlap = check_overlap(quick=args.quick)
    print(f"gpu_check: equality {'OK' if ok_equal else 'FAILED'}, "
          f"feed {'OK' if ok_feed else 'FAILED'}, overlap {'OK' if ok_overlap else 'FAILED'}")
    return 0 if ok_equal and ok_feed and ok_overlap else 1


if __name__ == "__main__":
    sys.exit(main())
