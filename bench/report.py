"""Render a benchmark record as a markdown table and a PNG bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from windpipe.services.contract.extras import install_hint

__all__ = ["HEADLINE_RATIOS", "ratio_rows", "ratio_table", "verdict", "write_markdown",
           "write_plot", "write_plot_if_possible"]

# (numerator, denominator, target) of the ratios the record reports first; a target holds
# for tokens/s AND tokens per CPU-second (the careful hand loader, Flight's floor)
HEADLINE_RATIOS: tuple[tuple[str, str, float | None], ...] = (
    ("windpipe_local", "numpy_strided", 1.0),
    ("windpipe_flight_warm", "flight_ceiling", 0.9),
    ("windpipe_flight_warm", "flight_ceiling_hot", None),
    ("windpipe_local", "numpy_memmap", 1.0),
    ("windpipe_full_in_mem", "full_in_mem_torch", 1.5),
    ("windpipe_flight_warm", "numpy_memmap", None),
    ("windpipe_flight_warm", "windowed_parquet", None),
    ("windpipe_flight_warm", "torch_dataloader", None),
    # bench.large_data: data 4x the cache, block_shuffled over warm shuffled, its first
    # epoch over a bare decode of the files; the first epoch from the latency-injected
    # store over the proxy's limit (no CPU figure)
    ("block_shuffled_warm", "shuffled_warm", 0.8),
    ("block_shuffled_first_epoch", "bare_decode", 0.7),
    ("store_first_epoch", "proxy_limit", 0.8),
)


def verdict(value: float, target: float | None, cpu: float | None = None) -> str:
    """``"pass"`` when a ratio meets its target in tokens/s and (when measured) in tokens
    per CPU-second, ``"FAIL"`` when it does not, ``""`` when it has none (context)."""
    if target is None:
        return ""
    return "pass" if value >= target and (cpu is None or cpu >= target) else "FAIL"


def ratio_rows(record: dict[str, Any]) -> list[tuple[str, float, float | None, str, str]]:
    """``(ratio, tokens/s ratio, tokens per CPU-s ratio or None, target, verdict)`` of each
    headline ratio the record has, in :data:`HEADLINE_RATIOS` order."""
    ratios = record.get("ratios", {})
    rows = []
    for num, den, target in HEADLINE_RATIOS:
        key = f"{num}/{den}"
        if key in ratios:
            goal = f">= {target}x" if target is not None else ""
            cpu = ratios.get(f"cpu/{key}")
            rows.append((key, ratios[key], cpu, goal, verdict(ratios[key], target, cpu)))
    return rows


def ratio_table(record: dict[str, Any]) -> list[str]:
    """The headline ratios as markdown lines, each target marked pass or FAIL."""
    rows = ratio_rows(record)
    if not rows:
        return []
    lines = ["| ratio (same run) | tokens/s | tokens per CPU-s | target | verdict |",
             "|---|---:|---:|---|---|"]
    for key, value, cpu, goal, mark in rows:
        lines.append(f"| {key} | {value:.2f}x | {'' if cpu is None else f'{cpu:.2f}x'} | "
                     f"{goal} | {mark} |")
    return lines


def _ok(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in record["contenders"].items() if "error" not in v}


def write_markdown(record: dict[str, Any], path: Path) -> None:
    """The contenders, the headline ratios, concurrency and planning."""
    ok = _ok(record)
    batch = record["batch"]
    lines = [
        f"Benchmark of {record['date']} on {record['machine']['cpus']} CPUs, "
        f"{record['rows']:,} cycling rows, {batch.get('strategy', 'sequential')} batches of "
        f"{batch['batch_size']}x{batch['seq_len']} (3 inputs, 1 target).",
        "",
        "| contender | M tokens/s | batches/s | M tokens per CPU-s | ... in-process | "
        "peak RSS (MiB) | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ok.items():
        lines.append(
            f"| {name} | {r['tokens_per_s'] / 1e6:.2f} | {r['batches_per_s']:.1f} | "
            f"{r.get('tokens_per_cpu_s', 0.0) / 1e6:.2f} | "
            f"{r.get('tokens_per_process_cpu_s', 0.0) / 1e6:.2f} | "
            f"{r['peak_rss_bytes'] / 2**20:.0f} | {r['cpu_s']:.1f} |"
        )
    for name, r in record["contenders"].items():
        if "error" in r:
            lines.append(f"| {name} | failed | | | | | |")
    table = ratio_table(record)
    if table:
        lines += ["", *table]
    if record.get("concurrency"):
        lines += ["", "Flight: N consumer processes of one server.", "",
                  "| consumers | aggregate M tokens/s | bytes read from storage (MiB) |",
                  "|---:|---:|---:|"]
        for row in record["concurrency"]:
            lines.append(f"| {row['consumers']} | {row['tokens_per_s'] / 1e6:.2f} | "
                         f"{row['storage_bytes'] / 2**20:.0f} |")
    if record.get("local_concurrency"):
        lines += ["", "Same host: N consumer processes sharing one tier.", "",
                  "| consumers | aggregate M tokens/s | read from storage (MiB) | "
                  "consumers' PSS (MiB) | tier (MiB) |", "|---:|---:|---:|---:|---:|"]
        for row in record["local_concurrency"]:
            lines.append(f"| {row['consumers']} | {row['tokens_per_s'] / 1e6:.2f} | "
                         f"{row['storage_bytes'] / 2**20:.0f} | "
                         f"{row['consumers_pss_bytes'] / 2**20:.0f} | "
                         f"{row['tier_bytes'] / 2**20:.0f} |")
    if record.get("planning"):
        lines += ["", "| windows | database | plan creation (s) |", "|---:|---|---:|"]
        for row in record["planning"]:
            if "seconds" in row:
                lines.append(f"| {row['windows']:,} | {row['database']} | "
                             f"{row['seconds']:.2f} |")
    path.write_text("\n".join(lines) + "\n")


def write_plot(record: dict[str, Any], path: Path) -> None:
    """Horizontal bars of tokens/s, log scale."""
    import matplotlib as mpl  # noqa: PLC0415

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    ok = _ok(record)
    names = list(ok)
    values = [ok[n]["tokens_per_s"] / 1e6 for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    colors = ["tab:blue" if n.startswith("windpipe") else
              "tab:gray" if n.endswith("ceiling") else "tab:orange" for n in names]
    ax.barh(names, values, color=colors)
    ax.set_xscale("log")
    ax.set_xlabel("M tokens/s (log scale)")
    ax.invert_yaxis()
    ax.set_title(f"windpipe benchmark, {record['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plot_if_possible(record: dict[str, Any], path: Path) -> bool:
    """:func:`write_plot`, or a message and False when matplotlib is not installed
    (it is an optional extra: ``pip install 'windpipe[plot]'``)."""
    try:
        write_plot(record, path)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        print(f"no plot: matplotlib is not installed ({install_hint('plot')}); "
              f"the numbers are in {path.with_suffix('.json').name} and "
              f"{path.with_suffix('.md').name}")
        return False
    return True
