"""A collection at scale: many small segments beside the same rows in large ones.

    python -m bench.collection --segments 10000

writes a synthetic collection of about ``--segments`` small parquet segments (``windpipe
synth``'s generator, ``--rows-per-cycle`` rows a cycle) and the same rows as one large
segment per cell and protocol, then measures, side by side in one run:

- registration per segment through a served catalog (the SDK follows the job) beside the
  floor of reading every footer with pyarrow in one loop (page cache warm for both);
- the catalog's index, split and plan of the small-segment version;
- the cold first epoch (fresh catalog and Flight server in this process: nothing cached
  yet) over small segments vs the same rows in large segments, in real rows/s;
- the peak RSS of this process (catalog and reader run in it) after each step.

    python -m bench.collection --segments 100000 --served [--data DIR]

registers the small segments (written, or ``--data``: a collection written before)
against ``windpipe serve catalog`` in a process of its own, with the SDK's progress bar,
and reports its time beside the footer floor, the index, split and plan times, and the
server's peak RSS (``VmHWM``: the catalog alone, nothing else in that process); no
large segments, no cold epoch.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from bench.registration import footer_floor, register_once
from bench.serve_process import windpipe_serve
from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.runner import start_flight_server
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.sdk._torch_import import require_torch
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["cold_epoch", "main", "merge_segments", "served_registration"]

_PER_CELL_CYCLE = 1.7  # cycling every cycle, hppc every 5th, eis every 2nd
_CELLS = 100
_CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=64, seq_len=32),
    inputs={"cycling": ("current_a", "voltage_v")}, targets={"cycling": ("voltage_v",)})
# the cold epoch is shuffled: a sequential window never spans two streams (SEMANTICS 3a),
# so over 60-row segments its batches hold 1-2 lanes (1,432 batches of 2 lanes against 79
# of 34 for the same rows in large segments, measured): that compares batch counts, not
# reads. Shuffled batches hold B lane windows from any streams in both layouts.
_EPOCH_CONFIG = _CONFIG.model_copy(update={"strategy": "shuffled"})


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def merge_segments(small: Path, large: Path) -> int:
    """The rows of ``small``'s manifest as one parquet segment per (set, cell, protocol)
    under ``large`` (cycles in order, ``cidx`` 0); returns the segments written."""
    manifest = pl.read_parquet(small / "manifest.parquet")
    rows = []
    for (set_id, cell_id, protocol), group in manifest.sort("cidx").group_by(
            ["set_id", "cell_id", "protocol"], maintain_order=True):
        frames = [pl.read_parquet(small / p) for p in group.get_column("segment_path")
                  if str(p).endswith(".parquet")]
        if not frames:
            continue
        rel = f"segments/{set_id}/{cell_id}/{protocol}.parquet"
        (large / rel).parent.mkdir(parents=True, exist_ok=True)
        pl.concat(frames, how="diagonal_relaxed").write_parquet(large / rel)
        rows.append({"set_id": set_id, "cell_id": cell_id, "cidx": 0, "protocol": protocol,
                     "segment_path": rel})
    pl.DataFrame(rows).write_parquet(large / "manifest.parquet")
    return len(rows)


def cold_epoch(root: Path, *, work: Path, name: str, packs: bool = True) -> dict[str, float]:
    """The first epoch of a shuffled plan over ``root`` streamed over Flight from fresh
    servers (chunk cache empty, no tier) in this process: ``rows`` (real rows, not
    batches: short streams pad more windows), ``epoch_s``, ``cpu_s`` (this process's CPU
    time over the epoch: server and client both run in it; steadier than wall time on a
    shared machine), and the seconds of ``index``, ``split`` and ``plan``. ``packs``:
    registration writes the version's pack (the default, ``windpipe.services.storage.packs``), or
    none (``WINDPIPE_PACK_ROWS=0``: every segment read from its file)."""
    settings = Settings(data_dir=work, log_level="WARNING", host="127.0.0.1",
                        allowed_roots=(str(root),), tier_bytes=0,
                        pack_rows=Settings().pack_rows if packs else 0)
    flight = start_flight_server(settings.model_copy(update={"flight_port": 0}),
                                 backend=DatabaseBackend.from_settings(settings))
    catalog_server = start_catalog_server(
        settings.model_copy(update={"flight_locations": (flight.location,)}), port=0)
    try:
        catalog = Catalog(catalog_server.url, timeout=600.0, read_timeout=600.0)
        with warnings.catch_warnings():  # the synthetic data's nulls, on purpose
            warnings.simplefilter("ignore")
            version = catalog.register(name, root=str(root), manifest="manifest.parquet",
                                       progress=False)
        t0 = time.perf_counter()
        version.index()
        t1 = time.perf_counter()
        split = version.split(ValidationConfig.sample(0.2, seed=0))
        t2 = time.perf_counter()
        plan = split.plan(_EPOCH_CONFIG)
        t3 = time.perf_counter()
        require_torch()  # the batches are torch tensors: import torch before the clock
        gc.collect()  # what registering left behind is not the epoch's to collect
        start, cpu0 = time.perf_counter(), time.process_time()
        rows = windows = batches = 0
        for batch in plan.batches(transport="flight"):
            rows += int(batch.mask.sum())
            windows += int(batch.mask.any(dim=1).sum())
            batches += 1
        epoch_s = time.perf_counter() - start
        cpu_s = time.process_time() - cpu0
        catalog.close()
        return {"rows": rows, "windows": windows, "batches": batches, "epoch_s": epoch_s,
                "cpu_s": cpu_s, "index": t1 - t0, "split": t2 - t1, "plan": t3 - t2}
    finally:
        catalog_server.stop(grace_s=5.0)
        flight.stop(grace_s=5.0)


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over ``runs`` (one cold epoch each)."""
    return {key: float(np.median([run[key] for run in runs])) for key in runs[0]}


