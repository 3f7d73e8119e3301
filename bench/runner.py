"""Run one contender in a fresh process and report what it cost.

``python -m bench.runner NAME WORKLOAD.npz --max-batches N --max-seconds S`` prints one
JSON line: batches, seconds, CPU seconds and peak RSS of the process and of every child
it started and reaped (servers, DataLoader workers), plus what the contender adds.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any

__all__ = ["contender_functions", "main"]


def contender_functions() -> dict[str, Any]:
    """Every contender by name."""
    from bench.baselines import BASELINES  # noqa: PLC0415
    from bench.windpipe_contenders import WINDPIPE_CONTENDERS  # noqa: PLC0415

    return {**WINDPIPE_CONTENDERS, **BASELINES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("workload", type=Path)
    parser.add_argument("--max-batches", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    import torch  # noqa: PLC0415 - not at import: spawned servers re-import this module

    torch.set_num_threads(1)
    from bench.workload import load_workload  # noqa: PLC0415

    workload = load_workload(args.workload)
    fn = contender_functions()[args.name]
    result: dict[str, Any] = fn(
        workload, max_batches=args.max_batches, max_seconds=args.max_seconds,
        **json.loads(args.options),
    )
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    result.update(
        name=args.name,
        cpu_s=me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        client_peak_rss_bytes=me.ru_maxrss * 1024,
        children_peak_rss_bytes=kids.ru_maxrss * 1024,
    )
    result.setdefault("server_peak_rss_bytes", 0)
    result["peak_rss_bytes"] = max(
        result["client_peak_rss_bytes"], result["children_peak_rss_bytes"],
        result["server_peak_rss_bytes"],
    )
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
