"""Registration from an object store: moto's S3 server behind the benchmark's
latency proxy. Parquet segments are fetched ahead in one request each, many in flight
(windpipe/catalog/batched.py ``prefetched_map``, windpipe/services/storage/held.py), checked and
profiled
from what was fetched: the same version, rows, schema and profile as a local root, one
request a segment, and the round trips overlap."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.fixtures.proxy import CountingProxy
from windpipe.catalog.batched import REMOTE_REQUESTS, prefetched_map
from windpipe.catalog.profile import profile_version
from windpipe.catalog.registration import PreparedVersion, prepare_version, version_digest
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.identity import canonical_json
from windpipe.services.storage.store import Storage, StorageOptions
from windpipe.services.synth import write_synthetic_dataset

pytestmark = [pytest.mark.s3, pytest.mark.timeout(120)]

LATENCY_S = 0.1


@pytest.fixture(scope="module")
def proxy(s3_server: Any) -> Iterator[CountingProxy]:
    with CountingProxy(s3_server.endpoint_url, latency_s=LATENCY_S,
                      bandwidth_bps=400e6) as running:
        yield running


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> tuple[Path, str]:
    """A parquet-only collection of small segments, on disk and uploaded (its prefix)."""
    root = tmp_path_factory.mktemp("store") / "data"
    write_synthetic_dataset(root, cells=4, cycles=24, rows_per_cycle=60, zarr_fraction=0.0)
    prefix = s3_server.unique_prefix("reg")
    s3_server.upload_dir(root, prefix)
    return root, prefix


def _slow(s3_server: Any, proxy: CountingProxy, prefix: str) -> Storage:
    return Storage.from_uri(f"s3://{s3_server.bucket}/{prefix}", StorageOptions(
        s3_endpoint=proxy.endpoint, s3_allow_http=True))


def _content(prepared: PreparedVersion) -> str:
    payload = {"segments": [list(r) for r in prepared.segments.iter_rows()],
               "rows": [list(r) for r in prepared.manifest_rows.iter_rows()],
               "schema": prepared.schema}
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def test_store_registration_overlaps_round_trips_one_request_a_segment(
        s3_server: Any, proxy: CountingProxy, small: tuple[Path, str]) -> None:
    root, prefix = small
    manifest = pl.read_parquet(root / "manifest.parquet")
    n = manifest.height
    assert n >= 100
    storage = _slow(s3_server, proxy, prefix)
    before = proxy.stats.requests
    proxy.reset_peak()
    prepared = prepare_version(storage, manifest)
    profile = profile_version(storage, prepared)
    # one request a segment (size, tag, footer and values in one), none for the profile
    assert proxy.stats.requests - before == n
    # the round trips overlap (one at a time: never two in flight), within the bound
    assert 1 < proxy.peak_in_flight <= REMOTE_REQUESTS, proxy.peak_in_flight
    local = Storage.from_uri(str(root))
    expected = prepare_version(local, manifest)
    assert _content(prepared) == _content(expected)
    assert profile == profile_version(local, expected)


def test_without_fetching_ahead_the_same_version(
        s3_server: Any, small: tuple[Path, str]) -> None:
    root, prefix = small
    manifest = pl.read_parquet(root / "manifest.parquet").head(40)
    storage = s3_server.storage(prefix)  # no injected latency: the slow path is quick
    ahead = prepare_version(storage, manifest)
    plain = prepare_version(storage, manifest, requests=0)
    assert ahead.version_id == plain.version_id
    assert _content(ahead) == _content(plain)
    assert profile_version(storage, ahead) == profile_version(storage, plain)
    assert len(ahead.figures) == 40  # the profile reads none of them again
    assert not plain.figures


def test_a_missing_or_corrupt_object_is_named_as_before(
        s3_server: Any, proxy: CountingProxy, small: tuple[Path, str]) -> None:
    root, _prefix = small
    manifest = pl.read_parquet(root / "manifest.parquet").head(30)
    paths = manifest.get_column("segment_path").to_list()
    bad = s3_server.unique_prefix("bad")
    s3_server.upload_dir(root, bad)
    s3_server.client.delete_object(Bucket=s3_server.bucket, Key=f"{bad}/{paths[7]}")
    s3_server.client.put_object(Bucket=s3_server.bucket, Key=f"{bad}/{paths[11]}",
                                Body=b"not parquet at all")
    with pytest.raises(WindpipeError) as caught:
        prepare_version(_slow(s3_server, proxy, bad), manifest)
    assert caught.value.type == ErrorType.INVALID_MANIFEST
    problems = {p["row"]: p["problem"] for p in caught.value.details["problems"]}
    assert problems == {7: f"segment {paths[7]!r} does not exist",
                        11: f"segment {paths[11]!r} is not a parquet file (no PAR1 footer)"}


def test_prefetched_map_bounds_requests_keeps_order_and_stops(
        s3_server: Any, proxy: CountingProxy, small: tuple[Path, str]) -> None:
    root, prefix = small
    paths = pl.read_parquet(root / "manifest.parquet").get_column("segment_path").to_list()
    storage = _slow(s3_server, proxy, prefix)
    held: list[int] = []

    def size(view: Storage, path: str) -> int:
        found = view.held(path)
        assert found is not None
        held.append(found.size)
        return view.head(path).size  # from what is held: no request

    before = proxy.stats.requests
    proxy.reset_peak()
    out = list(prefetched_map(size, storage, paths[:64], requests=16, batch=8))
    assert [p for p, _ in out] == paths[:64]
    assert [s for _, s in out] == held
    assert proxy.stats.requests - before == 64
    # at most 16 in flight, never one a segment
    assert 1 < proxy.peak_in_flight <= 16, proxy.peak_in_flight
    seen: list[str] = []
    for path, _ in prefetched_map(size, storage, paths, requests=16, batch=8,
                                  stop=lambda: len(seen) >= 5):
        seen.append(path)
    assert 5 <= len(seen) < len(paths)


def test_the_version_digest_hashed_in_chunks_is_the_whole_payload_digest() -> None:
    frame = pl.DataFrame({"set_id": ["s"] * 25, "cell_id": [f"c{i % 3}" for i in range(25)],
                          "cidx": list(range(25)), "x": [0.5 * i for i in range(25)]})
    payload = {"kind": "windpipe-version-v1", "root": "s3://b/p", "columns": frame.columns,
               "rows": [list(r) for r in frame.iter_rows()]}
    whole = "v-" + hashlib.sha256(canonical_json(payload)).hexdigest()[:32]
    for chunk in (1, 4, 25, 8192):
        assert version_digest("s3://b/p", frame, chunk=chunk) == whole
    empty = frame.head(0)
    assert version_digest("s3://b/p", empty) == "v-" + hashlib.sha256(canonical_json(
        {**payload, "rows": []})).hexdigest()[:32]
