"""Registration of a small-segment collection from a slow object store.

    python -m bench.collection_store --segments 2000 [--latency-ms 20] [--bandwidth-mbps 200]

writes a synthetic collection of about ``--segments`` small parquet segments (``windpipe
synth``'s generator, 60 rows a cycle), starts ``moto_server`` and
``bench.latency_proxy`` (first-byte latency, a bandwidth cap in aggregate) in processes
of their own, uploads the collection, then measures, side by side in one run:

- ``one at a time``: for each segment in manifest order, what a naive registrar reads,
  one request after another: a ``head`` (size, tag), then the footer (a ranged GET of
  the last 64 KiB); no parsing;
- ``registration``: ``Catalog(url).register(...)`` (the SDK follows the job) against a
  catalog served in this process whose root is the bucket behind the proxy;
- ``store ceiling``: the same one request a segment that registration makes (a suffix
  GET: size, tag, footer or whole file), 64 in flight, nothing else done: the most
  requests a second this store (moto and the proxy, on this machine) answers;
- with ``--sweep 8,16,...``: the checks alone (``windpipe.catalog.registration.prepare_version``
  in this process) at each number of requests in flight, and the profile after them.

Prints seconds, per segment, registration's speed-up over one at a time (target >= 10x)
and the CPU time moto and the proxy spent a segment in each row (the store's own cost,
which bounds every row on a small machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
import warnings
from pathlib import Path

import obstore
import polars as pl
import psutil
from obstore.store import S3Store

from bench.object_store import _BUCKET, _CREDS, _start_servers, _upload
from windpipe.catalog.api.server import start_catalog_server
from windpipe.catalog.batched import REMOTE_REQUESTS, prefetched_map
from windpipe.catalog.profile import profile_version
from windpipe.catalog.registration import prepare_version
from windpipe.sdk import Catalog
from windpipe.services.settings import Settings
from windpipe.services.storage.store import Storage, StorageOptions
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["main", "one_at_a_time", "register_served"]

_PER_CELL_CYCLE = 1.7  # cycling every cycle, hppc every 5th, eis every 2nd
_TAIL = 64 << 10


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_at_a_time(endpoint: str, prefix: str, paths: list[str]) -> float:
    """Seconds of a ``head`` then a footer GET per segment, one request after another."""
    store = S3Store(_BUCKET, prefix=prefix, endpoint=endpoint, region="us-east-1",
                    access_key_id="bench", secret_access_key="bench",
                    client_options={"allow_http": True})
    start = time.perf_counter()
    for path in paths:
        size = int(obstore.head(store, path)["size"])
        _ = obstore.get_range(store, path, start=max(0, size - _TAIL), end=size)
    return time.perf_counter() - start


def store_ceiling(uri: str, endpoint: str, paths: list[str], *,
                  requests: int = REMOTE_REQUESTS) -> float:
    """Seconds of registration's one request a segment (a suffix GET) fetched as
    registration fetches them (:func:`windpipe.catalog.batched.prefetched_map`, ``requests`` in
    flight), nothing done with the bytes."""
    storage = Storage.from_uri(uri, StorageOptions(s3_endpoint=endpoint, s3_allow_http=True))
    start = time.perf_counter()
    for _ in prefetched_map(lambda _view, _path: None, storage, paths, requests=requests):
        pass
    return time.perf_counter() - start


class _StoreCpu:
    """CPU seconds the store's processes (moto, the proxy) spent since the last call."""

    def __init__(self, *pids: int) -> None:
        self._procs = [psutil.Process(p) for p in pids]
        self._last = self._now()

    def _now(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self._procs)

    def lap(self) -> float:
        now = self._now()
        spent, self._last = now - self._last, now
        return spent


def register_served(uri: str, endpoint: str, *, work: Path) -> tuple[str, int, float]:
    """``(version id, segments, seconds)`` of one registration of ``uri``'s manifest
    through the SDK against a fresh catalog served on a free port."""
    settings = Settings(data_dir=work, log_level="WARNING", host="127.0.0.1",
                        allowed_roots=(uri,), s3_endpoint=endpoint, s3_allow_http=True)
    server = start_catalog_server(settings, port=0)
    try:
        catalog = Catalog(server.url, timeout=600.0, read_timeout=600.0)
        start = time.perf_counter()
        with warnings.catch_warnings():  # the synthetic data's nulls, on purpose
            warnings.simplefilter("ignore")
            version = catalog.register("store", root=uri, manifest="manifest.parquet",
                                       progress=False)
        seconds = time.perf_counter() - start
        return version.id, int(version.raw["n_segments"]), seconds
    finally:
        server.stop(grace_s=5.0)


