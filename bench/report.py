"""Render a benchmark record as a markdown table and a PNG bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["write_markdown", "write_plot"]


def _ok(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in record["contenders"].items() if "error" not in v}


def write_markdown(record: dict[str, Any], path: Path) -> None:
    """The contenders, the ratios that matter, concurrency and planning."""
    ok = _ok(record)
    lines = [
        f"Benchmark of {record['date']} on {record['machine']['cpus']} CPUs, "
        f"{record['rows']:,} cycling rows, batches of {record['batch']['batch_size']}x"
        f"{record['batch']['seq_len']} (3 inputs, 1 target).",
        "",
        "| contender | M tokens/s | batches/s | peak RSS (MiB) | CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in ok.items():
        lines.append(
            f"| {name} | {r['tokens_per_s'] / 1e6:.2f} | {r['batches_per_s']:.1f} | "
            f"{r['peak_rss_bytes'] / 2**20:.0f} | {r['cpu_s']:.1f} |"
        )
    for name, r in record["contenders"].items():
        if "error" in r:
            lines.append(f"| {name} | failed | | | |")
    warm = ok.get("windpipe_flight_warm")
    if warm:
        lines += ["", "| ratio | value |", "|---|---:|"]
        for other in ("flight_ceiling", "full_in_mem_torch", "windowed_parquet",
                      "rowgroup_parquet", "torch_dataloader", "memcpy_ceiling"):
            if other in ok and ok[other]["tokens_per_s"]:
                ratio = warm["tokens_per_s"] / ok[other]["tokens_per_s"]
                lines.append(f"| windpipe_flight_warm / {other} | {ratio:.2f}x |")
    if record.get("concurrency"):
        lines += ["", "| consumers | aggregate M tokens/s | bytes read from storage (MiB) |",
                  "|---:|---:|---:|"]
        for row in record["concurrency"]:
            lines.append(f"| {row['consumers']} | {row['tokens_per_s'] / 1e6:.2f} | "
                         f"{row['storage_bytes'] / 2**20:.0f} |")
    if record.get("planning"):
        lines += ["", "| windows | database | plan creation (s) |", "|---:|---|---:|"]
        for row in record["planning"]:
            lines.append(f"| {row['windows']:,} | {row['database']} | {row['seconds']:.2f} |")
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
