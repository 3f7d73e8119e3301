"""How long the catalog takes to answer each ``/ui`` page on a large collection.

    python -m bench.ui --cells 40 --cycles 50 --rows-per-cycle 20000 [--json PATH]

writes a synthetic collection (``windpipe synth``'s generator), registers it with a
catalog served in this process (SQLite, loopback), makes a split and a plan, then asks
for every page ``--repeats`` times over HTTP and reports each page's median and worst
answer time and its size. The segment page is the longest segment, with the plan's
windows over it: the one page whose cost grows with a segment's rows (the others are
bounded pages of the catalog's tables and cached frames). The first answer of each page
is left out of the median (it fills the catalog's frame cache), and reported apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from windpipe.catalog.api.server import start_catalog_server
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["main", "measure_pages"]


def _post(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(path, json=body, headers={"prefer": "wait=600"})
    response.raise_for_status()
    out: dict[str, Any] = response.json()
    return out


def _pages(api: httpx.Client, version: str, split: str, plan: str) -> dict[str, str]:
    index = api.get(f"/v1/splits/{split}/index", params={"format": "json", "page_size": 1000})
    rows = [r for r in index.json()["items"] if r["split"] == "train"
            and r["protocol"] == "cycling"]
    longest = max(rows, key=lambda r: max(r["segment_rows"]))
    ordinal = longest["segment_rows"].index(max(longest["segment_rows"]))
    return {
        "datasets": "/ui",
        "datasets search": "/ui?q=coll",
        "dataset": "/ui/datasets/collection",
        "version (index page 1)": f"/ui/versions/{version}",
        "version (index filtered, 200 rows)": f"/ui/versions/{version}?protocol=cycling"
                                             "&cell=cell_00&limit=200",
        "split": f"/ui/splits/{split}",
        "plan (8 batches)": f"/ui/plans/{plan}",
        "plan (32 batches)": f"/ui/plans/{plan}?batches=32",
        f"segment ({max(longest['segment_rows'])} rows, windows)":
            f"/ui/versions/{version}/segments/{longest['manifest_row_id']}/{ordinal}"
            f"?plan={plan}",
        "servers": "/ui/servers",
    }


def measure_pages(work: Path, *, cells: int, cycles: int, rows_per_cycle: int,
                  repeats: int) -> dict[str, Any]:
    """Write, register, split and plan a collection under ``work``; time every page."""
    data = write_synthetic_dataset(work / "data", cells=cells, cycles=cycles,
                                   rows_per_cycle=rows_per_cycle, seed=5, zarr_fraction=0.0)
    settings = Settings(database_url=f"sqlite:///{work / 'catalog.db'}", data_dir=work / "state",
                        allowed_roots=(str(work),), log_level="WARNING")
    server = start_catalog_server(settings, port=0)
    try:
        with httpx.Client(base_url=server.url, timeout=600) as api:
            version = _post(api, "/v1/datasets/collection/versions",
                            {"root": str(data.path), "manifest": data.manifest_path.name})
            split = _post(api, f"/v1/versions/{version['id']}/splits",
                          {"strategy": "sample", "fraction": 0.2, "seed": 1})
            plan = _post(api, f"/v1/splits/{split['id']}/plans", {
                "default_window": {"batch_size": 16, "seq_len": 256},
                "inputs": {"cycling": ["current_a", "voltage_v"]},
                "targets": {"cycling": ["voltage_v"]}})
            pages = []
            for name, path in _pages(api, version["id"], split["id"], plan["id"]).items():
                times, size = [], 0
                for _ in range(repeats + 1):
                    start = time.perf_counter()
                    response = api.get(path)
                    times.append(time.perf_counter() - start)
                    if response.status_code != 200:
                        msg = f"{path}: {response.status_code} {response.text[:300]}"
                        raise RuntimeError(msg)
                    size = len(response.content)
                warm = times[1:] or times
                pages.append({"page": name, "first_ms": round(times[0] * 1e3, 1),
                              "median_ms": round(statistics.median(warm) * 1e3, 1),
                              "max_ms": round(max(warm) * 1e3, 1), "bytes": size})
    finally:
        server.stop(grace_s=10)
    return {"manifest_rows": version["n_manifest_rows"], "segments": version["n_segments"],
            "rows": version["n_rows"], "batches": plan["n_batches"], "repeats": repeats,
            "pages": pages}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, measure, print a table (and write ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__)
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--rows-per-cycle", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="windpipe-bench-ui-") as tmp:
        record = measure_pages(Path(tmp), cells=args.cells, cycles=args.cycles,
                               rows_per_cycle=args.rows_per_cycle, repeats=args.repeats)
    print(f"{record['manifest_rows']} manifest rows, {record['segments']} segments, "
          f"{record['rows']} rows")
    print(f"{'page':<44} {'first ms':>9} {'median ms':>10} {'max ms':>8} {'bytes':>9}")
    for page in record["pages"]:
        print(f"{page['page']:<44} {page['first_ms']:>9} {page['median_ms']:>10} "
              f"{page['max_ms']:>8} {page['bytes']:>9}")
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