def _sweep(uri: str, endpoint: str, manifest: pl.DataFrame, levels: list[int],
           floor_per_s: float) -> None:
    storage = Storage.from_uri(uri, StorageOptions(s3_endpoint=endpoint, s3_allow_http=True))
    for requests in levels:
        start = time.perf_counter()
        prepared = prepare_version(storage, manifest, requests=requests)
        checks = time.perf_counter() - start
        start = time.perf_counter()
        profile_version(storage, prepared)
        prof = time.perf_counter() - start
        per = (checks + prof) / manifest.height
        print(f"  {requests:4d} in flight: checks {checks:6.2f} s, profile {prof:5.2f} s, "
              f"{per * 1e3:6.2f} ms/segment = {floor_per_s / per:5.1f}x faster than one at "
              "a time", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, write and upload the collection, print every figure."""
    parser = argparse.ArgumentParser(prog="python -m bench.collection_store",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=2000)
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=200.0)
    parser.add_argument("--sweep", default="", help="requests in flight to try, e.g. 1,8,64 "
                        "(0: none fetched ahead), over the first --sweep-segments")
    parser.add_argument("--sweep-segments", type=int, default=1000)
    parser.add_argument("--floor-every", type=int, default=1,
                        help="time one at a time over every k-th segment (per segment)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the three rows, alternating (a loaded machine)")
    args = parser.parse_args(argv)
    os.environ.update(_CREDS)
    cycles = max(1, round(args.segments / (args.cells * _PER_CELL_CYCLE)))
    moto, proxy, upstream, endpoint = _start_servers(args.latency_ms, args.bandwidth_mbps)
    try:
        with tempfile.TemporaryDirectory(prefix="windpipe-collection-store-") as tmp:
            root = Path(tmp) / "small"
            write_synthetic_dataset(root, cells=args.cells, cycles=cycles, rows_per_cycle=60,
                                    zarr_fraction=0.0)
            manifest = pl.read_parquet(root / "manifest.parquet")
            paths = manifest.get_column("segment_path").to_list()
            prefix = "collection"
            start = time.perf_counter()
            _upload(upstream, root, prefix)
            uri = f"s3://{_BUCKET}/{prefix}"
            print(f"{len(paths):,} segments ({cycles} cycles of {args.cells} cells) uploaded "
                  f"in {time.perf_counter() - start:.1f} s; proxy {args.latency_ms:g} ms, "
                  f"{args.bandwidth_mbps:g} MB/s in aggregate", flush=True)
            cpu = _StoreCpu(moto.pid, proxy.pid)
            per = 1e3 / len(paths)
            sample = paths[:: max(1, args.floor_every)]
            floor_per = 0.0
            for r in range(args.rounds):
                cpu.lap()
                floor_per = one_at_a_time(endpoint, prefix, sample) / len(sample)
                print(f"round {r} one at a time  {floor_per * 1e3:8.2f} ms/segment over "
                      f"{len(sample):,} (store CPU {cpu.lap() * 1e3 / len(sample):.2f} "
                      "ms/segment)", flush=True)
                ceiling_s = store_ceiling(uri, endpoint, paths)
                print(f"round {r} store ceiling  {ceiling_s * per:8.2f} ms/segment "
                      f"({ceiling_s:.2f} s; store CPU {cpu.lap() * per:.2f} ms/segment) = "
                      f"{floor_per * len(paths) / ceiling_s:.1f}x one at a time", flush=True)
                version_id, n, reg_s = register_served(uri, endpoint,
                                                       work=Path(tmp) / f"catalog-{r}")
                assert n == len(paths), (n, len(paths))
                print(f"round {r} registration   {reg_s * per:8.2f} ms/segment ({reg_s:.2f} s; "
                      f"store CPU {cpu.lap() * per:.2f} ms/segment) = "
                      f"{floor_per * len(paths) / reg_s:.1f}x faster than one at a time "
                      f"(target >= 10x), {ceiling_s / reg_s:.2f}x the store ceiling; peak "
                      f"RSS {_peak_mib():.0f} MiB; {version_id}", flush=True)
            if args.sweep:
                head = manifest.head(args.sweep_segments)
                print(f"checks and profile in process over {head.height:,} segments, by "
                      "requests in flight:")
                _sweep(uri, endpoint, head, [int(x) for x in args.sweep.split(",")], floor_per)
    finally:
        for proc in (proxy, moto):
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
