"""The soak's figures, from the clients' journals, the fault records and the process
samples: batches lost and duplicated per client, every error with its type and the
fault that explains it, recovery per fault, batch latency per phase, each process's
RSS and open files, the catalog's latency as the clients saw it. :func:`table` prints
them for a reader.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bench.soak.faults import EXPLAINS, FaultRecord

__all__ = ["GRACE_S", "RECOVERY_BOUND_S", "RSS_GROWTH_BOUND_PCT", "RSS_MIN_SPAN_S", "figures",
           "percentile", "rss_over", "table"]

GRACE_S = 30.0  # an error this long after a fault was undone is still laid at its door
RECOVERY_BOUND_S = 90.0  # every client reads again within this long of a fault's start
RSS_GROWTH_BOUND_PCT = 5.0  # RSS growth per hour after warm-up, at most
# a slope over less than this (a process the faults restart every few minutes, a short
# soak) is reported but not held to the bound: it measures caches filling, not a trend
RSS_MIN_SPAN_S = 1200.0


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile ``q`` (0-100) of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, int(q / 100 * len(ordered) + 0.5) - 1))],
                 2)


def _passes(records: list[dict[str, Any]]) -> dict[str, int]:
    """Received, lost, duplicated, mismatched and abandoned batches of one client."""
    seen: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    length: dict[tuple[str, int], int] = {}
    ended: set[tuple[str, int]] = set()
    abandoned: set[tuple[str, int]] = set()
    mismatched = 0
    current: tuple[str, int] | None = None
    for rec in records:
        if rec["k"] == "pass":
            current = (rec["plan"], rec["e"])
            length[current] = rec["n"]
        elif rec["k"] == "batch":
            seen[(rec["plan"], rec["e"])][rec["i"]] += 1
            mismatched += not rec["ok"]
        elif rec["k"] == "pass_end":
            ended.add((rec["plan"], rec["e"]))
        elif rec["k"] == "switch" and current is not None:
            abandoned.add(current)  # the plan was retired under this pass
    lost = dup = abandoned_batches = 0
    for key, count in seen.items():
        dup += sum(c - 1 for c in count.values())
        n = length.get(key, 0)
        if key in abandoned:
            abandoned_batches += n - len(count)
        elif key in ended:
            lost += n - len(count)
        else:  # the pass still running at the end: only gaps before its last batch
            lost += max(count) + 1 - len(count)
    return {"batches": sum(sum(c.values()) for c in seen.values()), "lost": lost,
            "duplicated": dup, "mismatched": mismatched,
            "passes_completed": len(ended), "abandoned_retired": abandoned_batches}


def _explain(err: dict[str, Any], client: str, faults: list[FaultRecord]) -> int | None:
    """The latest fault begun before the error that explains its type (for the client),
    undone at most :data:`GRACE_S` before it (any time before, for a lasting one): its
    index; None when no fault does."""
    found = None
    for n, f in enumerate(faults):
        types, victim_only, lasting = EXPLAINS[f.kind]
        if err["type"] not in types or (victim_only and f.target != client):
            continue
        if f.started_at <= err["at"] and (lasting or err["at"] <= f.restored_at + GRACE_S):
            found = n
    return found


def _recovery(faults: list[FaultRecord], journals: dict[str, list[dict[str, Any]]],
              hits: dict[int, dict[str, float]], started_at: float,
              end_at: float) -> list[dict[str, Any]]:
    """Per fault: when what it broke answered again (``restored_s``) and when every client
    it reached read a batch again (``recovered_s``, from the fault's start). A client it
    reached is its target, or one that journalled an error it explains; such a client
    has recovered at its first batch after the fault was undone and after its last such
    error. A fault that reached no client is recovered when it is undone."""
    out = []
    for n, f in enumerate(faults):
        row: dict[str, Any] = {"kind": f.kind, "target": f.target,
                               "at_s": round(f.started_at - started_at, 1),
                               "restored_s": round(f.restored_at - f.started_at, 2),
                               "skipped": f.skipped, **f.notes}
        if f.skipped is None:
            reached = dict(hits.get(n, {}))
            if f.target in journals:
                reached[f.target] = max(reached.get(f.target, 0.0), f.restored_at)
            last = f.restored_at
            for client, since in reached.items():
                after = [r["at"] for r in journals[client] if r["k"] == "batch"
                         and r["at"] >= max(since, f.restored_at)]
                if after:
                    last = max(last, after[0])
                elif end_at - f.restored_at > RECOVERY_BOUND_S:
                    last = float("inf")
            row["clients_reached"] = sorted(reached)
            row["recovered_s"] = (round(last - f.started_at, 2) if last != float("inf")
                                  else None)
            row["recovered"] = last - f.started_at <= RECOVERY_BOUND_S
        out.append(row)
    return out


def _phase(at: float, faults: list[FaultRecord]) -> str:
    for f in faults:
        if f.skipped is None and f.started_at <= at <= f.restored_at:
            return f.kind
    return "quiet"


def _slope_per_hour(samples: list[dict[str, Any]], key: str) -> float | None:
    """The least-squares slope of ``key`` over time, per hour (None under 3 samples): a
    trend, not the difference of two samples a cache's fill or a collection moves."""
    if len(samples) < 3:
        return None
    ts = [s["at"] for s in samples]
    ys = [float(s[key]) for s in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var * 3600


def _growth(samples: list[dict[str, Any]], key: str) -> float | None:
    """The slope of ``key`` per hour as a percentage of its first sample (one decimal)."""
    slope = _slope_per_hour(samples, key)
    if slope is None or not samples[0][key]:
        return None
    return round(slope / samples[0][key] * 100, 1)


def rss_over(resources: dict[str, dict[str, Any]]) -> list[str]:
    """The processes measured over at least :data:`RSS_MIN_SPAN_S` whose RSS grew by more
    than :data:`RSS_GROWTH_BOUND_PCT` per hour (the soak's memory target: none)."""
    return sorted(role for role, r in resources.items()
                  if r["measured_s"] >= RSS_MIN_SPAN_S
                  and (r["rss_growth_pct_per_hour"] or 0.0) > RSS_GROWTH_BOUND_PCT)


def _resources(histories: dict[str, list[dict[str, Any]]], warmup_s: float,
               ) -> dict[str, dict[str, Any]]:
    """Per role, its longest-lived incarnation past its first ``warmup_s`` seconds (its
    caches, tier and allocator arenas filling): RSS (and the part of it that is not
    file-backed or shared, ``anon``) and open files at start and at end, and the RSS
    growth per hour, the least-squares slope over every sample in between as a share of
    the starting RSS."""
    out = {}
    for role, incarnations in histories.items():
        usable = [inc for inc in incarnations if inc["samples"]]
        if not usable:
            continue
        inc = max(usable, key=lambda i: i["samples"][-1]["at"] - i["samples"][0]["at"])
        samples = [s for s in inc["samples"] if s["at"] - inc["started_at"] >= warmup_s]
        samples = samples or inc["samples"][-1:]
        first, last = samples[0], samples[-1]
        growth = _growth(samples, "rss")
        anon_growth = _growth([{"at": x["at"], "anon": x["rss"] - x.get("shared", 0)}
                               for x in samples], "anon")
        out[role] = {"incarnations": len(incarnations), "rss_start_mib": first["rss"] >> 20,
                     "rss_end_mib": last["rss"] >> 20,
                     "anon_start_mib": (first["rss"] - first.get("shared", 0)) >> 20,
                     "anon_end_mib": (last["rss"] - last.get("shared", 0)) >> 20,
                     "rss_growth_pct_per_hour": growth, "anon_growth_pct_per_hour": anon_growth,
                     "fds_start": first["fds"], "fds_end": last["fds"],
                     "measured_s": round(last["at"] - first["at"], 1)}
    return out


def figures(*, journals: dict[str, list[dict[str, Any]]], faults: list[FaultRecord],
            histories: dict[str, list[dict[str, Any]]], warmup_s: float,
            rss_warmup_s: float, started_at: float, ended_at: float) -> dict[str, Any]:
    """Every figure of the soak (see the module docstring)."""
    clients = {name: _passes(records) for name, records in journals.items()}
    errors = []
    phases: dict[str, list[float]] = defaultdict(list)
    catalog: dict[str, list[float]] = defaultdict(list)
    hits: dict[int, dict[str, float]] = defaultdict(dict)  # fault -> client -> last error
    for name, records in journals.items():
        for rec in records:
            if rec["k"] == "error":
                by = _explain(rec, name, faults)
                if by is not None:
                    hits[by][name] = rec["at"]
                errors.append({"client": name, "type": rec["type"], "typed": rec["typed"],
                               "at": round(rec["at"] - started_at, 1),
                               "explained_by": None if by is None else faults[by].kind,
                               "message": rec["msg"][:160]})
            elif rec["k"] == "batch" and rec["at"] - started_at >= warmup_s:
                phases[_phase(rec["at"], faults)].append(rec["ms"])
            elif rec["k"] == "catalog":
                catalog[rec["route"]].append(rec["ms"])
                catalog["all"].append(rec["ms"])
    recovery = _recovery(faults, journals, hits, started_at, ended_at)
    resources = _resources(histories, rss_warmup_s)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for row in recovery:
        if row.get("recovered_s") is not None:
            by_kind[row["kind"]].append(row["recovered_s"])
    return {
        "started_at": round(started_at, 3),  # time.time() of the soak clock's start
        "seconds": round(ended_at - started_at, 1),
        "clients": clients,
        "lost": sum(c["lost"] for c in clients.values()),
        "duplicated": sum(c["duplicated"] for c in clients.values()),
        "mismatched": sum(c["mismatched"] for c in clients.values()),
        "errors": errors,
        "untyped_errors": sum(not e["typed"] for e in errors),
        "unexplained_errors": sum(e["explained_by"] is None for e in errors),
        "faults": recovery,
        "recovery_s_by_kind": {k: {"n": len(v), "max": max(v), "p50": percentile(v, 50)}
                               for k, v in sorted(by_kind.items())},
        "all_recovered": all(r.get("recovered", True) for r in recovery),
        "batch_latency_ms": {k: {"n": len(v), "p50": percentile(v, 50),
                                 "p99": percentile(v, 99)} for k, v in sorted(phases.items())},
        "catalog_latency_ms": {k: {"n": len(v), "p50": percentile(v, 50),
                                   "p95": percentile(v, 95), "p99": percentile(v, 99),
                                   "max": percentile(v, 100)}
                               for k, v in sorted(catalog.items())},
        "resources": resources,
        "rss_measured": sorted(r for r, v in resources.items()
                               if v["measured_s"] >= RSS_MIN_SPAN_S),
        "rss_over": rss_over(resources),
    }


def table(fig: dict[str, Any]) -> str:
    """The figures as plain-text tables."""
    lines = [f"soak: {fig['seconds']} s; lost {fig['lost']}, duplicated {fig['duplicated']}, "
             f"mismatched {fig['mismatched']}; errors {len(fig['errors'])} "
             f"(untyped {fig['untyped_errors']}, unexplained {fig['unexplained_errors']}); "
             f"every fault recovered: {fig['all_recovered']}", "",
             f"{'client':<18} {'batches':>8} {'passes':>7} {'lost':>5} {'dup':>5} "
             f"{'retired':>8}"]
    for name, c in fig["clients"].items():
        lines.append(f"{name:<18} {c['batches']:>8} {c['passes_completed']:>7} "
                     f"{c['lost']:>5} {c['duplicated']:>5} {c['abandoned_retired']:>8}")
    lines += ["", f"{'fault':<17} {'target':<16} {'at s':>7} {'restored s':>11} "
              f"{'recovered s':>12}"]
    for f in fig["faults"]:
        rec = "skipped" if f["skipped"] else f.get("recovered_s")
        lines.append(f"{f['kind']:<17} {f['target']:<16} {f['at_s']:>7.1f} "
                     f"{f['restored_s']:>11} {rec!s:>12}")
    lines += ["", f"{'errors by type':<40} {'count':>6}"]
    for (typ, by), n in Counter((e["type"], e["explained_by"]) for e in fig["errors"]).items():
        lines.append(f"{typ + ' (' + str(by) + ')':<40} {n:>6}")
    lines += ["", f"{'phase':<17} {'batches':>8} {'p50 ms':>8} {'p99 ms':>8}"]
    for phase, v in fig["batch_latency_ms"].items():
        lines.append(f"{phase:<17} {v['n']:>8} {v['p50']!s:>8} {v['p99']!s:>8}")
    lines += ["", f"{'catalog request':<17} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} "
              f"{'p99 ms':>8} {'max ms':>8}"]
    for route, v in fig["catalog_latency_ms"].items():
        lines.append(f"{route:<17} {v['n']:>6} {v['p50']!s:>8} {v['p95']!s:>8} "
                     f"{v['p99']!s:>8} {v['max']!s:>8}")
    lines += ["", f"{'process':<18} {'runs':>4} {'measured s':>10} {'RSS MiB start':>13} "
              f"{'end':>5} {'anon start':>10} {'end':>5} {'%/h':>7} {'anon %/h':>8} "
              f"{'fds start':>9} {'end':>5}"]
    for role, r in fig["resources"].items():
        lines.append(f"{role:<18} {r['incarnations']:>4} {r['measured_s']:>10} "
                     f"{r['rss_start_mib']:>13} {r['rss_end_mib']:>5} "
                     f"{r['anon_start_mib']:>10} {r['anon_end_mib']:>5} "
                     f"{r['rss_growth_pct_per_hour']!s:>7} "
                     f"{r['anon_growth_pct_per_hour']!s:>8} {r['fds_start']:>9} "
                     f"{r['fds_end']:>5}")
    lines.append(f"RSS growth held to {RSS_GROWTH_BOUND_PCT} %/h over runs of "
                 f"{RSS_MIN_SPAN_S / 60:.0f} min or more: {len(fig['rss_measured'])} processes, "
                 f"over it: {', '.join(fig['rss_over']) or 'none'}")
    return "\n".join(lines)
