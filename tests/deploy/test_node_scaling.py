"""Aggregate Flight throughput per node count (1, 2, 3 servers), on one machine.

Why a test: docs/deploy.md sizes a deployment from these ratios, so they are measured
the way a deployment runs, not estimated: the catalog on PostgreSQL; each "node" a
``windpipe serve flight`` process of its own (its own GIL and cores) on 127.0.0.11 /
.12 / .13, every server routing endpoints over the servers a ``file://`` discovery source
lists (the test writes 1, 2, then 3 locations there); four consumer
processes (the ranks of a world of 4) reading their passes over Flight at once, with
the split warmed into every server's cache first (``plan.warm``), so storage is out
of the figure. Every rank's batches are checked
against ``GET /v1/plans/{id}/schedule``. Run with ``-s`` to see the figures::

    .venv/bin/python -m pytest -q -p no:cacheprovider -s tests/deploy/test_node_scaling.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pyarrow.flight as fl
import pytest

from sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
from services.settings import Settings
from services.synth import write_synthetic_dataset
from tests.deploy.test_multi_node import _free_port_on, _schedule, _wait_for
from tests.fixtures.servers import run_catalog_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
WINDPIPE = str(Path(sys.executable).parent / "windpipe")
HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
WORLD = 4
PASSES = 4  # epochs each consumer reads per count
CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=128),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
)


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
             "--flight-discovery", f"file://{source}", "--flight-discovery-s", "0.1"],
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


def test_aggregate_flight_throughput_per_node_count(postgres_url: str, tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path / "synth", cells=6, cycles=6, rows_per_cycle=3000)
    settings = Settings(database_url=postgres_url, data_dir=tmp_path / "catalog",
                        log_level="WARNING")
    source = tmp_path / "flight-servers.txt"
    source.write_text("")
    figures: dict[int, float] = {}
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(settings))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
        with Catalog(url) as cat:
            plan = cat.register("scaling", root=str(data.path), manifest="manifest.parquet"
                                ).split(ValidationConfig.sample(fraction=0.2, seed=1)
                                        ).plan(CONFIG)
        schedules = [[_schedule(client, plan.id, e, r) for r in range(WORLD)]
                     for e in range(PASSES)]
        locations = _start_servers(stack, postgres_url, tmp_path, source)
        with Catalog(url, flight_locations=locations) as cat:
            cat.plan(plan.id).warm(progress=False)  # every server holds the split
        for n in (1, 2, 3):
            source.write_text("".join(f"{loc}\n" for loc in locations[:n]))
            time.sleep(0.3)  # every server re-reads it (every 0.1 s)
            start_at = time.time() + 3.0  # every consumer imported and connected
            procs = [subprocess.Popen(
                [sys.executable, __file__, plan.id, str(r), json.dumps(locations[:n]),
                 str(start_at)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
                for r in range(WORLD)]
            outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
            for r, out in enumerate(outs):
                assert out["globals"] == [g for e in range(PASSES) for g in schedules[e][r]]
                assert set(out["servers"]) <= set(locations[:n])
            wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
            total = sum(len(o["globals"]) for o in outs)
            figures[n] = total / wall
            print(f"\n{n} server(s): {total} batches in {wall:.2f} s")
    base = figures[1]
    print("\nnode scaling: aggregate batches/s over Flight, 4 consumers, warm caches: "
          + ", ".join(f"{n} server(s) {v:.0f} ({v / base:.2f}x)" for n, v in figures.items())
          + f"; {os.cpu_count()} CPUs")
    assert all(v > 0 for v in figures.values())


def _consume() -> None:
    """One consumer: its rank's passes over Flight, timed from the shared start."""
    plan_id, rank, locations, start_at = sys.argv[1:5]
    from sdk._stream import FlightStream  # noqa: PLC0415 - the consumer's own process
    from services.contract.wire import FlightCommand  # noqa: PLC0415

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


if __name__ == "__main__":
    _consume()
