"""Issue 23's multi-node run on one machine, with real parts only.

The catalog on PostgreSQL, the data in moto's S3 (registered from ``s3://``), three
"nodes" (a Flight server each on 127.0.0.11 / .12 / .13 with its own tier directory)
and a ``torch.distributed`` job (gloo, 2 nodes x 2 ranks, four subprocesses running
this file) training a tiny model through the SDK with all-reduced gradients.

Epoch 0 runs clean (throughput); in epoch 1 the node on 127.0.0.12 is stopped while the
ranks stream, and they fail over. In both epochs every rank's batches must be exactly
its pass in ``GET /v1/plans/{id}/schedule`` (0 lost, 0 duplicated across ranks).
A second test runs two catalog replicas on one PostgreSQL registering the same content
at once: one version, one row. The figures printed here are in docs/deploy.md.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import torch
import torch.distributed as dist

from flight_server.runner import start_flight_server
from sdk import Batch, Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig
from services.settings import Settings
from services.synth import write_synthetic_dataset
from tests.fixtures.servers import free_port, run_catalog_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3]

ROOT = Path(__file__).resolve().parents[2]
NODE_HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
WORLD = 4  # 2 nodes x 2 ranks
VICTIM = 1  # the node stopped mid-epoch 1
KILL_AFTER = 4  # batches rank 0 has consumed in epoch 1 before the kill
RANK_TIMEOUT_S = 75.0
PAUSE_S = 0.05  # each rank's pause after a batch of epoch 1
CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
)


def _free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _settings(database_url: str, s3_endpoint: str, data_dir: Path, **extra: Any) -> Settings:
    return Settings(database_url=database_url, data_dir=data_dir, s3_endpoint=s3_endpoint,
                    s3_allow_http=True, log_level="WARNING", **extra)


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


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s} s for {what}")
        time.sleep(0.02)


def _progress(out_dir: Path, rank: int, epoch: int) -> int:
    path = out_dir / f"progress-{rank}-{epoch}"
    return int(path.read_text() or 0) if path.exists() else 0


def test_two_nodes_of_ranks_over_three_flight_servers_lose_nothing_when_one_dies(
        postgres_url: str, s3_server: Any, tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path / "synth", cells=4, cycles=6, rows_per_cycle=600)
    root = s3_server.upload_dir(data.path, s3_server.unique_prefix("multi-node"))
    ports = [_free_port_on(host) for host in NODE_HOSTS]
    locations = [f"grpc://{h}:{p}" for h, p in zip(NODE_HOSTS, ports, strict=True)]
    base = _settings(postgres_url, s3_server.endpoint_url, tmp_path / "catalog",
                     flight_locations=tuple(locations), endpoint_batches=2)
    out_dir = tmp_path / "ranks"
    out_dir.mkdir()
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(base))
        flights = []
        for i, (host, port) in enumerate(zip(NODE_HOSTS, ports, strict=True)):
            node = base.model_copy(update={
                "flight_host": host, "data_dir": tmp_path / f"node{i}",
                "tier_dir": tmp_path / f"node{i}" / "tier", "tier_bytes": 256 << 20})
            running = start_flight_server(node, port=port, cache_bytes=64 << 20)
            stack.callback(running.stop, grace_s=5.0)
            flights.append(running)
        assert [f.location for f in flights] == locations
        cat = Catalog(url)
        stack.callback(cat.close)
        ver = cat.register("multi-node", root=root, manifest="manifest.parquet")
        plan = ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(CONFIG)
        report = plan.report(world_size=WORLD)
        client = stack.enter_context(httpx.Client(base_url=url, timeout=30.0))
        schedules = {e: [_schedule(client, plan.id, e, r) for r in range(WORLD)]
                     for e in (0, 1)}
        assert [len(s) for s in schedules[0]] == report["batches_per_rank"]
        per_rank = len(schedules[0][0])
        assert per_rank > 3 * KILL_AFTER

        master_port = free_port()
        procs = []
        for rank in range(WORLD):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(master_port), "RANK": str(rank),
                   "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank % 2),
                   "WP_URL": url, "WP_PLAN": plan.id, "WP_OUT": str(out_dir),
                   "OMP_NUM_THREADS": "1"}
            log = (out_dir / f"log-{rank}.txt").open("w")
            stack.callback(log.close)
            proc = subprocess.Popen([sys.executable, __file__], env=env, cwd=ROOT,
                                    stdout=log, stderr=subprocess.STDOUT)
            stack.callback(proc.kill)
            procs.append(proc)

        def logs() -> str:
            return "\n".join((out_dir / f"log-{r}.txt").read_text() for r in range(WORLD))

        def ranks_failed() -> bool:
            return any(p.poll() not in (None, 0) for p in procs)

        # epoch 1: stop node .12 once rank 0 is a few batches in
        try:
            _wait_for(lambda: ranks_failed() or _progress(out_dir, 0, 1) >= KILL_AFTER,
                      RANK_TIMEOUT_S, "rank 0 to stream epoch 1")
        except TimeoutError:
            pytest.fail(f"ranks did not reach epoch 1:\n{logs()}")
        assert not ranks_failed(), logs()
        killed_at = time.time()
        flights[VICTIM].stop(grace_s=0.0)
        kill_progress = [_progress(out_dir, r, 1) for r in range(WORLD)]
        for proc in procs:
            try:
                proc.wait(timeout=RANK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"a rank did not finish in time:\n{logs()}")
        assert [p.returncode for p in procs] == [0] * WORLD, logs()

    results = [json.loads((out_dir / f"rank-{r}.json").read_text()) for r in range(WORLD)]
    for epoch in (0, 1):
        seen = [results[r]["epochs"][str(epoch)] for r in range(WORLD)]
        for r in range(WORLD):
            assert [b["global"] for b in seen[r]] == schedules[epoch][r]
            assert [b["batch_idx"] for b in seen[r]] == list(range(per_rank))
        union = [b["global"] for s in seen for b in s]
        assert len(union) == len(set(union)) == WORLD * per_rank  # 0 duplicated
        assert sorted(union) == sorted(g for s in schedules[epoch] for g in s)  # 0 lost
        digests = [b["digest"] for s in seen for b in s]
        assert len(set(digests)) == len(digests)
    for res in results:
        assert all(math.isfinite(x) for x in res["losses"])
    # the all-reduced model is the same on every rank
    assert len({res["weights"] for res in results}) == 1
    assert sum(res["failovers"][1] for res in results) >= 1
    assert kill_progress[0] < per_rank  # the kill landed mid-epoch

    stalls = []
    for res in results:
        after = [t for t in res["times"]["1"] if t > killed_at]
        if after:
            stamps = [killed_at, *after]
            stalls.append(max(b - a for a, b in itertools.pairwise(stamps)))
    failover_s = max(stalls)
    e0 = [res["epoch_s"]["0"] for res in results]
    checked = 2 * WORLD * per_rank
    print(f"\nmulti-node: {checked} batches checked ({WORLD} ranks x {per_rank} x 2 epochs, "
          f"0 lost, 0 duplicated); epoch 0 {WORLD * per_rank / max(e0):.0f} batches/s "
          f"aggregate over 3 Flight servers; failover after the kill "
          f"{failover_s:.2f} s (longest gap, {PAUSE_S} s of it the ranks' pause); failovers "
          f"{[res['failovers'][1] for res in results]}")


def test_two_catalog_replicas_registering_the_same_content_at_once_make_one_version(
        postgres_url: str, s3_server: Any, tmp_path: Path) -> None:
    data = write_synthetic_dataset(tmp_path / "synth", cells=2, cycles=3, rows_per_cycle=200)
    root = s3_server.upload_dir(data.path, s3_server.unique_prefix("replicas"))
    settings = [_settings(postgres_url, s3_server.endpoint_url, tmp_path / f"cat{i}")
                for i in range(2)]
    with run_catalog_server(settings[0]) as url_a, run_catalog_server(settings[1]) as url_b:
        start = threading.Barrier(2, timeout=30)
        ids: list[str] = []
        errors: list[BaseException] = []

        def register(url: str) -> None:
            try:
                cat = Catalog(url)
                start.wait()
                ids.append(cat.register("replicated", root=root,
                                        manifest="manifest.parquet").id)
                cat.close()
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=register, args=(u,)) for u in (url_a, url_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert len(ids) == 2
        assert ids[0] == ids[1]
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT count(*) FROM versions").fetchone()
    assert rows == (1,)


# --- one rank of the torch.distributed job (run as a subprocess: python <this file>) ---


def _rank_main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = Path(os.environ["WP_OUT"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    cat = Catalog(os.environ["WP_URL"])
    stream = cat.flight()
    plan = cat.plan(os.environ["WP_PLAN"])
    result: dict[str, Any] = {"epochs": {}, "times": {}, "epoch_s": {}, "losses": [],
                              "failovers": []}
    for epoch in (0, 1):
        dist.barrier()
        seen, stamps = [], []
        before = stream.counters.failovers
        started = time.perf_counter()
        for batch in plan.batches(epoch=epoch, rank=rank, world_size=world,
                                  transport="flight"):
            assert isinstance(batch, Batch)
            # the synthetic data has nulls and infinities on purpose: train on finite lanes
            finite = torch.isfinite(batch.inputs).all(-1, keepdim=True) & torch.isfinite(
                batch.targets)
            mask = (batch.mask.unsqueeze(-1) & finite).float()
            inputs = torch.nan_to_num(batch.inputs, nan=0.0, posinf=0.0, neginf=0.0)
            targets = torch.nan_to_num(batch.targets, nan=0.0, posinf=0.0, neginf=0.0)
            loss = (((model(inputs) - targets) ** 2) * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                p.grad /= world
            opt.step()
            state = batch.state
            digest = hashlib.sha256(repr((state.split, state.manifest_row_ids,
                                          state.window_offsets, state.group_keys)).encode()
                                    + batch.inputs.numpy().tobytes()).hexdigest()
            seen.append({"batch_idx": state.batch_idx, "global": state.global_batch,
                         "digest": digest})
            stamps.append(time.time())
            result["losses"].append(float(loss))
            (out / f"progress-{rank}-{epoch}").write_text(str(len(seen)))
            if epoch == 1:
                time.sleep(PAUSE_S)  # keep the ranks streaming while a node is stopped
        result["epoch_s"][str(epoch)] = time.perf_counter() - started
        result["epochs"][str(epoch)] = seen
        result["times"][str(epoch)] = stamps
        result["failovers"].append(stream.counters.failovers - before)
    result["weights"] = repr([p.detach().tolist() for p in model.parameters()])
    (out / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    cat.close()


if __name__ == "__main__":
    _rank_main()
