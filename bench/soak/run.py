"""The soak's run: the deployment up, the data registered and planned, one token per
client, the clients started, the faults on their seeded schedule, then the figures.

The clock: every client reads its first batch (start-up, not timed), ``warmup_s`` of
quiet, the faults one after another at their scheduled offsets, ``tail_s`` of quiet
for the last one to be recovered from, and the clients are stopped (SIGTERM: each ends
after its current batch). Every process's RSS and open files are sampled every
:data:`SAMPLE_S` seconds meanwhile.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.soak.client import ClientSpec, read_journal, spec_json
from bench.soak.deploy import BUCKET, ROOT, Deployment, start_deployment
from bench.soak.faults import ALL_FAULTS, FaultRecord, Soak, run_fault, schedule
from bench.soak.figures import figures
from bench.soak.processes import Proc, tree_usage, wait_for

__all__ = ["ROSTER", "SAMPLE_S", "SoakOptions", "run"]

SAMPLE_S = 5.0
# name: (plan, transport, rank, world size, DataLoader workers, catalog replica)
ROSTER: dict[str, tuple[str, str, int, int, int, str]] = {
    "client-local": ("main", "local", 0, 1, 0, "catalog-a"),
    "client-flight": ("main", "flight", 0, 1, 0, "catalog-b"),
    "client-flight2-r0": ("shuffled", "flight", 0, 2, 0, "catalog-a"),
    "client-flight2-r1": ("shuffled", "flight", 1, 2, 0, "catalog-b"),
    "client-local2-r0": ("shuffled", "local", 0, 2, 0, "catalog-b"),
    "client-local2-r1": ("shuffled", "local", 1, 2, 0, "catalog-a"),
    "client-loader": ("main", "flight", 0, 1, 2, "catalog-a"),
    "client-retire": ("retired", "flight", 0, 1, 0, "catalog-b"),
}


@dataclass(frozen=True, kw_only=True)
class SoakOptions:
    """How long, which faults, how much data."""

    seconds: float
    seed: int = 0
    faults: tuple[str, ...] = ALL_FAULTS
    clients: tuple[str, ...] = tuple(ROSTER)
    warmup_s: float = 15.0
    rss_warmup_s: float = 180.0  # a process's first minutes: its caches and arenas fill
    tail_s: float = 30.0
    gap_s: float = 30.0
    max_faults: int = 500
    rows_per_cycle: int = 8000


def _plans(dep: Deployment, seed: int) -> dict[str, str]:
    from windpipe.sdk import (  # noqa: PLC0415
        Catalog,
        DataWarning,
        LoaderConfig,
        ValidationConfig,
        WindowConfig,
    )

    inputs: dict[str, tuple[str, ...]] = {"cycling": ("current_a", "temperature_c")}
    targets: dict[str, tuple[str, ...]] = {"cycling": ("voltage_v",)}
    with Catalog(dep.catalogs["catalog-a"], token=dep.admin_token) as cat, \
            warnings.catch_warnings():
        # the synthetic data's nulls and cell overlap are by design: not the soak's news
        warnings.simplefilter("ignore", DataWarning)
        split = cat.register("soak", root=f"s3://{BUCKET}/data",
                             manifest="manifest.parquet").split(
            ValidationConfig.sample(fraction=0.2, seed=1))
        return {
            "main": split.plan(LoaderConfig(
                split="train", default_window=WindowConfig(batch_size=4, seq_len=128),
                inputs=inputs, targets=targets)).id,
            "shuffled": split.plan(LoaderConfig(
                split="train", strategy="shuffled", seed=seed,
                default_window=WindowConfig(batch_size=4, seq_len=96), inputs=inputs,
                targets=targets)).id,
            "retired": split.plan(LoaderConfig(
                split="train", strategy="shuffled", seed=seed + 1,
                default_window=WindowConfig(batch_size=2, seq_len=64), inputs=inputs,
                targets=targets)).id,
        }


class _Tokens:
    """One reader token per client, written to its token file; renewed after a revoke."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.count: dict[str, int] = {}

    def file(self, client: str) -> Path:
        return self.dep.work / f"{client}.token"

    def new(self, client: str) -> None:
        from windpipe.catalog import principals  # noqa: PLC0415
        from windpipe.catalog.context import CatalogContext  # noqa: PLC0415

        self.count[client] = self.count.get(client, 0) + 1
        name = f"{client}-{self.count[client]}"
        engine = self.dep.engine()
        try:
            _, text = principals.create_token(CatalogContext.from_engine(engine), name=name,
                                              role="reader", created_by="soak")
        finally:
            engine.dispose()
        tmp = self.file(client).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.file(client))
        self.dep.tokens[client] = name


def _clients(dep: Deployment, opts: SoakOptions, tokens: _Tokens,
             until: float) -> dict[str, Proc]:
    env = {k: v for k, v in dep.env.items()
           if k not in ("WINDPIPE_ADMIN_TOKEN", "WINDPIPE_TICKET_SECRET")}
    out = {}
    for name in opts.clients:
        plan, transport, rank, world, workers, replica = ROSTER[name]
        tokens.new(name)
        spec = ClientSpec(name=name, catalog_url=dep.catalogs[replica],
                          token_file=str(tokens.file(name)), plan_id=dep.plans[plan],
                          fallback_plan_id=dep.plans["main"], transport=transport, rank=rank,
                          world_size=world, workers=workers,
                          journal=str(dep.work / f"{name}.jsonl"), until=until,
                          flight_locations=tuple(dep.flights.values()))
        path = dep.work / f"{name}.json"
        path.write_text(spec_json(spec))
        out[name] = Proc(name, [sys.executable, "-m", "bench.soak.client", str(path)],
                         env=env, log=dep.work / f"{name}.log", cwd=ROOT)
    return out


