"""``Catalog.register(..., pattern=..., exclude=..., on_bad_file=...)`` against a real
catalog server: a truncated parquet file stops the registration, naming it, unless it is
excluded or skipped; skipping warns (``RegistrationWarning``) and the version lists what
it left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.fixtures.servers import run_catalog_server
from windpipe.sdk import Catalog, DataWarning, InvalidManifest, InvalidRequest, RegistrationWarning
from windpipe.services.settings import Settings

PATTERN = "{cell_id}/{protocol}/cycle_{cidx}.parquet"
BAD = "c2/cycling/cycle_1.parquet"


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'catalog.db'}",
                        data_dir=tmp_path / "state", log_level="WARNING")
    with run_catalog_server(settings) as url, Catalog(url) as client:
        yield client


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "cells"
    for cell in ("c1", "c2"):
        for cidx in (0, 1, 2):
            path = root / cell / "cycling" / f"cycle_{cidx}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame({"time_s": np.arange(20, dtype=np.float64),
                          "voltage_v": np.full(20, 3.7)}).write_parquet(path)
    data = (root / BAD).read_bytes()
    (root / BAD).write_bytes(data[:-40])  # truncated: no footer
    return root


def test_register_stops_excludes_or_skips_a_bad_file(catalog: Catalog, root: Path) -> None:
    with pytest.raises(InvalidManifest) as refused:
        catalog.register("cells", root=root.as_uri(), pattern=PATTERN, progress=False)
    assert refused.value.details["problems"][0]["segment_path"] == BAD
    assert catalog.datasets() == []

    with pytest.warns(RegistrationWarning, match=r"1 file left out .*c2/cycling/cycle_1") as seen:
        version = catalog.register("cells", root=root.as_uri(), pattern=PATTERN,
                                   on_bad_file="skip", progress=False)
    assert not any(w.category is DataWarning for w in seen)
    assert version.created
    assert version.skipped_count == 1
    [skipped] = version.skipped
    assert skipped["path"] == BAD
    assert "not a parquet file" in skipped["reason"]
    assert version.raw["n_segments"] == 5
    assert BAD not in {s["path"] for s in version.segments()}

    excluded = catalog.register("cells", root=root.as_uri(), pattern=PATTERN,
                                exclude=["c2/*/cycle_1.parquet"], progress=False)
    assert excluded.id == version.id  # the same segments: the same version
    assert not excluded.created
    assert (excluded.skipped, excluded.skipped_count) == ([], 0)


def test_register_checks_the_new_options_before_sending(catalog: Catalog, root: Path) -> None:
    with pytest.raises(InvalidRequest, match="exclude= is a list"):
        catalog.register("cells", root=root.as_uri(), pattern=PATTERN, exclude="c2/*")
    with pytest.raises(InvalidRequest, match="on_bad_file apply to pattern= only"):
        catalog.register("cells", root=root.as_uri(), manifest="m.parquet", on_bad_file="skip")
    with pytest.raises(InvalidRequest, match=r"'\.\./other/\*'"):  # the catalog's 422
        catalog.register("cells", root=root.as_uri(), pattern=PATTERN,
                         exclude=["../other/*"], progress=False)
    assert catalog.datasets() == []
