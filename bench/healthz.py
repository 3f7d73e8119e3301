"""``/healthz`` latency while one heavy request runs: is the catalog's liveness answer
still quick (under 0.2 s) whatever a single caller asks of it?

    .venv/bin/python -m bench.healthz                       # SQLite, ~40 s
    .venv/bin/python -m bench.healthz --database-url postgresql://postgres@127.0.0.1:5432/test

writes ``--cells`` x ``--cycles`` small parquet segments in one folder, named for a
10-field pattern, plus one 240-character name of 115 ``_`` (``bench/pattern_match.py``'s),
serves a catalog (``start_catalog_server``, port 0) in a process of its own (on
PostgreSQL: a fresh database, dropped after), and polls ``GET /healthz`` every
``--interval-ms`` from a third process while this one sends, one kind at a time: a
registration by pattern, by a manifest file, by inline rows, and one of
``--big-inline`` rows naming missing files (refused once decoded: what decoding such a
body costs); a split, its statistics, a plan and every page of its schedule
(``page_size=1000``); and ``--concurrent`` identical registrations at once (one job).
Separate processes, so neither the caller's nor the poller's Python shares the server's
GIL.

Prints each kind's seconds, ``/healthz``'s p50, p99 and max during it, and the server's
longest garbage collection meanwhile (CPython's collector runs on whichever thread
allocates, holding the GIL: the event loop waits it out). ``--json PATH`` writes them
too. The server freezes its startup heap once started, as ``windpipe serve`` does
(``windpipe.services.runtime.freeze_startup_heap``); ``--no-gc-freeze`` leaves it to every full
collection, to compare. ``--diagnose``: the server samples its event-loop thread
whenever the loop is over 50 ms late and prints where it was (a stack on the loop: work
on the loop; the loop in ``select``: the GIL held elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.databases import fresh_database
from bench.pattern_match import CELL
from windpipe.services.contract.configs import LoaderConfig, ValidationConfig, WindowConfig

__all__ = ["BOUND_MS", "main", "run", "write_segments"]

BOUND_MS = 200.0
PATTERN = "seg/{cell_id}_{cidx}_{a}_{b}_{c}_{d}_{e}_{f}_{g}-{h}.parquet"
LONG_NAME = f"{CELL}_17_a_b_c_d_e_f_g-h.parquet"
_WAIT = {"Prefer": "wait=120"}  # a registration answers in place, not with a job
_LATE_S = 0.05
_IDLE = frozenset({"wait", "select", "_worker", "_recv", "recv", "get", "sleep"})
_CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=32),
    inputs={"cycling": ("current_a",)}, targets={"cycling": ("voltage_v",)})


def write_segments(root: Path, *, cells: int, cycles: int, rows: int) -> list[dict[str, Any]]:
    """``cells * cycles`` parquet segments of ``rows`` rows under ``root/seg`` named for
    :data:`PATTERN`, plus one named :data:`LONG_NAME`; returns their manifest rows."""
    (root / "seg").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    current = np.where(np.arange(rows) < rows // 2, 2.0, -2.0).astype(np.float32)
    names = [(f"c{cell:04d}", cidx) for cell in range(cells) for cidx in range(cycles)]
    manifest = []
    for cell_id, cidx in [*names, (CELL, 17)]:
        rel = (f"seg/{cell_id}_{cidx}_a_b_c_d_e_f_g-h.parquet" if cell_id != CELL
               else f"seg/{LONG_NAME}")
        noise = rng.normal(0.0, 0.01, rows).astype(np.float32)
        pq.write_table(pa.table({
            "time_s": np.arange(rows, dtype=np.float64) + cidx * rows,
            "current_a": current + noise,
            "voltage_v": (3.6 + 0.4 * np.cumsum(current + noise) / rows).astype(np.float32),
        }), root / rel)
        manifest.append({"set_id": "rows", "cell_id": cell_id, "cidx": cidx,
                         "protocol": "cycling", "segment_path": rel})
    return manifest


# --- the server, in a process of its own -----------------------------------------------

def _watch_loop(loop: asyncio.AbstractEventLoop, loop_ident: int, samples: Counter[str],
                stop: threading.Event) -> None:
    """Stamp the loop every 5 ms; when a stamp is over ``_LATE_S`` old, count where the
    loop thread is (and, when it is idle in ``select``, where the other threads are)."""
    last = [time.perf_counter()]

    def beat() -> None:
        last[0] = time.perf_counter()
        if not stop.is_set():
            loop.call_later(0.005, beat)

    loop.call_soon_threadsafe(beat)
    me = threading.get_ident()
    while not stop.wait(0.005):
        if time.perf_counter() - last[0] < _LATE_S:
            continue
        frames = sys._current_frames()
        full = traceback.extract_stack(frames[loop_ident])
        stack = [f for f in full if not f.filename.startswith("<frozen")][-4:]
        where = " < ".join(f"{Path(f.filename).name}:{f.name}" for f in reversed(stack))
        if full and full[-1].filename.startswith("<frozen importlib"):
            where = f"importing, in {where}"
        elif stack and stack[-1].name == "select":
            others = [traceback.extract_stack(f)[-3:] for t, f in frames.items()
                      if t not in (me, loop_ident)]
            busy = [" < ".join(f"{Path(x.filename).name}:{x.name}" for x in reversed(s))
                    for s in others if s and s[-1].name not in _IDLE]
            where = "loop waits for the GIL; busy: " + (" | ".join(busy) or "none seen")
        samples[where] += 1


def _gc_pauses(pauses: list[tuple[int, float]]) -> None:
    """Append ``(generation, seconds)`` of every collection of this process to ``pauses``."""
    started: dict[int, float] = {}

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[threading.get_ident()] = time.perf_counter()
        elif (t0 := started.pop(threading.get_ident(), None)) is not None:
            pauses.append((int(info["generation"]), time.perf_counter() - t0))

    gc.callbacks.append(note)


def _server_main(settings: dict[str, Any], options: dict[str, bool], conn: Any) -> None:
    """Serve the catalog; answer ``"samples"`` (collections and late-loop samples since
    last asked) and ``"stop"``."""
    from windpipe.catalog.api.server import start_catalog_server  # noqa: PLC0415 - child only
    from windpipe.services.logging import configure_logging  # noqa: PLC0415
    from windpipe.services.runtime import freeze_startup_heap  # noqa: PLC0415
    from windpipe.services.settings import Settings  # noqa: PLC0415

    configure_logging(level="WARNING")
    server = start_catalog_server(Settings(**settings), port=0)
    if options["gc_freeze"]:
        freeze_startup_heap()
    pauses: list[tuple[int, float]] = []
    _gc_pauses(pauses)
    samples: Counter[str] = Counter()
    stop = threading.Event()
    if options["diagnose"]:
        loop = server.server.servers[0].get_loop()
        watch = threading.Thread(target=_watch_loop, daemon=True, name="loop-watch", args=(
            loop, server.thread.ident, samples, stop))
        watch.start()
    conn.send(server.url)
    try:
        while conn.recv() != "stop":
            conn.send({"gc": list(pauses), "late": dict(samples)})
            pauses.clear()
            samples.clear()
    finally:
        stop.set()
        server.stop(grace_s=5.0)
        conn.send("stopped")


def _poll_main(url: str, interval_s: float, conn: Any) -> None:
    """Between ``"start"`` and ``"stop"``, GET ``/healthz`` every ``interval_s`` and send
    back each answer's seconds (a failed one counts as ``inf``)."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        client.get("/healthz")
        conn.send("ready")
        while conn.recv() == "start":
            seconds: list[float] = []
            while not conn.poll():
                start = time.perf_counter()
                try:
                    ok = client.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.perf_counter() - start
                seconds.append(took if ok else float("inf"))
                time.sleep(max(0.0, interval_s - took))
            conn.recv()
            conn.send(seconds)


