"""``windpipe serve`` in a process of its own, for the benchmarks that measure a server
apart from their client (its CPU and peak memory read from ``/proc`` by its pid)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["windpipe_serve"]


@contextmanager
def windpipe_serve(args: list[str], *, env: Mapping[str, str],
                   ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``windpipe serve ARGS`` (this interpreter's ``windpipe``), yield the process
    and the catalog's URL once it prints ``catalog ready at``, terminate it on exit."""
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("windpipe")), "serve", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(env))
    try:
        assert server.stdout is not None
        url = ""
        while not url:
            line = server.stdout.readline()
            if not line:
                raise RuntimeError("windpipe serve ended before it was ready")
            if "catalog ready at" in line:
                url = line.split()[-1]
        yield server, url
    finally:
        server.terminate()
        server.wait(30)
