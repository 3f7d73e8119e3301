"""The first epoch from a slow object store: moto's S3 server behind
``bench.latency_proxy`` (first-byte latency, a bandwidth cap in aggregate), against the
proxy's limit, what the proxy delivers at best, and a naive reader.

    python -m bench.object_store [--rows 8000000] [--latency-ms 20] [--bandwidth-mbps 200]

Writes the benchmark dataset (``bench.data``, parquet, 128k-row row groups), starts
``moto_server`` and the proxy in processes of their own, uploads the dataset and runs,
each in a fresh process (peak RSS is that process's ``ru_maxrss``):

* ``ceiling``: every cycling segment's plan columns fetched with 16 threads of plain
  ranged GETs (each row group's adjacent columns in one), no decode: about the most
  this proxy, moto and machine deliver;
* ``naive``: one whole-object GET per cycling segment, in plan order, then each row
  group of the plan's columns decoded with pyarrow (what a loader without ranged or
  concurrent reads does);
* ``windpipe``: the first epoch of the benchmark's shuffled plan (``bench.workload``)
  from ``windpipe serve`` (catalog and Flight server in a process of their own, no
  tier, the cache holding the split: a block fill through the read-ahead, then every
  batch) registered from ``s3://`` (setup, not timed), streamed over Flight and
  consumed here; ``server_rss_bytes``: the server's RSS at the end;
* ``windpipe_no_readahead``: the same with ``WINDPIPE_S3_READAHEAD_BYTES=0`` (each chunk
  read as before this read-ahead: a head, then the column ranges, one after another).

"Bytes needed" are the column chunks of the plan's four columns in the cycling
segments (footer sizes); each row's MB/s is those bytes over its seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.data import ensure_dataset
from bench.serve_process import windpipe_serve
from bench.workload import INPUTS, TARGETS, plan_config

__all__ = ["main", "needed_ranges", "run"]

_BUCKET = "windpipe-bench"
_CREDS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
          "AWS_DEFAULT_REGION": "us-east-1"}
COLUMNS = (*INPUTS, *TARGETS)
_ROWS = ("ceiling", "naive", "windpipe", "windpipe_no_readahead")


def needed_ranges(root: Path) -> dict[str, list[tuple[int, int]]]:
    """Per cycling segment (relative path), the byte ranges of the plan's columns."""
    from windpipe.services.storage.formats.parquet import column_chunk_ranges  # noqa: PLC0415

    out = {}
    for path in sorted((root / "segments").rglob("cycling*.parquet")):
        meta = pq.read_metadata(path)
        rel = path.relative_to(root).as_posix()
        out[rel] = [r for g in range(meta.num_row_groups)
                    for r in (column_chunk_ranges(meta, g, list(COLUMNS)) or [])]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _store(endpoint: str, prefix: str) -> Any:
    from obstore.store import S3Store  # noqa: PLC0415

    return S3Store(_BUCKET, prefix=prefix, endpoint=endpoint, region="us-east-1",
                   access_key_id="bench", secret_access_key="bench",
                   client_options={"allow_http": True})


def _row_ceiling(endpoint: str, prefix: str, ranges: dict[str, list[tuple[int, int]]],
                 ) -> dict[str, Any]:
    import obstore  # noqa: PLC0415

    from windpipe.services.storage.coalesce import coalesce  # noqa: PLC0415

    store = _store(endpoint, prefix)
    jobs = [(p, s.start, s.end) for p, rs in ranges.items()
            for s in coalesce(rs, gap=1 << 20)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        got = sum(pool.map(lambda j: len(obstore.get_range(store, j[0], start=j[1], end=j[2])),
                           jobs))
    return {"seconds": time.perf_counter() - t0, "bytes": got}


def _row_naive(endpoint: str, prefix: str, ranges: dict[str, list[tuple[int, int]]],
               ) -> dict[str, Any]:
    import obstore  # noqa: PLC0415

    store = _store(endpoint, prefix)
    t0 = time.perf_counter()
    rows = 0
    for path in ranges:
        data = obstore.get(store, path).bytes()
        pf = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data)))
        for g in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(g, columns=list(COLUMNS))
            cols = [table.column(c).to_numpy() for c in COLUMNS]
            rows += len(cols[0])
    return {"seconds": time.perf_counter() - t0, "rows": rows}


