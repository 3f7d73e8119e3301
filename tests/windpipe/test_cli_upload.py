"""``windpipe upload``: a local dataset folder into the object store (the compose
deployment's way to put data into MinIO from the host, README "Deployment")."""

from __future__ import annotations

from pathlib import Path

import pytest

from windpipe.catalog.manifest import load_manifest
from windpipe.catalog.registration import prepare_version
from windpipe.cli import main
from windpipe.services.storage.store import Storage
from windpipe.services.synth import write_synthetic_dataset


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_upload_copies_every_file_to_a_folder(tmp_path: Path, capsys):
    data = write_synthetic_dataset(tmp_path / "d", cells=1, cycles=2, rows_per_cycle=50, seed=1)
    target = tmp_path / "store"
    target.mkdir()
    assert main(["upload", str(data.path), target.as_uri()]) == 0
    assert _files(target) == _files(data.path)
    out = capsys.readouterr().out
    assert f"to {target.as_uri()}" in out


def test_upload_refuses_a_missing_folder(tmp_path: Path, capsys):
    assert main(["upload", str(tmp_path / "nope"), "s3://bucket/x"]) == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.s3
def test_upload_to_s3_then_the_root_registers(s3_server, tmp_path: Path, monkeypatch, capsys):
    data = write_synthetic_dataset(tmp_path / "d", cells=2, cycles=2, rows_per_cycle=60,
                                   zarr_fraction=0.5, seed=3)
    monkeypatch.setenv("WINDPIPE_S3_ENDPOINT", s3_server.endpoint_url)
    monkeypatch.setenv("WINDPIPE_S3_ALLOW_HTTP", "true")
    uri = f"s3://{s3_server.bucket}/{s3_server.unique_prefix('upload')}"
    assert main(["upload", str(data.path), uri]) == 0
    assert f"root={uri!r}" in capsys.readouterr().out
    remote = s3_server.storage(uri)
    version = prepare_version(remote, load_manifest(remote, "manifest.parquet"))
    assert version.total_rows == data.n_rows
    local = Storage.from_uri(data.path.as_uri())
    assert version.segments.height == prepare_version(
        local, load_manifest(local, "manifest.parquet")).segments.height
