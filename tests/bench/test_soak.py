"""The soak, short: the whole deployment (private PostgreSQL, moto S3 behind the latency
proxy, two catalog replicas, three Flight servers on their own loopback addresses) with
two clients (same-host and Flight) for three minutes and six faults, one of each kind: a
Flight server SIGKILLed and restarted, a client SIGKILLed mid-epoch and resumed from its
journal, a catalog replica and PostgreSQL restarted, the store paused, a token revoked.
No batch lost, duplicated or off the plan's schedule, no untyped error, every error
explained by a fault, every fault recovered from. ``python -m bench.soak`` runs it long
(docs/operations.md, "Soak")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.soak.client import read_journal
from bench.soak.postgres import pg_bin
from bench.soak.run import SoakOptions, run

pytestmark = pytest.mark.slow

CLIENTS = ("client-local", "client-flight")
FAULTS = ("flight_kill", "client_kill", "catalog_restart", "postgres_restart", "store_pause",
          "token_revoke")


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    try:
        pg_bin("initdb")
    except FileNotFoundError:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
    work = tmp_path_factory.mktemp("soak")
    opts = SoakOptions(seconds=180.0, seed=7, faults=FAULTS, clients=CLIENTS, warmup_s=10.0,
                       tail_s=40.0, gap_s=20.0, max_faults=len(FAULTS), rows_per_cycle=3000)
    return run(work, opts, say=lambda _s: None), work


def test_nothing_lost_or_duplicated_across_the_faults(
        soak: tuple[dict[str, Any], Path]) -> None:
    fig, _ = soak
    assert set(fig["clients"]) == set(CLIENTS)
    for name, client in fig["clients"].items():
        assert client["batches"] > 0, name
        assert (client["lost"], client["duplicated"], client["mismatched"]) == (0, 0, 0), name
    assert fig["untyped_errors"] == 0, fig["errors"]
    assert fig["unexplained_errors"] == 0, fig["errors"]


def test_every_fault_ran_and_was_recovered_from(soak: tuple[dict[str, Any], Path]) -> None:
    fig, work = soak
    kinds = {f["kind"] for f in fig["faults"]}
    assert kinds == set(FAULTS)
    assert not [f for f in fig["faults"] if f.get("skipped")]
    assert fig["all_recovered"], fig["faults"]
    killed = next(f["target"] for f in fig["faults"] if f["kind"] == "client_kill")
    starts = [r for r in read_journal(work / f"{killed}.jsonl") if r["k"] == "start"]
    assert len(starts) == 2  # SIGKILLed once, resumed from its journal
    assert (starts[1]["e"], starts[1]["i"]) != (0, 0)  # ... mid-run, not from the start
    server = next(f["target"] for f in fig["faults"] if f["kind"] == "flight_kill")
    assert fig["resources"][server]["incarnations"] == 2


def test_the_figures_cover_every_process_and_phase(soak: tuple[dict[str, Any], Path]) -> None:
    fig, _ = soak
    assert {"moto", "catalog-a", "catalog-b", "flight-1", "flight-2", "flight-3", "postgres",
            *CLIENTS} <= set(fig["resources"])
    assert all(r["rss_end_mib"] > 0 and r["fds_end"] > 0 for r in fig["resources"].values())
    assert fig["batch_latency_ms"]["quiet"]["n"] > 0
    assert fig["catalog_latency_ms"]["schedule"]["n"] > 0
