"""Registration writes its version's pack (windpipe/services/storage/packs.py) and retiring the
version removes it; a Flight server that reads it streams the batches a server reading
every file streams, byte for byte; a registration that fails leaves no pack; a segment
changed since registration still fails its stream with ``segment_changed``. Real
catalog and Flight servers on loopback."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.servers import embedded_services
from tests.services.storage.test_packs import count_reads
from windpipe.sdk import (
    Catalog,
    DatasetVersion,
    LoaderConfig,
    SegmentChanged,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.synth import write_synthetic_dataset

CONFIG = LoaderConfig(
    split="train", strategy="shuffled", default_window=WindowConfig(batch_size=16, seq_len=8),
    inputs={"cycling": ("current_a", "voltage_v")}, targets={"cycling": ("voltage_v",)})


def _register(catalog: Catalog, name: str, root: Path) -> DatasetVersion:
    with warnings.catch_warnings():  # the synthetic data's nulls, on purpose: not checked here
        warnings.simplefilter("ignore")
        return catalog.register(name, root=str(root), manifest="manifest.parquet",
                                progress=False)


def _epoch(url: str, root: Path) -> tuple[str, list[tuple[np.ndarray, ...]]]:
    with Catalog(url) as catalog:
        version = _register(catalog, "packed", root)
        version.index()
        plan = version.split(ValidationConfig.sample(0.25, seed=1)).plan(CONFIG)
        batches = [(b.inputs.numpy().copy(), b.targets.numpy().copy(), b.mask.numpy().copy())
                   for b in plan.batches(transport="flight")]
    return version.id, batches


@pytest.fixture
def collection(tmp_path: Path) -> Path:
    root = tmp_path / "small"
    write_synthetic_dataset(root, cells=4, cycles=5, rows_per_cycle=60, zarr_fraction=0.25)
    return root


def test_batches_from_the_pack_are_the_batches_from_the_files(
        tmp_path: Path, collection: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read = count_reads(monkeypatch)
    with embedded_services(tmp_path / "packed") as url:
        version_id, packed = _epoch(url, collection)
    assert read
    assert all(p.endswith(".zarr") for p in read)
    index = pa.ipc.open_file(pa.memory_map(
        str(tmp_path / "packed" / "packs" / version_id / "index.arrow"))).read_all()
    manifest = pl.read_parquet(collection / "manifest.parquet")
    parquet = {p for p in manifest.get_column("segment_path").to_list() if p.endswith(".parquet")}
    assert set(index.column("path").to_pylist()) == parquet  # every small parquet segment
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "packed" / "packs").iterdir())

    monkeypatch.setenv("WINDPIPE_PACK_ROWS", "0")
    read.clear()
    with embedded_services(tmp_path / "files") as url:
        same_id, from_files = _epoch(url, collection)
    assert any(p.endswith(".parquet") for p in read)
    assert same_id == version_id
    assert not (tmp_path / "files" / "packs").exists() or not any(
        (tmp_path / "files" / "packs").iterdir())
    assert len(packed) == len(from_files) > 3
    for got, want in zip(packed, from_files, strict=True):
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype
            assert a.shape == b.shape
            assert a.tobytes() == b.tobytes()


def test_a_failed_registration_leaves_no_pack(tmp_path: Path, collection: Path) -> None:
    manifest = pl.read_parquet(collection / "manifest.parquet")
    broken = manifest.with_columns(pl.when(pl.int_range(pl.len()) == manifest.height - 1)
                                   .then(pl.lit("segments/missing.parquet"))
                                   .otherwise(pl.col("segment_path")).alias("segment_path"))
    broken.write_parquet(collection / "broken.parquet")
    with (embedded_services(tmp_path / "data") as url, Catalog(url) as catalog,
          pytest.raises(Exception, match=r"missing\.parquet")):
        catalog.register("broken", root=str(collection), manifest="broken.parquet",
                         progress=False)
    packs = tmp_path / "data" / "packs"
    assert not packs.exists() or not any(packs.iterdir())


def test_a_segment_changed_after_registration_still_fails_its_stream(
        tmp_path: Path, collection: Path) -> None:
    with embedded_services(tmp_path / "data") as url, Catalog(url) as catalog:
        version = _register(catalog, "changed", collection)
        version.index()
        plan = version.split(ValidationConfig.sample(0.25, seed=1)).plan(CONFIG)
        assert (tmp_path / "data" / "packs" / version.id / "index.arrow").is_file()
        manifest = pl.read_parquet(collection / "manifest.parquet")
        victim = next(p for p, proto in zip(manifest.get_column("segment_path").to_list(),
                                            manifest.get_column("protocol").to_list(),
                                            strict=True)
                      if proto == "cycling" and p.endswith(".parquet"))
        table = pq.read_table(collection / victim)
        pq.write_table(table.slice(0, table.num_rows - 1), collection / victim)
        with pytest.raises(SegmentChanged) as err:
            for _ in plan.batches(transport="flight"):
                pass
        assert victim in str(err.value)


def test_retiring_a_version_removes_its_pack(
        tmp_path: Path, collection: Path) -> None:
    with embedded_services(tmp_path / "data") as url, Catalog(url) as catalog:
        version = _register(catalog, "retired", collection)
        packs = tmp_path / "data" / "packs"
        assert (packs / version.id / "index.arrow").is_file()
        version.retire()
        assert not (packs / version.id).exists()
        assert not any(p.name.startswith(".tmp") for p in packs.iterdir())