class _Sampler(threading.Thread):
    """Every process's RSS and open files every :data:`SAMPLE_S` (PostgreSQL: the
    postmaster and its backends, a new incarnation whenever its pid changes)."""

    def __init__(self, procs: list[Proc], dep: Deployment) -> None:
        super().__init__(daemon=True, name="soak-sampler")
        self.procs = procs
        self.dep = dep
        self.stop = threading.Event()
        self.pg: list[dict[str, Any]] = []
        self._pg_pid: int | None = None

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        now = time.time()
        for proc in self.procs:
            proc.sample(now)
        pid = self.dep.pg.pid()
        usage = tree_usage(pid) if pid else None
        if usage is None or pid is None:
            return
        if pid != self._pg_pid:
            self._pg_pid = pid
            self.pg.append({"started_at": now, "samples": []})
        self.pg[-1]["samples"].append({"at": now, **usage})


def _first_batches(clients: dict[str, Proc], timeout_s: float) -> None:
    def every_client_read() -> bool:
        for proc in clients.values():
            if not proc.alive():
                raise RuntimeError(f"{proc.role} ended during start-up: "
                                   + proc.log.read_text(errors="replace")[-1500:])
        return all(any(r["k"] == "batch" for r in read_journal(
            Path(str(proc.log).removesuffix(".log") + ".jsonl"))) for proc in clients.values())
    wait_for(every_client_read, timeout_s, "every client's first batch")


def run(work: Path, opts: SoakOptions, *, say: Any = print) -> dict[str, Any]:
    """Run the soak in ``work``; its figures (see ``bench.soak.figures``)."""
    fault_span = opts.seconds - opts.warmup_s - opts.tail_s
    plan = schedule(opts.faults, seed=opts.seed, seconds=max(0.0, fault_span),
                    gap_s=opts.gap_s)[: opts.max_faults]
    with ExitStack() as stack:
        say("starting the deployment (PostgreSQL, moto S3, 2 catalogs, 3 Flight servers)")
        t0 = time.time()
        dep = start_deployment(stack, work, rows_per_cycle=opts.rows_per_cycle,
                               tier_tmpfs="tier_full" in opts.faults)
        say(f"deployment up in {time.time() - t0:.1f} s; registering and planning")
        dep.plans = _plans(dep, opts.seed)
        tokens = _Tokens(dep)
        until = time.time() + opts.seconds + 600  # the clients' own bound; SIGTERM ends them
        clients = _clients(dep, opts, tokens, until)
        for proc in clients.values():
            stack.callback(proc.kill, 9)
            proc.start()
        say(f"{len(clients)} client processes started; waiting for their first batches")
        _first_batches(clients, 300.0)
        say(f"every client read its first batch {time.time() - t0:.1f} s after the start")
        sampler = _Sampler([*dep.procs.values(), *clients.values()], dep)
        sampler.sample()
        sampler.start()
        stack.callback(sampler.stop.set)
        started = time.time()
        if not plan:
            say(f"no fault fits: {opts.seconds:.0f} s leave none after {opts.warmup_s:.0f} s "
                f"of warm-up and {opts.tail_s:.0f} s of tail (faults every {opts.gap_s:.0f} s)")
        say(f"soak clock started; {len(plan)} faults over {fault_span:.0f} s: "
            + ", ".join(f"{at:.0f}s {kind}" for at, kind in plan))
        soak = Soak(dep=dep, clients=clients, new_token=tokens.new,
                    rng=random.Random(opts.seed))
        records: list[FaultRecord] = []
        for at, kind in plan:
            time.sleep(max(0.0, started + opts.warmup_s + at - time.time()))
            rec = run_fault(soak, kind)
            records.append(rec)
            say(f"{rec.started_at - started:7.1f}s {kind} on {rec.target}: restored in "
                f"{rec.restored_at - rec.started_at:.1f} s"
                + (f" (skipped: {rec.skipped})" if rec.skipped else ""))
        time.sleep(max(0.0, started + opts.seconds - time.time()))
        sampler.stop.set()
        sampler.sample()
        ended = time.time()
        for proc in clients.values():
            proc.kill(15, wait_s=60)
        journals = {name: read_journal(work / f"{name}.jsonl") for name in clients}
        histories = {role: p.incarnation_history()
                     for role, p in {**dep.procs, **clients}.items()}
        histories["postgres"] = sampler.pg
        (work / "samples.json").write_text(json.dumps(histories))
        return {"seed": opts.seed, "cpus": os.cpu_count(), "faults_planned": len(plan),
                "tier_fs": "tmpfs" if dep.tier_mount else "none",
                **figures(journals=journals, faults=records, histories=histories,
                          warmup_s=opts.warmup_s, rss_warmup_s=opts.rss_warmup_s,
                          started_at=started, ended_at=ended)}