class _Child:
    """A spawned process and its end of a pipe."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=target, args=(*args, child), daemon=True)
        self.process.start()
        child.close()

    def ask(self, msg: str, timeout_s: float = 120.0) -> Any:
        if msg:
            self.conn.send(msg)
        if not self.conn.poll(timeout_s):
            raise RuntimeError(f"{self.process.name} did not answer {msg!r}")
        return self.conn.recv()

    def close(self) -> None:
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)


# --- the requests ------------------------------------------------------------------------

def _ok(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 300:
        raise RuntimeError(f"{response.request.url.path}: {response.status_code} "
                           f"{response.text[:500]}")
    body: dict[str, Any] = response.json()
    return body


async def _many(url: str, name: str, body: dict[str, Any], n: int) -> list[int]:
    """``n`` identical registrations sent at once; their status codes."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=300.0, limits=limits) as client:
        answers = await asyncio.gather(*[
            client.post(f"/v1/datasets/{name}/versions", json=body, headers=_WAIT)
            for _ in range(n)])
    for answer in answers:
        _ok(answer)
    return [a.status_code for a in answers]


def _kinds(client: httpx.Client, url: str, root: Path, rows: list[dict[str, Any]], *,
           repeats: int, concurrent: int,
           big_inline: int) -> list[tuple[str, Callable[[], Any]]]:
    """Each heavy kind as ``(label, call)``, in the order they run (later ones use what
    earlier ones made)."""
    uri = root.resolve().as_uri()
    made: dict[str, Any] = {}
    inline = json.dumps({"root": uri, "rows": rows}).encode()
    missing = json.dumps({"root": uri, "rows": [
        {**rows[i % len(rows)], "cidx": i, "segment_path": f"missing/{i}.parquet"}
        for i in range(big_inline)]}).encode()

    def register(name: str, content: bytes | None = None, **body: Any) -> None:
        made[name] = _ok(client.post(
            f"/v1/datasets/{name}/versions", content=content,
            json=None if content else {"root": uri, **body},
            headers={**_WAIT, "Content-Type": "application/json"}))

    def refused(name: str, content: bytes) -> None:
        answer = client.post(f"/v1/datasets/{name}/versions", content=content,
                             headers={**_WAIT, "Content-Type": "application/json"})
        if answer.status_code != 422:
            raise RuntimeError(f"{name}: {answer.status_code}, not 422: {answer.text[:500]}")

    def manifest_file() -> None:
        pq.write_table(pa.Table.from_pylist([{**r, "set_id": "file"} for r in rows]),
                       root / "manifest.parquet")
        register("by-file", manifest="manifest.parquet")

    def split() -> None:
        version = made["by-pattern"]["id"]
        made["splits"] = [_ok(client.post(
            f"/v1/versions/{version}/splits",
            json=ValidationConfig.sample(0.2, seed=s).model_dump(mode="json")))["id"]
            for s in range(repeats)]

    def stats() -> None:
        for split_id in made["splits"]:
            _ok(client.post(f"/v1/splits/{split_id}/stats", json={"side": "train"}))

    def plan() -> None:
        made["plans"] = [_ok(client.post(f"/v1/splits/{s}/plans",
                                         json=_CONFIG.planning_dict()))["id"]
                         for s in made["splits"]]

    def schedule() -> None:
        pages = 0
        for epoch in range(repeats):
            token = None
            while True:
                params: dict[str, Any] = {"epoch": epoch, "page_size": 1000}
                if token:
                    params["page_token"] = token
                token = _ok(client.get(f"/v1/plans/{made['plans'][0]}/schedule",
                                       params=params))["next_page_token"]
                pages += 1
                if not token:
                    break
        made["pages"] = pages

    n = len(rows)
    return [
        ("idle (no request)", lambda: time.sleep(1.0)),
        (f"register by pattern, {n} files", lambda: register(
            "by-pattern", pattern=PATTERN, set_id="pattern")),
        (f"register by manifest file, {n} rows", manifest_file),
        (f"register by inline rows, {n} rows ({len(inline) >> 10} KiB)",
         lambda: register("by-rows", content=inline)),
        *([(f"refused inline rows, {big_inline} rows ({len(missing) >> 20} MiB)",
            lambda: refused("missing", missing))] if big_inline else []),
        (f"split x{repeats}", split),
        (f"split stats x{repeats}", stats),
        (f"plan x{repeats}", plan),
        (f"schedule pages x{repeats} epochs", schedule),
        (f"{concurrent} identical registrations", lambda: made.__setitem__(
            "codes", asyncio.run(_many(url, "dedup", {"root": uri, "pattern": PATTERN,
                                                     "set_id": "dedup"}, concurrent)))),
    ]