def _row_windpipe(endpoint: str, prefix: str, work: Path, *,
                  readahead: bool = True) -> dict[str, Any]:
    """``windpipe serve`` (catalog + Flight server, its own process, no tier) reading the
    slow store; register, split and plan (not timed), then epoch 0 streamed over Flight."""
    import psutil  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from windpipe.sdk import Catalog  # noqa: PLC0415
    from windpipe.services.contract.configs import ValidationConfig  # noqa: PLC0415

    torch.set_num_threads(1)
    env = {**os.environ, **_CREDS, "WINDPIPE_S3_ENDPOINT": endpoint,
           "WINDPIPE_S3_ALLOW_HTTP": "true", "WINDPIPE_TIER_BYTES": "0",
           "WINDPIPE_LOG_LEVEL": "WARNING",
           **({} if readahead else {"WINDPIPE_S3_READAHEAD_BYTES": "0"})}
    with windpipe_serve(["--data-dir", str(work), "--port", "0", "--flight-port", "0",
                         "--cache-bytes", str(2 << 30), "--allow-root",
                         f"s3://{_BUCKET}/{prefix}"], env=env) as (server, url):
        t0 = time.perf_counter()
        cat = Catalog(url)
        ver = cat.register("s3bench", root=f"s3://{_BUCKET}/{prefix}",
                           manifest="manifest.parquet", progress=False)
        split = ver.split(ValidationConfig.sample(fraction=0.0))
        plan = split.plan(plan_config(64, 1024))
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        n = 0
        for batch in plan.batches(epoch=0, progress=False, transport="flight"):
            n += 1
            inputs: Any = batch.inputs
            _ = float(inputs[0, 0, 0])
        seconds = time.perf_counter() - t0
        server_rss = psutil.Process(server.pid).memory_info().rss
    return {"seconds": seconds, "batches": n, "setup_s": setup,
            "server_rss_bytes": int(server_rss)}


def _child(args: argparse.Namespace) -> int:
    ranges = {k: [tuple(r) for r in v]
              for k, v in json.loads(Path(args.ranges).read_text()).items()}
    if args.row == "ceiling":
        out = _row_ceiling(args.endpoint, args.prefix, ranges)  # type: ignore[arg-type]
    elif args.row == "naive":
        out = _row_naive(args.endpoint, args.prefix, ranges)  # type: ignore[arg-type]
    else:
        out = _row_windpipe(args.endpoint, args.prefix, Path(args.work),
                            readahead=args.row == "windpipe")
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps(out), flush=True)
    # the result is out and nothing is left to finalize: the naive row's process (obstore
    # and pyarrow alone, no windpipe code) aborted in finalization ("terminate called
    # without an active exception") in several runs of 2026-12-01, losing its row
    os._exit(0)


def _run_row(row: str, *, endpoint: str, prefix: str, ranges_file: Path,
             work: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.object_store", "--child", row, "--endpoint", endpoint,
           "--prefix", prefix, "--ranges", str(ranges_file), "--work", str(work)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, **_CREDS})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-3000:]}
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def _start_servers(latency_ms: float, bandwidth_mbps: float,
                   ) -> tuple[subprocess.Popen[str], subprocess.Popen[str], str, str]:
    port = _free_port()
    moto = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True)
    upstream = f"http://127.0.0.1:{port}"
    proxy = subprocess.Popen([sys.executable, "-m", "bench.latency_proxy", "--upstream",
                              upstream, "--latency-ms", str(latency_ms), "--bandwidth-mbps",
                              str(bandwidth_mbps)], stdout=subprocess.PIPE, text=True)
    assert proxy.stdout is not None
    endpoint = proxy.stdout.readline().split()[-1]
    return moto, proxy, upstream, endpoint


def _upload(upstream: str, root: Path, prefix: str) -> None:
    import boto3  # noqa: PLC0415

    client = boto3.client("s3", endpoint_url=upstream, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    for _ in range(100):
        try:
            client.create_bucket(Bucket=_BUCKET)
            break
        except Exception:  # moto still starting
            time.sleep(0.1)
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]

    def put(path: Path) -> None:
        client.put_object(Bucket=_BUCKET, Key=f"{prefix}/{path.relative_to(root).as_posix()}",
                          Body=path.read_bytes())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))


