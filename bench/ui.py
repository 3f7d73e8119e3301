"""How long the catalog takes to render each ``/ui`` page on a 100,000-segment collection.

    python -m bench.ui --segments 100000 [--data DIR] [--long-rows 1000000] [--json PATH]

writes the collection of ``python -m bench.collection --segments N`` (its generator and
shape: 100 cells, 60-row cycles, ~1.45 segments a requested one; ``--data``: one written
before) and one long segment of ``--long-rows`` rows (a second dataset, one cell and one
cycle), registers both with a catalog served in this process (SQLite, loopback) beside
a Flight server, splits each, computes both sides' statistics, plans each, then asks for
every page ``--repeats`` times over HTTP. Per page it reports the median and p95 of the
server's time (the ``Server-Timing`` every ``/ui`` answer carries: until the page was
rendered, without the network and the client), the median round trip and the bytes.
The first answer of each page is left out (it fills the catalog's frame cache) and
reported apart. Targets (docs/benchmarks.md): every page under 300 ms, the segment page
of the long segment under 200 KB.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.collection import _CELLS, _PER_CELL_CYCLE
from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.flight_adapters import DatabaseBackend
from windpipe.flight_server.runner import start_flight_server
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["TARGET_BYTES", "TARGET_MS", "main", "measure_pages"]

TARGET_MS = 300.0
TARGET_BYTES = 200_000
_PLAN = {"default_window": {"batch_size": 64, "seq_len": 32},
         "inputs": {"cycling": ["current_a", "voltage_v"]},
         "targets": {"cycling": ["voltage_v"]}}
_LONG_PLAN = {"default_window": {"batch_size": 16, "seq_len": 256},
              "inputs": {"cycling": ["current_a", "voltage_v"]},
              "targets": {"cycling": ["voltage_v"]}}
_TIMING = re.compile(r"page;dur=([0-9.]+)")


def _post(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answer of a POST; a registration still running when the catalog stops
    waiting (202, its job) is followed until it ends."""
    response = api.post(path, json=body, headers={"prefer": "wait=600"})
    while response.status_code == 202:
        time.sleep(1.0)
        response = api.get(f"/v1/jobs/{response.json()['id']}")
        job = response.json()
        if job["state"] == "succeeded":
            out: dict[str, Any] = job["version"]
            return out
        if job["state"] != "running":
            msg = f"{path}: registration {job['state']}: {job.get('error')}"
            raise RuntimeError(msg)
        response = httpx.Response(202, json=job)
    if response.status_code not in (200, 201):
        msg = f"{path}: {response.status_code} {response.text[:300]}"
        raise RuntimeError(msg)
    answer: dict[str, Any] = response.json()
    return answer


def _prepare(api: httpx.Client, name: str, root: Path, plan: dict[str, Any],
             ) -> dict[str, Any]:
    """Register ``root`` as ``name``, split it, compute both sides' statistics, plan it."""
    t0 = time.perf_counter()
    version = _post(api, f"/v1/datasets/{name}/versions",
                    {"root": str(root), "manifest": "manifest.parquet"})
    t1 = time.perf_counter()
    split = _post(api, f"/v1/versions/{version['id']}/splits",
                  {"strategy": "sample", "fraction": 0.2, "seed": 1})
    for side in ("train", "val"):
        _post(api, f"/v1/splits/{split['id']}/stats", {"side": side})
    made = _post(api, f"/v1/splits/{split['id']}/plans", plan)
    print(f"{name}: {version['n_segments']:,} segments registered in {t1 - t0:.1f} s; "
          f"split, statistics and plan in {time.perf_counter() - t1:.1f} s", flush=True)
    return {"version": version, "split": split, "plan": made}


def _longest(api: httpx.Client, split: str) -> tuple[int, int, int]:
    """``(manifest row, ordinal, rows)`` of the longest train cycling segment."""
    index = api.get(f"/v1/splits/{split}/index", params={"format": "json", "page_size": 1000})
    index.raise_for_status()
    rows = [r for r in index.json()["items"] if r["split"] == "train"
            and r["protocol"] == "cycling"]
    longest = max(rows, key=lambda r: max(r["segment_rows"]))
    most = max(longest["segment_rows"])
    return int(longest["manifest_row_id"]), longest["segment_rows"].index(most), int(most)


