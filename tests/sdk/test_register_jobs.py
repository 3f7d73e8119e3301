"""``Catalog.register`` follows a registration that outlasts its request: a progress bar
of segments while it polls the job, the version at its end, the job's error raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.catalog.api_support import write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.sdk import Catalog, InvalidManifest
from windpipe.sdk import _register as register_module
from windpipe.services.settings import Settings


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(register_module, "WAIT_S", 0)  # every registration answers 202
    monkeypatch.setattr(register_module, "POLL_S", 0.05)
    settings = Settings(data_dir=tmp_path / "state", log_level="WARNING",
                        allowed_roots=(str(tmp_path),))
    with run_catalog_server(settings) as url, Catalog(url) as client:
        yield client


def test_register_polls_the_job_with_a_progress_bar(
    catalog: Catalog, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "cells"
    write_small_dataset(root, n_cells=4, n_cycles=5)
    version = catalog.register("cells", root=root.as_uri(), manifest="manifest.parquet",
                               progress=True)
    assert version.created
    assert version.raw["n_segments"] == 40
    assert catalog.version(version.id).id == version.id
    assert "registering cells" in capsys.readouterr().err
    again = catalog.register("cells", root=root.as_uri(), manifest="manifest.parquet",
                             progress=False)
    assert again.id == version.id
    assert not again.created


def test_a_failed_job_raises_its_error(catalog: Catalog, tmp_path: Path) -> None:
    root = tmp_path / "broken"
    write_small_dataset(root)
    (root / "seg" / "c0" / "1" / "cycling.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(InvalidManifest) as caught:
        catalog.register("broken", root=root.as_uri(), manifest="manifest.parquet",
                         progress=False)
    problems = caught.value.details["problems"]
    assert [p["segment_path"] for p in problems] == ["seg/c0/1/cycling.parquet"]
