"""``python -m bench.soak --minutes N --seed S``: the soak, its figures as JSON and a table.

Exits 1 when a target is missed: a batch lost, duplicated or not the schedule's, an
untyped error or one no fault explains, a fault not recovered from in time, a process
measured for 20 minutes or more whose RSS grew by more than 5 % an hour.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.soak.faults import ALL_FAULTS
from bench.soak.figures import table
from bench.soak.run import ROSTER, SoakOptions, run

__all__ = ["main", "passed"]


def passed(fig: dict[str, object]) -> bool:
    """Whether the soak met its targets."""
    return (fig["lost"] == 0 and fig["duplicated"] == 0 and fig["mismatched"] == 0
            and fig["untyped_errors"] == 0 and fig["unexplained_errors"] == 0
            and bool(fig["all_recovered"]) and not fig["rss_over"])


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, soak, print and write the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", default=",".join(ALL_FAULTS),
                        help="comma-separated, of: " + ", ".join(ALL_FAULTS))
    parser.add_argument("--clients", default=",".join(ROSTER),
                        help="comma-separated, of: " + ", ".join(ROSTER))
    parser.add_argument("--gap-s", type=float, default=30.0,
                        help="seconds between two faults (jittered by a fifth)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the servers' logs and the journals here")
    args = parser.parse_args(argv)
    faults = tuple(f for f in args.faults.split(",") if f)
    clients = tuple(c for c in args.clients.split(",") if c)
    unknown = sorted({*faults} - set(ALL_FAULTS)) + sorted({*clients} - set(ROSTER))
    if unknown:
        parser.error(f"unknown fault or client: {', '.join(unknown)}")
    opts = SoakOptions(seconds=args.minutes * 60, seed=args.seed, faults=faults,
                       clients=clients, gap_s=args.gap_s)
    with tempfile.TemporaryDirectory(prefix="windpipe-soak-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        fig = run(work, opts, say=lambda s: print(s, flush=True))
    print(table(fig))
    text = json.dumps(fig, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    else:
        print(text)
    return 0 if passed(fig) else 1


if __name__ == "__main__":
    sys.exit(main())