def _pages(api: httpx.Client, many: dict[str, Any], long: dict[str, Any],
           ) -> dict[str, str]:
    version, split, plan = (many[k]["id"] for k in ("version", "split", "plan"))
    n_rows = int(many["version"]["n_manifest_rows"])
    row, ordinal, rows = _longest(api, split)
    lrow, lordinal, lrows = _longest(api, long["split"]["id"])
    lversion, lplan = long["version"]["id"], long["plan"]["id"]
    return {
        "datasets": "/ui",
        "datasets, searched": "/ui?q=coll",
        "dataset": "/ui/datasets/collection",
        "version (index page 1)": f"/ui/versions/{version}",
        "version (index, last page)": f"/ui/versions/{version}?offset={max(n_rows - 50, 0)}",
        "version (filtered, 200 rows)": f"/ui/versions/{version}?protocol=cycling"
                                        "&cell=cell_00&limit=200",
        "split": f"/ui/splits/{split}",
        "plan (8 batches)": f"/ui/plans/{plan}",
        "plan (32 batches)": f"/ui/plans/{plan}?batches=32",
        f"segment ({rows:,} rows, windows)":
            f"/ui/versions/{version}/segments/{row}/{ordinal}?plan={plan}",
        f"segment ({lrows:,} rows, windows)":
            f"/ui/versions/{lversion}/segments/{lrow}/{lordinal}?plan={lplan}",
        "servers (one Flight server)": "/ui/servers",
    }


def _measure(api: httpx.Client, path: str, repeats: int) -> dict[str, Any]:
    server, trips, size = [], [], 0
    for _ in range(repeats + 1):
        start = time.perf_counter()
        response = api.get(path)
        trips.append((time.perf_counter() - start) * 1e3)
        if response.status_code != 200:
            msg = f"{path}: {response.status_code} {response.text[:300]}"
            raise RuntimeError(msg)
        found = _TIMING.search(response.headers.get("server-timing", ""))
        server.append(float(found.group(1)) if found else float("nan"))
        size = len(response.content)
    warm = server[1:] or server
    return {"first_ms": round(server[0], 1), "median_ms": round(statistics.median(warm), 1),
            "p95_ms": round(float(np.percentile(warm, 95)), 1),
            "round_trip_ms": round(statistics.median(trips[1:] or trips), 1), "bytes": size}


def measure_pages(work: Path, *, segments: int, long_rows: int, repeats: int,
                  data: Path | None = None) -> dict[str, Any]:
    """Write (or take ``data``), register, split and plan; time every page."""
    if data is None:
        data = work / "collection"
        cycles = max(1, round(segments / (_CELLS * _PER_CELL_CYCLE)))
        start = time.perf_counter()
        write_synthetic_dataset(data, cells=_CELLS, cycles=cycles, rows_per_cycle=60,
                                zarr_fraction=0.0)
        print(f"wrote the collection in {time.perf_counter() - start:.1f} s", flush=True)
    long_root = work / "long"
    write_synthetic_dataset(long_root, cells=1, cycles=1, rows_per_cycle=long_rows, seed=7,
                            zarr_fraction=0.0, split_fraction=0.0, sets=1)
    settings = Settings(database_url=f"sqlite:///{work / 'catalog.db'}", data_dir=work / "state",
                        allowed_roots=(str(data), str(long_root)), log_level="WARNING",
                        host="127.0.0.1")
    flight = start_flight_server(settings.model_copy(update={"flight_port": 0}),
                                 backend=DatabaseBackend.from_settings(settings))
    server = start_catalog_server(
        settings.model_copy(update={"flight_locations": (flight.location,)}), port=0)
    try:
        with httpx.Client(base_url=server.url, timeout=3600) as api:
            many = _prepare(api, "collection", data, _PLAN)
            long = _prepare(api, "long", long_root, _LONG_PLAN)
            pages = [{"page": name, "path": path, **_measure(api, path, repeats)}
                     for name, path in _pages(api, many, long).items()]
    finally:
        server.stop(grace_s=10)
        flight.stop(grace_s=5)
    version = many["version"]
    return {"manifest_rows": version["n_manifest_rows"], "segments": version["n_segments"],
            "rows": version["n_rows"], "batches": many["plan"]["n_batches"],
            "long_rows": long["version"]["n_rows"], "repeats": repeats, "pages": pages}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, measure, print a table (and write ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.ui",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--data", type=Path, default=None,
                        help="a collection written before (python -m bench.collection's)")
    parser.add_argument("--long-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="windpipe-bench-ui-") as tmp:
        record = measure_pages(Path(tmp), segments=args.segments, long_rows=args.long_rows,
                               repeats=args.repeats,
                               data=None if args.data is None else args.data.resolve())
    print(f"{record['manifest_rows']:,} manifest rows, {record['segments']:,} segments, "
          f"{record['rows']:,} rows; {record['batches']:,} batches; long segment "
          f"{record['long_rows']:,} rows; {record['repeats']} answers a page")
    print(f"{'page':<36} {'first':>7} {'median':>7} {'p95':>7} {'trip':>7} {'bytes':>9}  "
          "(server ms)")
    for page in record["pages"]:
        mark = "" if page["p95_ms"] < TARGET_MS else "  over 300 ms"
        print(f"{page['page']:<36} {page['first_ms']:>7} {page['median_ms']:>7} "
              f"{page['p95_ms']:>7} {page['round_trip_ms']:>7} {page['bytes']:>9}{mark}")
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
