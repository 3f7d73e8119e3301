"""Aggregate Flight throughput per node count (1, 2, 3 servers), on one machine.

docs/deploy.md sizes a deployment from these ratios, so they are measured the way a
deployment runs: the catalog on PostgreSQL (a fresh database, dropped after); each "node"
a ``windpipe serve flight`` process of its own (its own GIL and cores) on 127.0.0.11 /
.12 / .13, every server routing endpoints over the servers a ``file://`` discovery source
lists (1, 2, then 3 locations); four consumer processes (the ranks of a world of 4)
reading their passes over Flight at once, with the split warmed into every server's
cache first (``plan.warm``), so storage is out of the figure. Every rank's batches are
checked against ``GET /v1/plans/{id}/schedule`` (a mismatch stops the run)::

    .venv/bin/python -m bench.node_scaling --database-url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pyarrow.flight as fl

from bench.databases import fresh_database
from windpipe.catalog.api.server import start_catalog_server
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
WINDPIPE = str(Path(sys.executable).parent / "windpipe")
HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
WORLD = 4
PASSES = 4  # epochs each consumer reads per count
CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=128),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
)


def _free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)


def _schedule(client: httpx.Client, plan_id: str, epoch: int, rank: int) -> list[int]:
    out: list[int] = []
    token = None
    while True:
        params: dict[str, Any] = {"epoch": epoch, "rank": rank, "world_size": WORLD,
                                  "page_size": 1000}
        if token:
            params["page_token"] = token
        page = client.get(f"/v1/plans/{plan_id}/schedule", params=params)
        page.raise_for_status()
        body = page.json()
        out += [item["global_batch_idx"] for item in body["items"]]
        token = body["next_page_token"]
        if not token:
            return out


def _start_servers(stack: ExitStack, database_url: str, tmp: Path,
                   source: Path) -> list[str]:
    """Three server processes routing over the locations in ``source`` (discovery)."""
    ports = [_free_port_on(h) for h in HOSTS]
    locations = [f"grpc://{h}:{p}" for h, p in zip(HOSTS, ports, strict=True)]
    for host, port in zip(HOSTS, ports, strict=True):
        env = {**os.environ, "WINDPIPE_FLIGHT_HOST": host, "WINDPIPE_LOG_LEVEL": "WARNING"}
        log = (tmp / f"server-{host}.txt").open("w")
        stack.callback(log.close)
        proc = subprocess.Popen(
            [WINDPIPE, "serve", "flight", "--flight-port", str(port),
             "--database-url", database_url, "--data-dir", str(tmp / f"node-{host}"),
             "--tier-bytes", "0", "--cache-bytes", str(512 << 20),
             "--flight-discovery", f"file://{source}", "--flight-discovery-s", "0.1",
             "--allow-root", str(tmp)],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        stack.callback(proc.wait, 10)
        stack.callback(proc.terminate)

    def ready() -> bool:
        try:
            for loc in locations:
                with fl.connect(loc) as client:
                    list(client.do_action(fl.Action("health", b"")))
        except fl.FlightError:
            return False
        return True

    _wait_for(ready, 60.0, "3 Flight servers to start")
    return locations


def measure(database_url: str, tmp: Path) -> dict[int, float]:
    """Aggregate batches/s over Flight for 1, 2 and 3 servers (4 consumers, warm caches)."""
    data = write_synthetic_dataset(tmp / "synth", cells=6, cycles=6, rows_per_cycle=3000)
    settings = Settings(database_url=database_url, data_dir=tmp / "catalog",
                        log_level="WARNING", allowed_roots=(str(tmp),))
    source = tmp / "flight-servers.txt"
    source.write_text("")
    figures: dict[int, float] = {}
    with ExitStack() as stack:
        catalog = start_catalog_server(settings.model_copy(update={"host": "127.0.0.1"}),
                                       port=0)
        stack.callback(catalog.stop, grace_s=15.0)
        client = stack.enter_context(httpx.Client(base_url=catalog.url, timeout=30))
        with Catalog(catalog.url) as cat:
            plan = cat.register("scaling", root=str(data.path), manifest="manifest.parquet"
                                ).split(ValidationConfig.sample(fraction=0.2, seed=1)
                                        ).plan(CONFIG)
        schedules = [[_schedule(client, plan.id, e, r) for r in range(WORLD)]
                     for e in range(PASSES)]
        locations = _start_servers(stack, database_url, tmp, source)
        with Catalog(catalog.url, flight_locations=locations) as cat:
            cat.plan(plan.id).warm(progress=False)  # every server holds the split
        for n in (1, 2, 3):
            source.write_text("".join(f"{loc}\n" for loc in locations[:n]))
            time.sleep(0.3)  # every server re-reads it (every 0.1 s)
            start_at = time.time() + 3.0  # every consumer imported and connected
            procs = [subprocess.Popen(
                [sys.executable, "-m", "bench.node_scaling", "--consume", plan.id, str(r),
                 json.dumps(locations[:n]), str(start_at)], cwd=ROOT, stdout=subprocess.PIPE,
                text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                for r in range(WORLD)]
            outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
            for r, out in enumerate(outs):
                expected = [g for e in range(PASSES) for g in schedules[e][r]]
                if out["globals"] != expected:
                    raise RuntimeError(f"rank {r} with {n} server(s): batches differ from "
                                       "the schedule")
                if not set(out["servers"]) <= set(locations[:n]):
                    raise RuntimeError(f"rank {r} read from a server not listed")
            wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
            total = sum(len(o["globals"]) for o in outs)
            figures[n] = total / wall
            print(f"{n} server(s): {total} batches in {wall:.2f} s", flush=True)
    return figures


def _consume(plan_id: str, rank: str, locations: str, start_at: str) -> None:
    """One consumer: its rank's passes over Flight, timed from the shared start."""
    from windpipe.sdk._stream import FlightStream  # noqa: PLC0415 - the consumer's own process
    from windpipe.services.contract.wire import FlightCommand  # noqa: PLC0415

    stream = FlightStream(json.loads(locations))
    seen: list[int] = []
    # before the clock: a connection to every server, and every server has each epoch's
    # schedule (computed once per server and epoch), as in a long-running job
    for location in stream.locations:
        one = FlightStream([location])
        for epoch in range(PASSES):
            one.flight_info(FlightCommand(plan_id=plan_id, epoch=epoch, rank=int(rank),
                                          world_size=WORLD))
        one.close()
        stream.flight_info(FlightCommand(plan_id=plan_id, epoch=0, rank=int(rank),
                                         world_size=WORLD), dead=set(stream.locations)
                           - {location})
    time.sleep(max(0.0, float(start_at) - time.time()))
    started = time.time()
    for epoch in range(PASSES):
        command = FlightCommand(plan_id=plan_id, epoch=epoch, rank=int(rank), world_size=WORLD)
        for _, meta in stream.batches(command):
            seen.append(int(meta.global_batch))
    print(json.dumps({"globals": seen, "start": started, "end": time.time(),
                      "servers": sorted(stream.counters.gets)}))
    stream.close()


def main(argv: list[str] | None = None) -> None:
    """Measure and print the figures (or, with ``--consume``, be one consumer)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get(
        "WINDPIPE_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        help="a PostgreSQL database the bench may create a database from")
    parser.add_argument("--consume", nargs=4, metavar=("PLAN", "RANK", "LOCATIONS", "AT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.consume:
        _consume(*args.consume)
        return
    with tempfile.TemporaryDirectory(prefix="windpipe-node-scaling-") as tmp, \
            fresh_database(args.database_url) as url:
        figures = measure(url, Path(tmp))
    base = figures[1]
    print("node scaling: aggregate batches/s over Flight, 4 consumers, warm caches: "
          + ", ".join(f"{n} server(s) {v:.0f} ({v / base:.2f}x)" for n, v in figures.items())
          + f"; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
