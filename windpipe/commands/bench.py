"""``windpipe bench``: every option goes to ``python -m bench`` (docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["bench"]

_RUN_FROM_A_CHECKOUT = (
    "windpipe bench: the benchmarks (the `bench` package) live only in a checkout of the "
    "windpipe repository, not in the installed package, and `bench` cannot be imported "
    "from {cwd}; run them from the repository root: `python -m bench --quick` "
    "(or `windpipe bench --quick`)"
)


def _bench_importable() -> bool:
    """Whether ``bench`` imports as every contender's process will import it.

    Each contender runs as ``python -m bench.runner`` in the working directory with this
    environment, so its ``sys.path`` is the working directory, ``PYTHONPATH`` and the
    installed packages. This process gets the working directory put first the same way
    (the console script's own ``sys.path[0]`` is its ``bin/`` folder), then looks. Finding
    the checkout any other way (say, beside an editable install's sources) would let the
    parent start while every contender failed with ``No module named bench.runner``.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    spec = importlib.util.find_spec("bench")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(where) / "runner.py").is_file() for where in locations)


def bench(argv: list[str]) -> int:
    """Run ``bench.__main__.main(argv)`` when the checkout's ``bench`` imports here;
    refuse up front (exit 2) otherwise, before any data is written."""
    if not _bench_importable():
        print(_RUN_FROM_A_CHECKOUT.format(cwd=os.getcwd()), file=sys.stderr)
        return 2
    from bench.__main__ import main as bench_main  # noqa: PLC0415

    return bench_main(argv)
