"""``python -m bench``: every contender side by side on the same data, in one run.

Writes ``<out>/bench.json`` (or ``--json PATH``), a markdown table and a PNG plot
beside it. ``--quick`` keeps the whole run under about two minutes. Exits 1 when any
contender failed (the record is still written, the failure in its ``error``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from bench.report import HEADLINE_RATIOS, ratio_table, write_markdown, write_plot_if_possible

__all__ = ["CONTENDERS", "HEADLINE_RATIOS", "main", "median_record", "ratios", "round_ratios",
           "run_contender"]

CONTENDERS = (
    "windpipe_local", "numpy_strided", "numpy_memmap", "windpipe_flight_warm",
    "windpipe_flight_cold", "windpipe_full_in_mem", "windpipe_flight_warm_sequential",
    "windowed_parquet", "rowgroup_parquet", "full_in_mem_torch", "torch_dataloader",
    "flight_ceiling", "flight_ceiling_hot", "memcpy_ceiling",
)



def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(), "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def run_contender(
    name: str, workload_path: Path, *, max_batches: int, max_seconds: float,
    options: dict[str, Any] | None = None, tokens_per_batch: int,
) -> dict[str, Any]:
    """One contender in its own process; returns its result record."""
    cmd = [
        sys.executable, "-m", "bench.runner", name, str(workload_path),
        "--max-batches", str(max_batches), "--max-seconds", str(max_seconds),
        "--options", json.dumps(options or {}),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max_seconds * 4 + 600,
                          check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"name": name, "error": (proc.stderr or proc.stdout)[-2000:]}
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result.setdefault("tokens_per_batch", tokens_per_batch)
    tokens = result["batches"] * result["tokens_per_batch"]
    result["batches_per_s"] = result["batches"] / result["seconds"] if result["seconds"] else 0.0
    result["tokens_per_s"] = tokens / result["seconds"] if result["seconds"] else 0.0
    # CPU the timed loop cost the whole process tree (client, workers, server)
    cpu = result.get("run_cpu_s", 0.0)
    result["tokens_per_cpu_s"] = tokens / cpu if cpu else 0.0
    own = result.get("run_process_cpu_s", 0.0)  # the consuming process alone
    result["tokens_per_process_cpu_s"] = tokens / own if own else 0.0
    return result


def median_record(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A contender's record over interleaved rounds: the round of median tokens/s (the
    lower one of an even count), with every round's tokens/s beside it; a failure only
    when every round failed."""
    ok = sorted((r for r in results if "error" not in r), key=lambda r: r["tokens_per_s"])
    if not ok:
        return results[-1]
    return {**ok[(len(ok) - 1) // 2],
            "rounds_tokens_per_s": [r.get("tokens_per_s") for r in results]}


def round_ratios(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """The headline ratios of each round (contenders of one round ran side by side), their
    median over the rounds."""
    per_round = [ratios(r) for r in rounds]
    keys = dict.fromkeys(k for r in per_round for k in r)
    return {k: statistics.median(r[k] for r in per_round if k in r) for k in keys}


def ratios(contenders: dict[str, Any]) -> dict[str, float]:
    """Tokens/s (and, with ``cpu/``, tokens per CPU-second) of the headline pairs."""
    out: dict[str, float] = {}
    for num, den, _target in HEADLINE_RATIOS:
        a, b = contenders.get(num, {}), contenders.get(den, {})
        if a.get("tokens_per_s") and b.get("tokens_per_s"):
            out[f"{num}/{den}"] = a["tokens_per_s"] / b["tokens_per_s"]
        if a.get("tokens_per_cpu_s") and b.get("tokens_per_cpu_s"):
            out[f"cpu/{num}/{den}"] = a["tokens_per_cpu_s"] / b["tokens_per_cpu_s"]
    return out


def _say(line: str) -> None:
    """A progress line, shown at once (a contender runs silently for seconds)."""
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small data, short runs, under about two minutes (default off)")
    parser.add_argument("--rows", type=int,
                        help="cycling rows (default 20M, 2M with --quick)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"),
                        help="where data, workload and results go (default %(default)s)")
    parser.add_argument("--json", type=Path, dest="json_path",
                        help="the result record; .md and .png beside it "
                             "(default OUT/bench.json)")
    parser.add_argument("--only", nargs="*",
                        help=f"run only these contenders (default all: {', '.join(CONTENDERS)})")
    parser.add_argument("--skip-concurrency", action="store_true",
                        help="skip the concurrent-consumer runs (default: run them)")
    parser.add_argument("--skip-planning", action="store_true",
                        help="skip the planning timings (default: run them)")
    parser.add_argument("--skip-large-data", action="store_true",
                        help="skip the block shuffle larger than the cache and the first "
                             "epoch from the latency-injected store (default: run them)")
    parser.add_argument("--max-seconds", type=float,
                        help="per contender (default 20, 6 with --quick)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="interleaved rounds: every contender once per round, in turn; "
                             "each contender's median round and the median of each round's "
                             "ratios are reported (default %(default)s)")
    parser.add_argument("--max-batches", type=int,
                        help="per contender (default 3000, 300 with --quick)")
    args = parser.parse_args(argv)

    from bench.data import ensure_dataset  # noqa: PLC0415
    from bench.workload import build_workload  # noqa: PLC0415

    rows = args.rows or (2_000_000 if args.quick else 20_000_000)
    seconds = args.max_seconds or (6.0 if args.quick else 20.0)
    max_batches = args.max_batches or (300 if args.quick else 3000)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _say(f"preparing the dataset ({rows:,} cycling rows; written once, then reused) ...")
    root = ensure_dataset(args.out / f"data-{rows}", cycling_rows=rows)
    workload = build_workload(root)
    workload_path = args.out / "workload.npz"
    workload.save(workload_path)
    print(f"dataset {root}: {rows} cycling rows, {workload.n_batches} full batches "
          f"of {workload.batch_size}x{workload.seq_len} ({time.perf_counter() - t0:.1f} s)")

    names = args.only or CONTENDERS
    rounds: list[dict[str, Any]] = [{} for _ in range(args.rounds)]
    for r, results in enumerate(rounds, 1):  # interleaved: every contender once per round
        for i, name in enumerate(names, 1):
            slow = name in ("windowed_parquet", "rowgroup_parquet", "torch_dataloader")
            limit = min(max_batches, 60) if slow else max_batches
            where = f"round {r}/{args.rounds} " if args.rounds > 1 else ""
            _say(f"[{where}{i}/{len(names)}] {name}: up to {limit} batches or {seconds:g} s "
                 f"({time.perf_counter() - t0:.0f} s so far) ...")
            result = run_contender(name, workload_path, max_batches=limit, max_seconds=seconds,
                                   tokens_per_batch=workload.tokens_per_batch)
            results[name] = result
            if "error" in result:
                _say(f"{name:24s} FAILED: {result['error'][-300:]}")
            else:
                print(f"{name:32s} {result['tokens_per_s'] / 1e6:8.2f} M tokens/s "
                      f"{result['batches_per_s']:8.1f} batches/s "
                      f"{result['tokens_per_cpu_s'] / 1e6:7.2f} M tokens/cpu-s "
                      f"({result.get('tokens_per_process_cpu_s', 0.0) / 1e6:.2f} in-process) "
                      f"peak {result['peak_rss_bytes'] / 2**20:7.0f} MiB", flush=True)
    contenders = {name: median_record([r[name] for r in rounds]) for name in names}

    record: dict[str, Any] = {
        "contenders": contenders, "concurrency": None, "local_concurrency": None,
        "planning": None,
        "machine": _machine(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "rows": int(sum(workload.stream_rows)),
        "batch": {"batch_size": workload.batch_size, "seq_len": workload.seq_len,
                  "inputs": 3, "targets": 1, "strategy": workload.strategy},
        "rounds": args.rounds, "ratios": round_ratios(rounds),
    }
    if not args.skip_concurrency and not args.only:
        from bench.windpipe_contenders import concurrency, local_concurrency  # noqa: PLC0415

        window = min(seconds, 4.0 if args.quick else 10.0)
        _say(f"concurrency: 1, 2 and 4 consumers over Flight, then on the same host "
             f"({window:g} s each, {time.perf_counter() - t0:.0f} s so far) ...")
        record["concurrency"] = concurrency(workload, consumers=(1, 2, 4), max_seconds=window)
        record["local_concurrency"] = local_concurrency(workload, consumers=(1, 2, 4),
                                                        max_seconds=window)
    if not args.skip_planning and not args.only:
        from bench.planning import planning_times  # noqa: PLC0415

        sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
        _say(f"planning: plans of {', '.join(f'{n:,}' for n in sizes)} windows on SQLite "
             f"and PostgreSQL ({time.perf_counter() - t0:.0f} s so far) ...")
        record["planning"] = planning_times(sizes=sizes, work_dir=args.out / "planning")
    if not args.skip_large_data and not args.only:
        from bench.large_data import large_data  # noqa: PLC0415

        _say(f"large data: a block shuffle 4x the cache, a first epoch from the slow store "
             f"({time.perf_counter() - t0:.0f} s so far) ...")
        record["large_data"], large = large_data(args.out, quick=args.quick)
        record["ratios"].update(large)
    json_path = args.json_path or args.out / "bench.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(record, indent=2))
    write_markdown(record, json_path.with_suffix(".md"))
    plotted = write_plot_if_possible(record, json_path.with_suffix(".png"))
    table = ratio_table(record)
    if table:
        print("\n".join(["", *table, ""]))
    wrote = ".md, .png" if plotted else ".md"
    print(f"wrote {json_path} (+ {wrote}) in {time.perf_counter() - t0:.0f} s")
    failed = [name for name, result in contenders.items() if "error" in result]
    if failed:  # the record is written either way; a script or CI must still see the failure
        print(f"python -m bench: {len(failed)} of {len(contenders)} contenders failed: "
              f"{', '.join(failed)} (their errors are above and in {json_path})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