def run(*, rows: int, latency_ms: float, bandwidth_mbps: float, out: Path, rounds: int = 1,
        only: tuple[str, ...] = _ROWS, verbose: bool = True) -> dict[str, Any]:
    """The rows ``only`` over ``rows`` cycling rows (the dataset written under ``out``
    once), ``rounds`` times alternating; the record: ``summary`` (best seconds a row,
    ``windpipe/limit`` and the other ratios), every run's figures, the arguments."""

    def say(line: str) -> None:
        if verbose:
            print(line, flush=True)

    os.environ.update(_CREDS)
    root = ensure_dataset(out / f"data-{rows}", cycling_rows=rows)
    ranges = needed_ranges(root)
    needed = sum(b - a for rs in ranges.values() for a, b in rs)
    moto, proxy, upstream, endpoint = _start_servers(latency_ms, bandwidth_mbps)
    results: dict[str, list[dict[str, Any]]] = {row: [] for row in only}
    try:
        prefix = f"os-{rows}"
        t0 = time.perf_counter()
        _upload(upstream, root, prefix)
        say(f"uploaded {root} to moto ({time.perf_counter() - t0:.1f} s); "
            f"{len(ranges)} cycling segments, {needed / 1e6:.1f} MB of plan columns; "
            f"proxy {latency_ms:g} ms, {bandwidth_mbps:g} MB/s in aggregate")
        with tempfile.TemporaryDirectory(prefix="wp-os-") as tmp:
            ranges_file = Path(tmp) / "ranges.json"
            ranges_file.write_text(json.dumps(ranges))
            for r in range(rounds):
                for row, outs in results.items():
                    res = _run_row(row, endpoint=endpoint, prefix=prefix,
                                   ranges_file=ranges_file, work=Path(tmp) / f"cat-{r}")
                    outs.append(res)
                    if "error" in res:
                        say(f"{row}: FAILED\n{res['error']}")
                        continue
                    say(f"round {r} {row:9s} {res['seconds']:7.2f} s "
                        f"{needed / res['seconds'] / 1e6:7.1f} MB/s "
                        f"peak RSS {res['peak_rss_bytes'] / 2**20:6.0f} MiB")
    finally:
        proxy.terminate()
        moto.terminate()
        proxy.wait(10)
        moto.wait(10)
    best = {row: min((o["seconds"] for o in outs if "error" not in o), default=None)
            for row, outs in results.items()}
    best = {row: best.get(row) for row in _ROWS}
    limit = bandwidth_mbps * 1e6
    summary: dict[str, Any] = {"needed_bytes": needed, "limit_bps": limit, "best_s": best}
    if best["windpipe"]:
        rate = needed / best["windpipe"]
        summary["windpipe/limit"] = rate / limit
        if best["ceiling"]:
            summary["windpipe/ceiling"] = best["ceiling"] / best["windpipe"]
            summary["ceiling/limit"] = needed / best["ceiling"] / limit
        if best["naive"]:
            summary["windpipe/naive"] = best["naive"] / best["windpipe"]
        if best["windpipe_no_readahead"]:
            summary["windpipe/no_readahead"] = best["windpipe_no_readahead"] / best["windpipe"]
    return {"summary": summary, "rows": results, "args": {
        "rows": rows, "latency_ms": latency_ms, "bandwidth_mbps": bandwidth_mbps}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.object_store",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000,
                        help="cycling rows (default %(default)s)")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=200.0,
                        help="the proxy's aggregate cap, MB/s (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds")
    parser.add_argument("--only", nargs="+", choices=_ROWS, default=list(_ROWS),
                        help="the rows to run (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--ranges", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.row = args.child
        return _child(args)
    record = run(rows=args.rows, latency_ms=args.latency_ms,
                 bandwidth_mbps=args.bandwidth_mbps, out=args.out, rounds=args.rounds,
                 only=tuple(args.only))
    print(json.dumps(record["summary"], indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "object_store.json").write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
