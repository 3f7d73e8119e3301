"""The soak's faults: what each does to the deployment, which errors it explains, and
the seeded schedule they run on (one at a time, so an error is laid at one fault's door).

Each fault returns a :class:`FaultRecord`: when it began, when the deployment was whole
again from the operator's side (``restored_at``: the server restarted and answering,
the store fast again...); the figures add when every client it reached read a batch
again (``bench.soak.figures``).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.soak.deploy import Deployment, wait_ready

__all__ = ["ALL_FAULTS", "CONTROLS", "EXPLAINS", "FaultRecord", "Soak", "run_fault", "schedule"]

ALL_FAULTS = ("flight_kill", "client_kill", "catalog_restart", "postgres_restart",
              "store_slow", "store_pause", "token_revoke", "tier_full", "plan_retire")
# the error types (SDK exception class names) each fault explains, whether only in the
# client it was aimed at (``victim``), and whether for the rest of the run (``lasting``:
# a retired plan stays retired, and its reader meets it at its next pass, however late)
EXPLAINS: dict[str, tuple[frozenset[str], bool, bool]] = {
    "flight_kill": (frozenset({"Unavailable"}), False, False),
    "client_kill": (frozenset(), True, False),
    "catalog_restart": (frozenset({"Unavailable"}), False, False),
    "postgres_restart": (frozenset({"Unavailable"}), False, False),
    "store_slow": (frozenset({"Unavailable"}), False, False),
    "store_pause": (frozenset({"Unavailable"}), False, False),
    "token_revoke": (frozenset({"Unauthenticated"}), True, False),
    "tier_full": (frozenset({"Unavailable", "ResourceExhausted"}), False, False),
    "plan_retire": (frozenset({"Conflict"}), True, True),
}
RESTART_DELAY_S = 2.0  # a killed server comes back after this long (a pod's restart)
# the replicas and clients no fault restarts (while another of their kind is there to
# hit): each kind of process has one measured over the whole run (its RSS growth per
# hour; a process restarted every few minutes only ever shows its caches filling), while
# the others take the kills and restarts
CONTROLS = frozenset({"flight-3", "catalog-a", "client-local", "client-flight"})
STORE_SLOW = {"latency_s": 0.25, "bandwidth_bps": 2e6, "hold_s": 15.0}
STORE_PAUSE = {"latency_s": 8.0, "hold_s": 10.0}
TIER_FULL_HOLD_S = 15.0


@dataclass
class FaultRecord:
    """One fault as it ran."""

    kind: str
    target: str
    started_at: float
    restored_at: float = 0.0
    skipped: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Soak:
    """What a fault may act on: the deployment, the clients by name, and a token minter."""

    dep: Deployment
    clients: dict[str, Any]  # name -> Proc
    new_token: Callable[[str], None]  # mint and write a fresh token for a client
    rng: random.Random
    retired: set[str] = field(default_factory=set)


def _victims(names: Iterable[str]) -> list[str]:
    """Who a fault may hit: ``names`` but the controls, or all of them when every one is
    a control (a short soak of the two control clients)."""
    candidates = sorted(names)
    return [n for n in candidates if n not in CONTROLS] or candidates


def _flight_kill(soak: Soak, rec: FaultRecord) -> None:
    rec.target = soak.rng.choice(_victims(soak.dep.flights))
    _restart(soak, rec, signal.SIGKILL)


def _restart(soak: Soak, rec: FaultRecord, sig: int) -> None:
    proc = soak.dep.procs[rec.target]
    start = time.monotonic()
    proc.kill(sig)
    rec.notes["stop_s"] = round(time.monotonic() - start, 2)
    time.sleep(RESTART_DELAY_S)
    rec.notes["start_s"] = round(proc.start(), 2)


def _catalog_restart(soak: Soak, rec: FaultRecord) -> None:
    rec.target = soak.rng.choice(_victims(soak.dep.catalogs))
    _restart(soak, rec, signal.SIGTERM)


def _postgres_restart(soak: Soak, rec: FaultRecord) -> None:
    rec.target = "postgres"
    soak.dep.pg.stop("fast")
    time.sleep(RESTART_DELAY_S)
    soak.dep.pg.start()


def _store(soak: Soak, rec: FaultRecord, *, latency_s: float, hold_s: float,
           bandwidth_bps: float | None = None) -> None:
    rec.target = "store"
    proxy = soak.dep.proxy
    before = (proxy.latency_s, proxy._shared.rate)
    proxy.latency_s = latency_s
    if bandwidth_bps is not None:
        proxy._shared.rate = bandwidth_bps
    requests = proxy.stats.requests
    time.sleep(hold_s)
    proxy.latency_s, proxy._shared.rate = before
    rec.notes["store_requests_during"] = proxy.stats.requests - requests


def _client_kill(soak: Soak, rec: FaultRecord) -> None:
    # the DataLoader client is left alone: its workers' start-up (seconds of imports)
    # would dominate what the figure measures
    names = _victims(n for n in soak.clients if "loader" not in n)
    rec.target = soak.rng.choice(names)
    proc = soak.clients[rec.target]
    proc.kill(signal.SIGKILL)
    time.sleep(1.0)
    proc.start()


def _token_revoke(soak: Soak, rec: FaultRecord) -> None:
    from windpipe.catalog import principals  # noqa: PLC0415
    from windpipe.catalog.context import CatalogContext  # noqa: PLC0415

    names = sorted(n for n in soak.clients if "loader" not in n and "retire" not in n)
    rec.target = soak.rng.choice(names)
    engine = soak.dep.engine()
    try:
        principals.revoke_token(CatalogContext.from_engine(engine),
                                soak.dep.tokens[rec.target])
    finally:
        engine.dispose()
    # the victim is refused for a while (every server's token cache runs out), then an
    # operator hands it a new token
    time.sleep(6.0)
    soak.new_token(rec.target)


def _tier_full(soak: Soak, rec: FaultRecord) -> None:
    rec.target = "flight-3 tier"
    mount = soak.dep.tier_mount
    if mount is None:
        rec.skipped = "no size-limited file system for the tier (mounting a tmpfs needs root)"
        return
    filler = mount / "soak-filler"
    written = 0
    with filler.open("wb") as out:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                out.write(chunk)
                out.flush()
                written += len(chunk)
        except OSError:  # ENOSPC: the disk is full now
            pass
    rec.notes["filler_bytes"] = written
    time.sleep(TIER_FULL_HOLD_S)
    filler.unlink()


def _plan_retire(soak: Soak, rec: FaultRecord) -> None:
    plan = soak.dep.plans["retired"]
    rec.target = "client-retire"
    if plan in soak.retired:
        rec.skipped = "the plan was retired already"
        return
    url = soak.dep.catalogs["catalog-a"]
    answer = httpx.delete(f"{url}/v1/plans/{plan}", timeout=30.0,
                          headers={"authorization": f"Bearer {soak.dep.admin_token}"})
    answer.raise_for_status()
    soak.retired.add(plan)


_ACTIONS: dict[str, Callable[[Soak, FaultRecord], None]] = {
    "flight_kill": _flight_kill, "catalog_restart": _catalog_restart,
    "postgres_restart": _postgres_restart, "client_kill": _client_kill,
    "store_slow": lambda s, r: _store(s, r, **STORE_SLOW),
    "store_pause": lambda s, r: _store(s, r, **STORE_PAUSE),
    "token_revoke": _token_revoke, "tier_full": _tier_full, "plan_retire": _plan_retire,
}


def run_fault(soak: Soak, kind: str) -> FaultRecord:
    """Do one fault; wait until what it broke answers again."""
    rec = FaultRecord(kind=kind, target="", started_at=time.time())
    _ACTIONS[kind](soak, rec)
    if rec.target in soak.dep.procs or rec.target == "postgres":
        wait_ready(soak.dep, rec.target)
    rec.restored_at = time.time()
    return rec


def schedule(kinds: tuple[str, ...], *, seed: int, seconds: float,
             gap_s: float) -> list[tuple[float, str]]:
    """(offset in seconds, kind): every kind once in a seeded order, then again in a new
    order, as many as fit in ``seconds`` at one per ``gap_s`` (jittered by a fifth);
    the plan is retired once at most."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    at = gap_s * rng.uniform(0.4, 0.6)
    while True:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            if kind == "plan_retire" and any(k == kind for _, k in out):
                continue
            if at > seconds:
                return out
            out.append((round(at, 1), kind))
            at += gap_s * rng.uniform(0.8, 1.2)
        if not order:
            return out