def _figures(label: str, seconds: float, polls: list[float]) -> dict[str, Any]:
    ms = sorted(p * 1e3 for p in polls)
    top = ms[-1] if ms else float("nan")
    return {"kind": label, "request_s": round(seconds, 3), "polls": len(ms),
            "p50_ms": round(statistics.median(ms), 2) if ms else None,
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 2) if ms else None,
            "max_ms": round(top, 2), "under_bound": top < BOUND_MS}


def _collections(pauses: list[tuple[int, float]]) -> dict[str, Any]:
    """The server's collections during a kind: how many, the longest (ms, generation)."""
    longest = max(pauses, key=lambda p: p[1], default=(None, 0.0))
    return {"gc_count": len(pauses), "gc_max_ms": round(longest[1] * 1e3, 2),
            "gc_max_generation": longest[0]}


def run(*, database_url: str | None, work: Path, cells: int, cycles: int, rows: int,
        repeats: int, concurrent: int, interval_ms: float, big_inline: int = 0,
        diagnose: bool = False, gc_freeze: bool = True) -> dict[str, Any]:
    """Write the data, serve, measure every kind; the record (see the module docstring)."""
    t0 = time.perf_counter()
    manifest = write_segments(work / "data", cells=cells, cycles=cycles, rows=rows)
    written_s = time.perf_counter() - t0
    settings = {"data_dir": str(work / "catalog"), "log_level": "WARNING",
                "host": "127.0.0.1", "allowed_roots": (str((work / "data").resolve()),),
                **({"database_url": database_url} if database_url else {})}
    results, where = [], {}
    with ExitStack() as stack:
        server = _Child(_server_main, settings, {"diagnose": diagnose, "gc_freeze": gc_freeze})
        stack.callback(server.close)
        url = server.ask("", timeout_s=120.0)
        stack.callback(server.ask, "stop", 60.0)
        poller = _Child(_poll_main, url, interval_ms / 1e3)
        stack.callback(poller.close)
        poller.ask("", timeout_s=60.0)
        stack.callback(poller.conn.send, "end")
        client = stack.enter_context(httpx.Client(base_url=url, timeout=300.0))
        for label, call in _kinds(client, url, work / "data", manifest, repeats=repeats,
                                  concurrent=concurrent, big_inline=big_inline):
            server.ask("samples")  # forget what the last kind left
            poller.conn.send("start")
            time.sleep(0.1)  # a few polls before the request
            start = time.perf_counter()
            call()
            seconds = time.perf_counter() - start
            time.sleep(0.1)
            polls = poller.ask("stop")
            seen = server.ask("samples")
            results.append({**_figures(label, seconds, polls), **_collections(seen["gc"])})
            if diagnose:
                where[label] = seen["late"]
            print(_row(results[-1]), flush=True)
    return {"database": "postgresql" if database_url else "sqlite", "cpus": os.cpu_count(),
            "segments": len(manifest), "rows_per_segment": rows, "write_s": written_s,
            "interval_ms": interval_ms, "bound_ms": BOUND_MS, "big_inline": big_inline,
            "gc_freeze": gc_freeze,
            "kinds": results,
            **({"late_loop_samples": where} if diagnose else {})}