def _peak_of(pid: int) -> int:
    """Peak resident bytes of process ``pid`` (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_of(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def served_registration(root: Path, *, work: Path, progress: bool = True,
                        ) -> dict[str, float]:
    """Register ``root``'s manifest against ``windpipe serve catalog`` (a process of its
    own, SQLite under ``work``) through the SDK, its progress bar shown, then index,
    split and plan the version: ``segments``, the seconds of ``register``, ``index``,
    ``split`` and ``plan``, the server's CPU seconds while registering
    (``register_cpu``: on a shared machine steadier than the wall time), and its peak
    RSS (bytes) once started (``peak_rss_idle``), after registering and after the plan
    (``peak_rss``)."""
    env = {**os.environ, "WINDPIPE_LOG_LEVEL": "WARNING"}
    with windpipe_serve(["catalog", "--data-dir", str(work), "--port", "0",
                         "--allow-root", str(root)], env=env) as (server, url):
        catalog = Catalog(url, timeout=600.0, read_timeout=600.0)
        idle = _peak_of(server.pid)
        cpu0 = _cpu_of(server.pid)
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # the synthetic data's nulls, on purpose
            warnings.simplefilter("ignore")
            version = catalog.register("many", root=str(root), manifest="manifest.parquet",
                                       progress=progress)
        t1 = time.perf_counter()
        cpu = _cpu_of(server.pid) - cpu0
        peak_registered = _peak_of(server.pid)
        version.index()
        t2 = time.perf_counter()
        split = version.split(ValidationConfig.sample(0.2, seed=0))
        t3 = time.perf_counter()
        split.plan(_CONFIG)
        t4 = time.perf_counter()
        out = {"segments": float(version.raw["n_segments"]), "register": t1 - t0,
               "register_cpu": cpu,
               "index": t2 - t1, "split": t3 - t2, "plan": t4 - t3,
               "peak_rss_idle": float(idle), "peak_rss_registered": float(peak_registered),
               "peak_rss": float(_peak_of(server.pid))}
        catalog.close()
        return out


def _served(small: Path, work: Path) -> None:
    footer_floor(small)  # warm the page cache: both sides read warm files
    n_parquet, floor_s = footer_floor(small)
    run = served_registration(small, work=work)
    n = int(run["segments"])
    print(f"segments {n:,} ({n_parquet:,} parquet)")
    print(f"footer floor   {floor_s:8.2f} s {floor_s / n_parquet * 1e6:8.0f} us/segment")
    print(f"registration   {run['register']:8.2f} s {run['register'] / n * 1e6:8.0f} "
          f"us/segment = {run['register'] / floor_s:.1f}x the floor "
          f"(server CPU {run['register_cpu']:.2f} s, {run['register_cpu'] / floor_s:.1f}x)")
    print(f"index {run['index']:.2f} s, split {run['split']:.2f} s, plan {run['plan']:.2f} s")
    grown = run["peak_rss_registered"] - run["peak_rss_idle"]
    print(f"server peak RSS {run['peak_rss_idle'] / 2**20:.0f} MiB started, "
          f"{run['peak_rss_registered'] / 2**20:.0f} MiB after registering "
          f"(+{grown / n:.0f} bytes a segment over the started server, its fixed "
          "first-registration costs included: compare two sizes for the growth a segment), "
          f"{run['peak_rss'] / 2**20:.0f} MiB after the plan")
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, write both collections, print every figure."""
    parser = argparse.ArgumentParser(prog="python -m bench.collection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--rows-per-cycle", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3,
                        help="cold epochs of each layout, alternating (medians reported)")
    parser.add_argument("--served", action="store_true",
                        help="registration against windpipe serve only (see above)")
    parser.add_argument("--data", type=Path, default=None,
                        help="with --served: a small-segment collection written before")
    args = parser.parse_args(argv)
    cycles = max(1, round(args.segments / (_CELLS * _PER_CELL_CYCLE)))
    with tempfile.TemporaryDirectory(prefix="windpipe-collection-") as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        start = time.perf_counter()
        if args.served and args.data is not None:
            _served(args.data.resolve(), Path(tmp) / "catalog")
            return
        write_synthetic_dataset(small, cells=_CELLS, cycles=cycles,
                                rows_per_cycle=args.rows_per_cycle, zarr_fraction=0.0)
        if args.served:
            print(f"wrote the collection in {time.perf_counter() - start:.1f} s")
            _served(small, Path(tmp) / "catalog")
            return
        n_large = merge_segments(small, large)
        print(f"wrote both collections in {time.perf_counter() - start:.1f} s "
              f"(peak RSS {_peak_mib():.0f} MiB)")
        footer_floor(small)  # warm the page cache: both sides read warm files
        n_parquet, floor_s = footer_floor(small)
        version_id, n_small, reg_s = register_once(small, work=Path(tmp) / "catalog")
        print(f"segments {n_small:,} small, {n_large:,} large; cycles per cell {cycles}")
        print(f"footer floor   {floor_s:8.2f} s {floor_s / n_parquet * 1e6:8.0f} us/segment")
        print(f"registration   {reg_s:8.2f} s {reg_s / n_small * 1e6:8.0f} us/segment "
              f"= {reg_s / floor_s:.1f}x the floor (peak RSS {_peak_mib():.0f} MiB)")
        # what the first epoch of a process pays once whatever the data (pyarrow's first
        # string arrays: 0.2 s, measured; torch's first tensors) is not a layout's
        cold_epoch(large, work=Path(tmp) / "cold-warmup", name="warmup")
        runs: dict[str, list[dict[str, float]]] = {"small": [], "large": [], "unpacked": []}
        for r in range(args.rounds):  # alternating: the machine's drift falls on all three
            for label, root, packs in (("small", small, True), ("large", large, True),
                                       ("unpacked", small, False)):
                runs[label].append(cold_epoch(root, work=Path(tmp) / f"cold-{label}-{r}",
                                              name=label, packs=packs))
        small_run, large_run, unpacked = (_median(runs[k]) for k in ("small", "large",
                                                                      "unpacked"))
        print(f"cold epochs: the median of {args.rounds} rounds, fresh servers each")
        print(f"index {small_run['index']:.2f} s, split {small_run['split']:.2f} s, "
              f"plan {small_run['plan']:.2f} s (small segments)")
        rates, per_cpu = {}, {}
        for label, run in (("small", small_run), ("large", large_run),
                           ("small, no pack", unpacked)):
            rates[label] = run["rows"] / run["epoch_s"]
            per_cpu[label] = run["rows"] / run["cpu_s"]
            print(f"cold epoch {label + ' segments':22} {rates[label] / 1e6:8.2f} M rows/s "
                  f"{per_cpu[label] / 1e6:8.2f} M rows/CPU-s "
                  f"({int(run['rows']):,} rows, {int(run['windows']):,} windows in "
                  f"{int(run['batches']):,} batches, {run['epoch_s']:.2f} s, "
                  f"{run['cpu_s']:.2f} CPU-s)")
        per_window = ((small_run["windows"] / small_run["epoch_s"])
                      / (large_run["windows"] / large_run["epoch_s"]))
        print(f"windows/s small / large {per_window:.2f}x (a 60-row segment holds fewer "
              "real rows a window than a long stream)")
        print(f"small / large {rates['small'] / rates['large']:.2f}x, per CPU-s "
              f"{per_cpu['small'] / per_cpu['large']:.2f}x; without its pack "
              f"{rates['small, no pack'] / rates['large']:.2f}x, "
              f"{per_cpu['small, no pack'] / per_cpu['large']:.2f}x "
              f"(peak RSS {_peak_mib():.0f} MiB; version {version_id})")


if __name__ == "__main__":
    main()
