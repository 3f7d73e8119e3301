"""Data larger than the Flight server's RAM chunk cache: ``block_shuffled`` and
the host tier against warm ``shuffled``, side by side over one dataset and one transport.

    python -m bench.larger_than_memory [--rows 36000000] [--cache-mib N] [--rounds 2]
    python -m bench.larger_than_memory --quick     # a tiny dataset, under a minute

One dataset (``bench.data``) whose decoded size (float32 inputs + targets, what the chunk
cache holds) is at least 4x the cache budget ``C`` under test (``--cache-mib``, default a
quarter of the data; it must hold one shuffled batch's chunks, or the server refuses
``shuffled`` tickets). Each round runs two sets of fresh processes, one per kind (block,
tier): a client (this module, ``--child``; it reads with ``bench.windpipe_contenders``'
client code, the Flight contenders') and two catalog + Flight servers it spawns with
``bench.server``: the reference and the row's own. The client alternates epochs, ref,
row, ref, row, ..., ref, so every row epoch is bracketed by reference epochs measured
just before and after it (this machine is shared: its load drifts over minutes, a pair
seconds apart does not); a row's ratio is its tokens/s over the mean of its brackets'.

* ``shuffled_warm`` (the reference): ``shuffled`` with a cache that holds the data with
  an eighth of its budget to spare, so the server holds the split whole as one block
  (``C`` cannot hold the data, by construction), one unmeasured pass first; the row is
  the block set's reference epochs;
* ``block_shuffled_cold`` / ``block_shuffled_warm``: ``block_shuffled`` with
  ``shuffle_block_bytes`` = ``C`` / 2 (``--block-mib``), cache ``C``, no tier: epoch 0 of
  a fresh server, then epochs 1-2 (the cache holds a quarter of the data, so "warm"
  re-reads storage: only the interpreter and the OS page cache are warm);
* ``shuffled_second_epoch_tier``: ``shuffled``, cache ``C``, the host tier at its
  automatic budget (half the free disk): epoch 0 is opened (which starts the tier fill,
  ``windpipe.flight_server.tier_fill``) and left after its first batch, the fill is awaited
  through the ``tier-info`` action (the block file in the tier directory it names),
  then epochs 1-2;
* ``block_shuffled_tier_cold`` / ``block_shuffled_tier_warm``: ``block_shuffled`` as
  above with the host tier: epoch 0 decodes each shuffle block into the tier as it
  streams, epochs 1-2 map them (nothing read from storage again).

Seconds are one epoch (warm rows: the mean of epochs 1-2); M tokens/s are the epoch's
``B x T`` tokens over them; "x CPU" is the same ratio in tokens per CPU-second (the
client and the servers it spawned; the server's own CPU is printed beside it). Targets:
``block_shuffled`` epoch 0 >= 0.7x a bare decode of the same files (``x decode``:
:func:`bare_decode_seconds`, pyarrow's threaded scan of the same columns in a process of
its own, measured before and after the epoch, over the epoch's seconds: a first pass
decodes the data once), epochs 1-2 (with and without a tier) and the tier's
second epoch >= 0.8x warm ``shuffled``; a verdict is the median ratio over rounds.
``block_shuffled`` is read from sub-blocks
(``windpipe.services.materialize.read_paths.sub_blocks``): each shuffle block decoded
once an epoch (without a tier), the next while this one is served.

Memory: every process's peak. The client's is its ``VmHWM`` (:func:`peak_rss`); the
server's is sampled from ``/proc/<pid>/smaps`` (every 0.1 s and after every epoch) as
its RSS outside the tier's files (mapped tier pages are the kernel's page cache, shared
and reclaimable: the chunk cache charges a mapped block
:func:`windpipe.services.materialize.tier.mapping_charge`), next to its ``VmHWM`` (which counts
them). ``ru_maxrss`` is printed too but judges nothing: Linux carries it across fork and
exec, so a spawned server's starts at its parent's RSS. Budgets: the server's cache
budget + the mapping charge of the tier's blocks + :data:`FIXED_OVERHEAD_BYTES`
(docs/benchmarks.md, "Server memory"); the client's (no cache, no tier; that 350 MiB is
the server's figure, and importing torch alone takes a client past it): its own RSS once
its imports are in, before the server starts, + :data:`CLIENT_STREAMING_BYTES`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.server import MiB, data_bytes
from bench.workload import EPOCHS, INPUTS, Workload
from bench.workload import TARGETS as TARGET_COLUMNS
from windpipe.services.planning.sizes import chunk_row_bytes

__all__ = [
    "AGAINST_DECODE", "CLIENT_STREAMING_BYTES", "FIXED_OVERHEAD_BYTES", "QUICK", "ROWS",
    "ROW_KINDS", "TARGETS", "Sizes", "bare_decode_seconds", "main", "peak_rss", "run",
    "shuffled_working_set", "sizes",
]

ROWS = ("shuffled_warm", "block_shuffled_cold", "block_shuffled_warm",
        "shuffled_second_epoch_tier", "block_shuffled_tier_cold", "block_shuffled_tier_warm")
# the process set (``--kinds``) and the epochs of each row
ROW_KINDS = {"shuffled_warm": "block", "block_shuffled_cold": "block",
             "block_shuffled_warm": "block", "shuffled_second_epoch_tier": "tier",
             "block_shuffled_tier_cold": "block_tier", "block_shuffled_tier_warm": "block_tier"}
_ROW_EPOCHS: dict[str, tuple[int, ...]] = {
    "shuffled_warm": (), "block_shuffled_cold": (0,), "block_shuffled_warm": (1, 2),
    "shuffled_second_epoch_tier": (1, 2), "block_shuffled_tier_cold": (0,),
    "block_shuffled_tier_warm": (1, 2)}
TARGETS: dict[str, float] = {"block_shuffled_cold": 0.7, "block_shuffled_warm": 0.8,
                             "shuffled_second_epoch_tier": 0.8,
                             "block_shuffled_tier_warm": 0.8}
# rows held to the bare decode of the same files (:func:`bare_decode_seconds`), not to
# warm ``shuffled``: a first pass decodes the data once, and can be no faster than that
AGAINST_DECODE = frozenset({"block_shuffled_cold", "block_shuffled_tier_cold"})
FIXED_OVERHEAD_BYTES = 350 * MiB  # docs/benchmarks.md, "Server memory"
# A Flight client holds no cache and no tier: what reading may add to its RSS once its
# imports (torch, pyarrow, the SDK) are in: a few batches and gRPC's receive buffers
CLIENT_STREAMING_BYTES = 64 * MiB
# one set of processes each: client, reference, row's server
_KINDS = ("block", "tier", "block_tier")
_WARM_EPOCHS = (1, 2)  # a warm row is the mean of these
QUICK = {"rows": 1, "row_group_rows": 16_384, "batch_size": 8, "seq_len": 256}


class Sizes:
    """The budgets of one run: the cache ``C`` under test, the block budget, the warm
    reference's cache, and the figures they were chosen from."""

    def __init__(self, *, data: int, working_set: int, cache: int, block: int) -> None:
        self.data = data
        self.working_set = working_set
        self.cache = cache
        self.block = block
        # the reference holds the split whole as one block: data + an eighth of the budget
        self.warm_cache = data + data // 7 + 16 * MiB

    def as_dict(self) -> dict[str, int | float]:
        """JSON-ready, with the data-to-cache ratio."""
        return {"data_bytes": self.data, "shuffled_working_set_bytes": self.working_set,
                "cache_bytes": self.cache, "shuffle_block_bytes": self.block,
                "warm_cache_bytes": self.warm_cache, "data_over_cache": self.data / self.cache}