_HEADER = (f"{'request':<46} {'seconds':>8} {'polls':>6} {'p50 ms':>8} {'p99 ms':>8} "
           f"{'max ms':>8} {'gc ms':>7}  max < {BOUND_MS:.0f} ms")


def _row(r: dict[str, Any]) -> str:
    return (f"{r['kind']:<46} {r['request_s']:>8.2f} {r['polls']:>6} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {r['gc_max_ms']:>7.1f}  "
            f"{'yes' if r['under_bound'] else 'NO'}")


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, measure, print the table (and the late-loop samples)."""
    parser = argparse.ArgumentParser(prog="python -m bench.healthz",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL database to create a fresh one from "
                             "(default: SQLite in a temporary directory)")
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--rows", type=int, default=600, help="rows per segment")
    parser.add_argument("--repeats", type=int, default=3,
                        help="splits, statistics, plans and schedule epochs per kind")
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--big-inline", type=int, default=200_000,
                        help="rows of an inline manifest naming missing files (refused; "
                             "0: not sent)")
    parser.add_argument("--diagnose", action="store_true",
                        help="print where the server's event loop was when it ran late")
    parser.add_argument("--gc-freeze", action=argparse.BooleanOptionalAction, default=True,
                        help="the server freezes its startup heap once started, as "
                             "windpipe serve does (windpipe.services.runtime.freeze_startup_heap)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    print(_HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="windpipe-healthz-") as tmp, ExitStack() as stack:
        url = (stack.enter_context(fresh_database(args.database_url, prefix="wp_healthz"))
               if args.database_url else None)
        record = run(database_url=url, work=Path(tmp), cells=args.cells, cycles=args.cycles,
                     rows=args.rows, repeats=args.repeats, concurrent=args.concurrent,
                     interval_ms=args.interval_ms, big_inline=args.big_inline,
                     diagnose=args.diagnose,
                     gc_freeze=args.gc_freeze)
    for label, samples in record.get("late_loop_samples", {}).items():
        for where, count in Counter(samples).most_common(5):
            print(f"late loop during {label!r}: {count} x {where}")
    late = [r["kind"] for r in record["kinds"] if not r["under_bound"]]
    print(f"{record['database']}, {record['segments']} segments, {record['cpus']} CPUs: "
          + (f"/healthz over {BOUND_MS:.0f} ms during {late}" if late
             else f"/healthz under {BOUND_MS:.0f} ms throughout"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
