"""``windpipe bench``: every option goes to ``python -m bench`` (docs/benchmarks.md)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["bench"]


def _bench_checkout() -> Path | None:
    """The repository checkout holding ``bench/`` (not installed: it runs from a checkout)."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (candidate / "bench" / "__main__.py").is_file():
            return candidate
    return None


def bench(argv: list[str]) -> int:
    """Run ``bench.__main__.main(argv)`` from the repository checkout."""
    checkout = _bench_checkout()
    if checkout is None:
        print("windpipe bench: the benchmarks run from a checkout of the windpipe repository "
              "(bench/ is not installed); run `windpipe bench` inside one", file=sys.stderr)
        return 2
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from bench.__main__ import main as bench_main  # noqa: PLC0415

    return bench_main(argv)