def shuffled_working_set(w: Workload, *, row_group_rows: int) -> int:
    """The most decoded chunk bytes one batch of any precomputed epoch pins (the distinct
    row groups its lanes' windows touch): a ``shuffled`` stream needs a cache this big."""
    per_row = chunk_row_bytes(len(INPUTS), len(TARGET_COLUMNS))
    rows = np.asarray(w.stream_rows, dtype=np.int64)
    worst = 0
    for epoch in range(EPOCHS):
        stream, offset = w.lane_stream[epoch], w.lane_offset[epoch]
        first = offset // row_group_rows
        last = np.minimum((offset + w.seq_len) // row_group_rows,
                          (rows[stream] - 1) // row_group_rows)
        for b in range(w.n_batches):
            s = slice(b * w.batch_size, (b + 1) * w.batch_size)
            touched: set[tuple[int, int]] = set()
            for st, a, z in zip(stream[s].tolist(), first[s].tolist(), last[s].tolist(),
                                strict=True):
                touched.update((st, g) for g in range(a, z + 1))
            nbytes = sum(min(row_group_rows, int(rows[st]) - g * row_group_rows)
                         for st, g in touched) * per_row
            worst = max(worst, nbytes)
    return worst


def sizes(w: Workload, *, row_group_rows: int, cache_bytes: int | None = None,
          block_bytes: int | None = None) -> Sizes:
    """Choose the cache under test (default: a quarter of the data, whole MiB) and the
    block budget (default: half the cache, so the next block's chunks have room while a
    block is read); refuse sizes that break the run's premise (data >= 4x the cache, a
    shuffled batch's chunks within it)."""
    data = data_bytes(w)
    working = shuffled_working_set(w, row_group_rows=row_group_rows)
    cache = cache_bytes if cache_bytes is not None else data // 4 // MiB * MiB
    if data < 4 * cache:
        msg = (f"the data ({data / MiB:.0f} MiB decoded) is less than 4x the cache "
               f"({cache / MiB:.0f} MiB): use more --rows or a smaller --cache-mib")
        raise SystemExit(msg)
    if working > cache:
        msg = (f"one shuffled batch pins {working / MiB:.1f} MiB of chunks, more than the "
               f"cache ({cache / MiB:.1f} MiB): shuffled tickets would be refused; use more "
               "--rows (and a larger --cache-mib), or a smaller --batch-size")
        raise SystemExit(msg)
    return Sizes(data=data, working_set=working, cache=cache,
                 block=block_bytes if block_bytes is not None else cache // 2)


# -- memory -------------------------------------------------------------------------------


def peak_rss(pid: int | str = "self") -> int:
    """``VmHWM`` of a process: its peak RSS since its last exec. Not ``ru_maxrss``, which
    Linux carries across fork and exec: a spawned server's starts at its parent's RSS
    (the client's, torch included), a child's at the parent's when it was forked. 0
    where ``/proc`` has no such line."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0



class _Sampler:
    """Peak RSS of a process, whole and outside the files under ``exclude`` (the tier),
    read from ``/proc/<pid>/smaps`` every ``interval_s`` in a thread (Linux only; elsewhere
    the peaks stay 0 and only ``ru_maxrss`` is reported)."""

    def __init__(self, pid: int, *, exclude: str, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.exclude = os.path.realpath(exclude)
        self.interval_s = interval_s
        self.peak_rss = self.peak_outside = self.peak_mapped = self.hwm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rss-sampler")

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()
        self.hwm = max(peak_rss(self.pid), self.peak_rss)  # smaps' sum can read a bit above

    def sample(self) -> None:
        """One reading now (also called at the end of each epoch)."""
        total = mapped = 0
        inside = False
        try:
            with open(f"/proc/{self.pid}/smaps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        kib = int(line.split()[1]) * 1024
                        total += kib
                        if inside:
                            mapped += kib
                    elif "-" in line.split(" ", 1)[0] and not line[0].isupper():
                        parts = line.split(maxsplit=5)
                        inside = len(parts) > 5 and parts[5].strip().startswith(self.exclude)
        except OSError:
            return
        self.peak_rss = max(self.peak_rss, total)
        self.peak_outside = max(self.peak_outside, total - mapped)
        self.peak_mapped = max(self.peak_mapped, mapped)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


# -- the decode reference -------------------------------------------------------------------


def bare_decode_seconds(paths: list[str], columns: list[str]) -> tuple[float, int]:
    """Seconds pyarrow takes to decode ``columns`` of every file, on every core this
    process may use (``pyarrow.dataset``'s threaded scan, batches dropped as they come):
    the floor of any reader that decodes the data once. And the rows it decoded."""
    import pyarrow.dataset as ds  # noqa: PLC0415

    dataset = ds.dataset(paths, format="parquet")
    t0 = time.perf_counter()
    rows = sum(b.num_rows for b in dataset.to_batches(columns=columns, use_threads=True))
    return time.perf_counter() - t0, rows


def _decode_in_child(w: Any) -> dict[str, float]:
    """:func:`bare_decode_seconds` in a fresh process (its memory is not the client's)."""
    code = ("import json, sys; from bench.larger_than_memory import bare_decode_seconds as d; "
            "print(json.dumps(d(*json.loads(sys.argv[1]))))")
    arg = json.dumps([[str(Path(w.root) / p) for p in w.stream_paths],
                      [*INPUTS, *TARGET_COLUMNS]])
    proc = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True,
                          timeout=1800, check=True)
    seconds, rows = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"seconds": seconds, "rows": rows}


# -- one process pair -----------------------------------------------------------------------


def _action(client: Any, kind: str) -> Any:
    import pyarrow.flight as fl  # noqa: PLC0415

    results = list(client.do_action(fl.Action(kind, b"")))
    return json.loads(results[0].body.to_pybytes())


def _epoch(client: Any, plan_id: str, epoch: int, sampler: _Sampler,
           server: Any) -> dict[str, Any]:
    """One whole epoch through ``bench.measure.consume`` (the contenders' timing loop),
    with the tokens it yielded, the decoded bytes the server read meanwhile, the CPU
    seconds the server and this client spent on it, and its stalls (batches that came
    over 10x the median gap: a ``block_shuffled`` pass waits where a block is decoded
    slower than the one before it is served)."""
    from bench.measure import consume  # noqa: PLC0415
    from bench.windpipe_contenders import epoch_tensors  # noqa: PLC0415
    from windpipe.services.contract.wire import ACTION_CACHE_STATS  # noqa: PLC0415

    read0 = _action(client, ACTION_CACHE_STATS)["bytes_read"]
    cpu0 = server.stats()["cpu_s"]
    tokens = 0
    gaps: list[float] = []  # seconds between consecutive batches' arrivals

    def counted() -> Any:
        nonlocal tokens
        last = time.perf_counter()
        for batch in epoch_tensors(client, plan_id, epoch):
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            tokens += int(batch[0].shape[0]) * int(batch[0].shape[1])
            yield batch

    gen = counted()
    try:
        out = consume(gen, max_batches=1 << 40, max_seconds=float("inf"))
    finally:
        gen.close()
    sampler.sample()
    server_cpu = server.stats()["cpu_s"] - cpu0
    read = _action(client, ACTION_CACHE_STATS)["bytes_read"] - read0
    median = float(np.median(gaps)) if gaps else 0.0
    stalls = [g for g in gaps if g > 10 * median]
    return {"epoch": epoch, "seconds": out["seconds"], "batches": out["batches"],
            "tokens": tokens, "tokens_per_s": tokens / out["seconds"],
            "storage_bytes": int(read), "run_cpu_s": out["run_cpu_s"],
            "server_cpu_s": server_cpu,
            # where a pass waits: batches that came 10x slower than the median one
            "median_gap_s": median, "stalls": len(stalls), "stall_s": float(sum(stalls))}


def _wait_for_tier(client: Any, nbytes: int, *, timeout_s: float) -> dict[str, Any]:
    """Poll ``tier-info`` until the tier directory it names holds a complete block file of
    at least ``nbytes`` (a block is renamed into place only once written)."""
    from windpipe.services.contract.wire import ACTION_TIER_INFO  # noqa: PLC0415

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        tier = _action(client, ACTION_TIER_INFO)["tier"]
        files = list(Path(tier["path"]).glob("*.wpb")) if tier else []
        held = sum(p.stat().st_size for p in files)
        if held >= nbytes:
            return {"tier_fill_wait_s": time.perf_counter() - t0, "tier_blocks": len(files),
                    "tier_used_bytes": held, "tier_budget_bytes": tier["budget_bytes"],
                    "tier_budget_source": tier["budget_source"]}
        time.sleep(0.1)
    msg = f"the tier did not hold the plan's {nbytes:,} bytes within {timeout_s:.0f} s"
    raise RuntimeError(msg)


def _config(w: Workload, kind: str, block_bytes: int) -> Any:
    from windpipe.services.contract.configs import LoaderConfig  # noqa: PLC0415

    config = w.config(strategy="shuffled")
    if kind not in ("block", "block_tier"):
        return config
    body = {**config.model_dump(mode="json"), "strategy": "block_shuffled",
            "shuffle_block_bytes": block_bytes}
    return LoaderConfig.model_validate(body)


def _plan_report(catalog_url: str, plan_id: str) -> dict[str, Any]:
    """The plan's report (working set, blocks, mixing figure) from the catalog's REST."""
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(f"{catalog_url}/v1/plans/{plan_id}/report", timeout=60) as r:
        report: dict[str, Any] = json.loads(r.read())
    keep = ("strategy", "batches", "tokens", "cache_working_set_bytes", "shuffle_blocks",
            "shuffle_quality")
    return {k: report.get(k) for k in keep}


def _server_figures(server: Any, sampler: _Sampler, final: dict[str, Any], *,
                    mapped: int) -> dict[str, Any]:
    """A server process's peaks (see the module docstring) and its budget."""
    from bench.server import server_figures  # noqa: PLC0415
    from windpipe.services.materialize.tier import mapping_charge  # noqa: PLC0415

    figures = server_figures(server, final)
    return {
        "peak_rss_bytes": sampler.hwm, "ru_maxrss_bytes": figures["server_peak_rss_bytes"],
        "peak_rss_outside_tier_bytes": sampler.peak_outside,
        "peak_tier_mapped_bytes": sampler.peak_mapped,
        "base_rss_bytes": figures["server_base_rss_bytes"],
        "cache_budget_bytes": server.cache_bytes, "cache_peak_bytes": figures["cache_peak_bytes"],
        "storage_bytes": figures["storage_bytes"],
        "budget_bytes": server.cache_bytes + (mapping_charge(mapped) if mapped else 0)
        + FIXED_OVERHEAD_BYTES,
    }


def _run_kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One set of processes: the reference server (warm ``shuffled``), the row's server
    (both ``bench.server``, spawned) and this client, which alternates their epochs
    (ref, row, ref, row, ..., ref) so each row epoch has a reference measured just before
    and just after it: the machine's load drifts, a pair close in time does not."""
    import pyarrow.flight as fl  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from bench.server import ServerHandle  # noqa: PLC0415
    from bench.workload import load_workload  # noqa: PLC0415
    from windpipe.services.contract.wire import ACTION_HEALTH  # noqa: PLC0415

    torch.set_num_threads(1)
    w = load_workload(Path(spec["workload"]))
    options: dict[str, Any] = {"tier_bytes": None} if kind != "block" else {}
    if spec.get("readahead_batches") is not None:
        options["readahead_batches"] = spec["readahead_batches"]
    out: dict[str, Any] = {"kind": kind, "client_base_rss_bytes": peak_rss()}
    row_epochs: list[dict[str, Any]] = []
    ref_epochs: list[dict[str, Any]] = []
    with ServerHandle.start(w, cache_bytes=spec["warm_cache_bytes"],
                            config=_config(w, "warm", 0)) as ref, \
            ServerHandle.start(w, cache_bytes=spec["cache_bytes"],
                               config=_config(w, kind, spec["shuffle_block_bytes"]),
                               **options) as row:
        out["plan_batches"] = row.n_batches
        out["ref_plan_batches"] = ref.n_batches
        out["report"] = _plan_report(row.catalog_url, row.plan_id)
        ref_client, row_client = fl.connect(ref.location), fl.connect(row.location)
        try:
            with _Sampler(ref.process.pid, exclude=ref.ready["tier_dir"]) as ref_mem, \
                    _Sampler(row.process.pid, exclude=row.ready["tier_dir"]) as row_mem:
                out["health"] = _action(row_client, ACTION_HEALTH)
                # one unmeasured pass loads the reference's split as one block
                _epoch(ref_client, ref.plan_id, 0, ref_mem, ref)
                if kind == "tier":  # open epoch 0 (this starts the fill), leave after a batch
                    from bench.windpipe_contenders import epoch_tensors  # noqa: PLC0415

                    t0 = time.perf_counter()
                    first = epoch_tensors(row_client, row.plan_id, 0)
                    next(first)
                    first.close()
                    out["first_batch_s"] = time.perf_counter() - t0
                    out.update(_wait_for_tier(row_client, spec["data_bytes"],
                                              timeout_s=spec["tier_timeout_s"]))
                    out["tier_fill_s"] = time.perf_counter() - t0
                wanted = _WARM_EPOCHS if kind == "tier" else (0, *_WARM_EPOCHS)
                if kind != "tier":  # epoch 0 decodes the data once: bracketed by the floor
                    out["bare_decode"] = [_decode_in_child(w)]
                ref_epochs.append(_epoch(ref_client, ref.plan_id, 1, ref_mem, ref))
                for i, e in enumerate(wanted):
                    row_epochs.append(_epoch(row_client, row.plan_id, e, row_mem, row))
                    ref_epochs.append(_epoch(ref_client, ref.plan_id, 2 + i, ref_mem, ref))
                    if e == 0 and kind != "tier":
                        out["bare_decode"].append(_decode_in_child(w))
        finally:
            ref_client.close()
            row_client.close()
        if kind == "block_tier":  # the sub-blocks the first pass left in the tier
            out["tier_used_bytes"] = sum(
                p.stat().st_size for p in Path(row.ready["tier_dir"]).rglob("*.wpb"))
        ref_final, row_final = ref.stop(), row.stop()
    out.update({
        "epochs": row_epochs, "ref_epochs": ref_epochs,
        "ref_server": _server_figures(ref, ref_mem, ref_final, mapped=0),
        "server": _server_figures(row, row_mem, row_final,
                                  mapped=int(out.get("tier_used_bytes", 0))),
        "client_peak_rss_bytes": peak_rss(),
        "client_ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "client_budget_bytes": out["client_base_rss_bytes"] + CLIENT_STREAMING_BYTES,
    })
    return out


def _child(kind: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    print("RESULT " + json.dumps(_run_kind(kind, spec)), flush=True)
    return 0


def _spawn(kind: str, spec_path: Path) -> dict[str, Any]:
    """Run one process pair as a fresh interpreter; its RESULT line, or the error."""
    cmd = [sys.executable, "-m", "bench.larger_than_memory", "--child", kind,
           "--spec", str(spec_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"kind": kind, "error": (proc.stderr or proc.stdout)[-3000:]}
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


# -- rows and table -------------------------------------------------------------------------


def _row(name: str, kind: str, res: dict[str, Any], wanted: tuple[int, ...],
         ) -> dict[str, Any]:
    """A row from the epochs ``wanted`` of a process set: its mean seconds, and its ratio
    to the reference epochs that bracket them (the mean of their seconds)."""
    if "error" in res or not res:
        return {"row": name, "kind": kind, "error": res.get("error", "not run")}
    idx = [i for i, e in enumerate(res["epochs"]) if e["epoch"] in wanted]
    if name == "shuffled_warm":
        chosen, brackets = res["ref_epochs"], res["ref_epochs"]
        batches = res["ref_plan_batches"]
    else:
        chosen = [res["epochs"][i] for i in idx]
        brackets = [res["ref_epochs"][j] for j in sorted({k for i in idx for k in (i, i + 1)})]
        batches = res["plan_batches"]
    seconds = float(np.mean([e["seconds"] for e in chosen]))
    ref_seconds = float(np.mean([e["seconds"] for e in brackets]))
    cpu = float(np.mean([e["run_cpu_s"] for e in chosen]))
    ref_cpu = float(np.mean([e["run_cpu_s"] for e in brackets]))
    tokens, ref_tokens = chosen[0]["tokens"], brackets[0]["tokens"]
    return {"row": name, "kind": kind, "epochs": [e["epoch"] for e in chosen],
            "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "batches": chosen[0]["batches"], "plan_batches": batches,
            "storage_bytes": max(e["storage_bytes"] for e in chosen),
            "stall_s": float(np.mean([e["stall_s"] for e in chosen])),
            "ref_tokens_per_s": ref_tokens / ref_seconds,
            "ratio": (tokens / seconds) / (ref_tokens / ref_seconds),
            # CPU of the client and its servers in the epoch; the server's alone
            "cpu_s": cpu, "server_cpu_s": float(np.mean([e.get("server_cpu_s", 0.0)
                                                         for e in chosen])),
            "cpu_ratio": (tokens / cpu) / (ref_tokens / ref_cpu) if cpu and ref_cpu else None}


def _rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows of one round (each row's epochs, its ratio and verdict)."""
    rows = []
    for name in ROWS:
        kind, wanted = ROW_KINDS[name], _ROW_EPOCHS[name]
        if kind not in results:
            continue  # a process set not run (``--kinds``)
        res = results.get(kind, {})
        row = _row(name, kind, res, wanted)
        target = TARGETS.get(name)
        row["target"] = target
        decode = res.get("bare_decode")
        if decode and "seconds" in row and name in AGAINST_DECODE:  # floor s / epoch s
            row["bare_decode_s"] = float(np.mean([d["seconds"] for d in decode]))
            row["decode_ratio"] = row["bare_decode_s"] / row["seconds"]
        if name in AGAINST_DECODE:
            row["verdict"] = _verdict(name, row.get("decode_ratio"), target)
        elif "ratio" in row:
            row["verdict"] = _verdict(name, row["ratio"], target)
        else:
            row["ratio"], row["verdict"] = None, "ERROR"
        rows.append(row)
    return rows


def _memory(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every process's peak against its budget: a server's outside the tier's mapped
    files (sampled), the client's ``VmHWM``."""
    out = []
    names = {"block": "block_shuffled", "tier": "shuffled+tier",
             "block_tier": "block_shuffled+tier"}
    for kind in _KINDS:
        res = results.get(kind, {})
        if "error" in res or not res:
            continue
        for label, srv in (("reference server", res["ref_server"]),
                           (f"{names[kind]} server", res["server"])):
            peak = srv["peak_rss_outside_tier_bytes"] or srv["peak_rss_bytes"]
            out.append({"process": f"{kind}: {label}", "peak_bytes": peak,
                        "hwm_bytes": srv["peak_rss_bytes"],
                        "ru_maxrss_bytes": srv["ru_maxrss_bytes"],
                        "tier_mapped_bytes": srv["peak_tier_mapped_bytes"],
                        "cache_budget_bytes": srv["cache_budget_bytes"],
                        "budget_bytes": srv["budget_bytes"],
                        "verdict": "PASS" if peak <= srv["budget_bytes"] else "FAIL"})
        client = res["client_peak_rss_bytes"]
        out.append({"process": f"{kind}: client", "peak_bytes": client, "hwm_bytes": client,
                    "ru_maxrss_bytes": res["client_ru_maxrss_bytes"], "tier_mapped_bytes": 0,
                    "cache_budget_bytes": 0, "budget_bytes": res["client_budget_bytes"],
                    "verdict": "PASS" if client <= res["client_budget_bytes"] else "FAIL"})
    return out


def _print_round(r: int, rows: list[dict[str, Any]], memory: list[dict[str, Any]]) -> None:
    print(f"\nround {r}")
    print(f"{'row':27s} {'epochs':>6s} {'seconds':>7s} {'M tok/s':>7s} {'ref M/s':>7s} "
          f"{'x warm':>6s} {'target':>6s} {'verdict':>7s} {'batches':>9s} {'read MiB':>8s} "
          f"{'stall s':>7s} {'CPU s':>6s} {'srv CPU':>7s} {'x CPU':>5s} {'x decode':>8s}")
    for row in rows:
        if "seconds" not in row:
            print(f"{row['row']:27s} ERROR")
            continue
        target = f">={row['target']:.1f}" if row["target"] is not None else "-"
        got = row["epochs"]
        epochs = ",".join(map(str, got)) if len(got) < 3 else f"{got[0]}-{got[-1]}"
        print(f"{row['row']:27s} {epochs:>6s} {row['seconds']:7.2f} "
              f"{row['tokens_per_s'] / 1e6:7.2f} {row['ref_tokens_per_s'] / 1e6:7.2f} "
              f"{row['ratio']:6.2f} {target:>6s} {row['verdict']:>7s} "
              f"{row['batches']:4d}/{row['plan_batches']:<4d} {row['storage_bytes'] / MiB:8.0f} "
              f"{row['stall_s']:7.2f} {row['cpu_s']:6.2f} {row['server_cpu_s']:7.2f} "
              f"{row['cpu_ratio'] or 0.0:5.2f} "
              + (f"{row['decode_ratio']:8.2f}" if "decode_ratio" in row else f"{'-':>8s}"))
    print(f"\n{'process (MiB)':30s} {'peak':>6s} {'VmHWM':>6s} {'tier RSS':>8s} "
          f"{'ru_maxrss':>9s} {'cache':>6s} {'budget':>6s} {'verdict':>7s}")
    for m in memory:
        print(f"{m['process']:30s} {m['peak_bytes'] / MiB:6.0f} {m['hwm_bytes'] / MiB:6.0f} "
              f"{m['tier_mapped_bytes'] / MiB:8.0f} {m['ru_maxrss_bytes'] / MiB:9.0f} "
              f"{m['cache_budget_bytes'] / MiB:6.0f} {m['budget_bytes'] / MiB:6.0f} "
              f"{m['verdict']:>7s}")


def run(root: Path, *, work: Path, batch_size: int, seq_len: int, row_group_rows: int,
        cache_bytes: int | None = None, block_bytes: int | None = None, rounds: int = 1,
        readahead_batches: int | None = None, tier_timeout_s: float = 600.0,
        kinds: tuple[str, ...] = _KINDS, verbose: bool = True) -> dict[str, Any]:
    """Every row over ``root``, ``rounds`` times (each round: one fresh set of processes
    per kind, block then tier; ``kinds``: only those); the figures as one JSON-ready
    record. ``readahead_batches``: the rows' servers' setting (None: its default)."""
    from bench.workload import build_workload  # noqa: PLC0415

    w = build_workload(root, batch_size=batch_size, seq_len=seq_len)
    chosen = sizes(w, row_group_rows=row_group_rows, cache_bytes=cache_bytes,
                   block_bytes=block_bytes)
    work.mkdir(parents=True, exist_ok=True)
    w.save(work / "workload.npz")
    spec = {"workload": str(work / "workload.npz"), "data_bytes": chosen.data,
            "cache_bytes": chosen.cache, "shuffle_block_bytes": chosen.block,
            "warm_cache_bytes": chosen.warm_cache, "tier_timeout_s": tier_timeout_s,
            "readahead_batches": readahead_batches}
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    if verbose:
        print(f"{root}: {sum(w.stream_rows):,} rows in {len(w.stream_rows)} streams, "
              f"{chosen.data / MiB:.0f} MiB decoded = {chosen.data / chosen.cache:.2f}x the "
              f"cache ({chosen.cache / MiB:.0f} MiB); shuffle_block_bytes "
              f"{chosen.block / MiB:.0f} MiB; one shuffled batch pins "
              f"{chosen.working_set / MiB:.0f} MiB; warm reference cache "
              f"{chosen.warm_cache / MiB:.0f} MiB; batch {batch_size} x {seq_len}", flush=True)
    record: dict[str, Any] = {"sizes": chosen.as_dict(), "rounds": [],
                              "readahead_batches": readahead_batches,
                              "batch": {"batch_size": batch_size, "seq_len": seq_len},
                              "rows_of_data": int(sum(w.stream_rows)), "root": str(root)}
    for r in range(rounds):
        results: dict[str, dict[str, Any]] = {}
        for kind in kinds:
            t0 = time.perf_counter()
            results[kind] = _spawn(kind, spec_path)
            if verbose:
                note = "FAILED\n" + results[kind]["error"] if "error" in results[kind] else ""
                print(f"  {kind}: {time.perf_counter() - t0:.1f} s {note}", flush=True)
        rows, memory = _rows(results), _memory(results)
        record["rounds"].append({"rows": rows, "memory": memory, "processes": results})
        if verbose:
            _print_round(r, rows, memory)
    record["summary"] = _summary(record["rounds"])
    return record


def _verdict(name: str, ratio: float | None, target: float | None) -> str:
    """``ref`` (the reference row), ``-`` (a row without a target), PASS, FAIL or ERROR."""
    if name == "shuffled_warm":
        return "ref"
    if target is None:
        return "-"
    return "ERROR" if ratio is None else "PASS" if ratio >= target else "FAIL"


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per row: the median ratio over rounds and its verdict; memory: every process."""
    out: dict[str, Any] = {}
    ran = {row["row"] for rnd in rounds for row in rnd["rows"]}
    for name in (r for r in ROWS if r in ran):
        key = "decode_ratio" if name in AGAINST_DECODE else "ratio"
        ratios = [row[key] for rnd in rounds for row in rnd["rows"]
                  if row["row"] == name and row.get(key) is not None]
        target = TARGETS.get(name)
        median = float(np.median(ratios)) if ratios else None
        out[name] = {"ratios": ratios, "median_ratio": median, "target": target,
                     "verdict": _verdict(name, median, target)}
    out["memory"] = all(m["verdict"] == "PASS" for rnd in rounds for m in rnd["memory"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.larger_than_memory",
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=36_000_000,
                        help="cycling rows (default %(default)s: 576 MiB decoded)")
    parser.add_argument("--cache-mib", type=int, help="the cache under test (default: a "
                        "quarter of the decoded data)")
    parser.add_argument("--block-mib", type=int, help="shuffle_block_bytes (default: half "
                        "the cache)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds; verdicts are the median ratio (default %(default)s)")
    parser.add_argument("--readahead-batches", type=int,
                        help="the rows' servers' readahead_batches (default: theirs)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny dataset (1M rows, 16k-row groups, batch 8 x 256), "
                        "one round")
    parser.add_argument("--kinds", nargs="+", choices=_KINDS, default=list(_KINDS),
                        help="the process sets to run (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--child", choices=_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.spec)
    from bench.data import ensure_dataset  # noqa: PLC0415

    rows, group = args.rows, 131_072
    batch_size, seq_len, rounds = args.batch_size, args.seq_len, args.rounds
    if args.quick:  # one round: the figures are a smoke check, not a measurement
        rows, group = QUICK["rows"], QUICK["row_group_rows"]
        batch_size, seq_len, rounds = QUICK["batch_size"], QUICK["seq_len"], 1
    name = f"data-{rows}" if group == 131_072 else f"data-{rows}-rg{group}"
    root = ensure_dataset(args.out / name, cycling_rows=rows, row_group_rows=group)
    with tempfile.TemporaryDirectory(prefix="wp-ltm-") as tmp:
        record = run(root, work=Path(tmp), batch_size=batch_size, seq_len=seq_len,
                     row_group_rows=group,
                     cache_bytes=args.cache_mib * MiB if args.cache_mib else None,
                     block_bytes=args.block_mib * MiB if args.block_mib else None,
                     rounds=rounds, readahead_batches=args.readahead_batches,
                     kinds=tuple(args.kinds))
    print(json.dumps(record["summary"], indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("larger_than_memory-quick.json" if args.quick
                       else "larger_than_memory.json")
    path.write_text(json.dumps(record, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
