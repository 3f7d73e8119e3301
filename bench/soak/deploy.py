"""The deployment one host holds, for the soak: a private PostgreSQL, moto's S3 server
behind the latency proxy (so the store can be paused and slowed), two catalog replicas
and three Flight servers on their own loopback addresses (127.0.0.21-23) with their own
tiers, every server a ``windpipe serve`` process; plus the data, its plans and one token
per client.

The third Flight server's tier lives on a tmpfs of :data:`SMALL_TIER_BYTES` when this
process may mount one (root with CAP_SYS_ADMIN), so the soak can fill its disk for real
(``ENOSPC``); elsewhere the tier-full fault is skipped and the figures say so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from bench.latency_proxy import LatencyProxy
from bench.soak.postgres import PrivatePostgres
from bench.soak.processes import Proc, flight_ready, free_port_on, http_ready, wait_for
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["BUCKET", "FLIGHT_HOSTS", "SMALL_TIER_BYTES", "Deployment", "start_deployment"]

ROOT = Path(__file__).resolve().parents[2]
WINDPIPE = str(Path(sys.executable).with_name("windpipe"))
BUCKET = "soak"
FLIGHT_HOSTS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
SMALL_TIER_BYTES = 24 << 20  # the tmpfs of the third server's tier
TIER_BYTES = 16 << 20  # each tier's budget (the third one's fits its tmpfs)
CACHE_BYTES = 2 << 20  # each Flight server's chunk cache: smaller than the data, so
# batches keep reading the tier and the store
AUTH_CACHE_S = 2.0  # how long a Flight server trusts a checked token (revocation bound)
_CREDS = {"AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak",
          "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class Deployment:
    """Handles on every server of the soak (the clients are the runner's)."""

    work: Path
    pg: PrivatePostgres
    proxy: LatencyProxy
    procs: dict[str, Proc]
    catalogs: dict[str, str]  # role -> URL
    flights: dict[str, str]  # role -> grpc location
    admin_token: str
    env: dict[str, str]
    tier_mount: Path | None
    plans: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # client -> token name

    def engine(self) -> Any:
        from windpipe.services.database import create_engine  # noqa: PLC0415

        return create_engine(self.pg.url)


def _mount_tmpfs(where: Path, size: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, check=False)
    return done.returncode == 0


def _write_data(work: Path, endpoint: str, *, rows_per_cycle: int) -> None:
    data = write_synthetic_dataset(work / "synth", cells=4, cycles=8,
                                   rows_per_cycle=rows_per_cycle, zarr_fraction=0.0,
                                   row_group_rows=4096, hppc_every=100, eis_every=100)
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="soak",
                      aws_secret_access_key="soak", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(Path(data.path).rglob("*")):
        if path.is_file():
            s3.put_object(Bucket=BUCKET, Key=f"data/{path.relative_to(data.path).as_posix()}",
                          Body=path.read_bytes())


def start_deployment(stack: ExitStack, work: Path, *, rows_per_cycle: int,
                     tier_tmpfs: bool = True) -> Deployment:
    """Start every server (stopped by ``stack``), write and upload the data; with
    ``tier_tmpfs`` the third server's tier on a tmpfs when one can be mounted."""
    from windpipe.migrations import upgrade_database  # noqa: PLC0415

    # its own temporary directory: the postgres user (as root) may not enter ``work``
    pg_dir = Path(tempfile.mkdtemp(prefix="windpipe-soak-pg-"))
    stack.callback(shutil.rmtree, pg_dir, ignore_errors=True)
    pg = PrivatePostgres(pg_dir, free_port_on("127.0.0.1")).init()
    pg.start()
    stack.callback(lambda: pg.stop("immediate") if pg.pid() else None)
    upgrade_database(pg.url)
    procs: dict[str, Proc] = {}

    def stop_all() -> None:
        for proc in reversed(procs.values()):
            with suppress(Exception):
                proc.kill(15, wait_s=15)
    stack.callback(stop_all)

    moto_port = free_port_on("127.0.0.1")
    moto = Proc("moto", [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1",
                         "-p", str(moto_port)], env={**os.environ, **_CREDS},
                log=work / "moto.log", ready=http_ready(f"http://127.0.0.1:{moto_port}/"))
    procs["moto"] = moto
    moto.start()
    moto_url = f"http://127.0.0.1:{moto_port}"
    _write_data(work, moto_url, rows_per_cycle=rows_per_cycle)
    proxy = LatencyProxy(moto_url, latency_s=0.0, bandwidth_bps=1e10).start()
    stack.callback(proxy.stop)
    stack.callback(stop_all)  # the servers first: their connections to the proxy close

    admin = secrets.token_urlsafe(24)
    flight_ports = [free_port_on(h) for h in FLIGHT_HOSTS]
    locations = [f"grpc://{h}:{p}" for h, p in zip(FLIGHT_HOSTS, flight_ports, strict=True)]
    env = {**os.environ, **_CREDS, "WINDPIPE_DATABASE_URL": pg.url,
           "WINDPIPE_ADMIN_TOKEN": admin, "WINDPIPE_TICKET_SECRET": secrets.token_hex(16),
           "WINDPIPE_AUTH_CACHE_S": str(AUTH_CACHE_S), "WINDPIPE_S3_ENDPOINT": proxy.endpoint,
           "WINDPIPE_S3_ALLOW_HTTP": "true", "WINDPIPE_ALLOWED_ROOTS": f"s3://{BUCKET}/data",
           "WINDPIPE_LOG_LEVEL": "WARNING", "WINDPIPE_SHUTDOWN_GRACE_S": "3",
           "OMP_NUM_THREADS": "1"}
    location_flags = [arg for loc in locations for arg in ("--flight-location", loc)]
    catalogs: dict[str, str] = {}
    for role in ("catalog-a", "catalog-b"):
        port = free_port_on("127.0.0.1")
        url = f"http://127.0.0.1:{port}"
        procs[role] = Proc(role, [WINDPIPE, "serve", "catalog", "--host", "127.0.0.1",
                                  "--port", str(port), "--data-dir", str(work / role),
                                  *location_flags], env=env, log=work / f"{role}.log",
                           ready=http_ready(f"{url}/readyz"), cwd=ROOT)
        catalogs[role] = url
    tier_mount = work / "tier-3"
    mounted = tier_tmpfs and _mount_tmpfs(tier_mount, SMALL_TIER_BYTES)
    if mounted:
        stack.callback(lambda: subprocess.run(["umount", "-l", str(tier_mount)], check=False))
    flights: dict[str, str] = {}
    for n, (host, port, loc) in enumerate(zip(FLIGHT_HOSTS, flight_ports, locations,
                                              strict=True), start=1):
        role = f"flight-{n}"
        procs[role] = Proc(role, [
            WINDPIPE, "serve", "flight", "--flight-port", str(port),
            "--data-dir", str(work / role), "--tier-dir", str(work / f"tier-{n}"),
            "--tier-bytes", str(TIER_BYTES), "--cache-bytes", str(CACHE_BYTES),
            "--no-auto-blocks", *location_flags],
            env={**env, "WINDPIPE_FLIGHT_HOST": host}, log=work / f"{role}.log",
            ready=flight_ready(loc), cwd=ROOT)
        flights[role] = loc
    starting = [proc for proc in procs.values() if proc.popen is None]
    for proc in starting:  # all at once: each one's imports take seconds
        proc.start(wait=False)
    for proc in starting:
        proc.wait_ready()
    return Deployment(work=work, pg=pg, proxy=proxy, procs=procs, catalogs=catalogs,
                      flights=flights, admin_token=admin, env=env,
                      tier_mount=tier_mount if mounted else None)


def ready_check(dep: Deployment, role: str) -> bool:
    """Whether the server ``role`` (or PostgreSQL, ``postgres``) answers now."""
    if role == "postgres":
        return dep.pg.pid() is not None
    proc = dep.procs[role]
    return proc.alive() and (proc.ready is None or proc.ready())


def wait_ready(dep: Deployment, role: str, timeout_s: float = 120.0) -> float:
    """Seconds until ``role`` answers."""
    return wait_for(lambda: ready_check(dep, role), timeout_s, f"{role} to answer")
