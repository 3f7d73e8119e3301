"""Registration reports protocol names that look like typos or are new to the catalog."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

import windpipe.sdk as sdk
from windpipe.catalog.protocol_warnings import protocol_warnings
from windpipe.services.contract.stats import DATA_WARNINGS
from windpipe.services.synth import SynthResult


def _names(found: list[dict]) -> list[dict]:
    """The protocol-name warnings (the data's nulls are tests/catalog/test_profile.py's)."""
    return [w for w in found if w["type"] not in DATA_WARNINGS]


def test_rules():
    assert protocol_warnings({"cycling": 10}, elsewhere=(), other_versions=0) == []
    assert protocol_warnings({"thermal": 3}, elsewhere=(), other_versions=0) == []
    near = protocol_warnings({"cyling": 2}, elsewhere=(), other_versions=0)
    assert [(w["type"], w["protocol"], w["similar"]) for w in near] == [
        ("near_miss_protocol", "cyling", "cycling")]
    assert "a typo?" in near[0]["message"]
    new = protocol_warnings({"thermal": 3}, elsewhere={"cycling"}, other_versions=1)
    assert [(w["type"], w["protocol"]) for w in new] == [("new_protocol", "thermal")]
    assert protocol_warnings({"thermal": 3}, elsewhere={"thermal"}, other_versions=1) == []
    # a minority spelling of a protocol of the same version
    own = protocol_warnings({"pulse_test": 40, "pulse_tset": 1}, elsewhere=(),
                            other_versions=0)
    assert [(w["protocol"], w["similar"]) for w in own] == [("pulse_tset", "pulse_test")]


def _variant(synth: SynthResult, dest: Path, rename: dict[int, str]) -> str:
    shutil.copytree(synth.path, dest)
    manifest = pl.read_parquet(dest / "manifest.parquet")
    protocols = manifest.get_column("protocol").to_list()
    for row, name in rename.items():
        protocols[row] = name
    manifest.with_columns(pl.Series("protocol", protocols)).write_parquet(
        dest / "manifest.parquet")
    return dest.as_uri()


def test_registration_answers_and_the_sdk_warns(
    catalog_server: str, synth_dataset: SynthResult, tmp_path: Path,
):
    cat = sdk.Catalog(catalog_server)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", sdk.DataWarning)
        # sockets another test dropped may be collected meanwhile: not this test's
        warnings.simplefilter("ignore", ResourceWarning)
        first = cat.register("synth", root=synth_dataset.path.as_uri(),
                             manifest="manifest.parquet")
    assert _names(first.warnings) == []
    assert cat.version(first.id).raw["warnings"] == []
    frame = pl.read_parquet(synth_dataset.path / "manifest.parquet")
    cycling_row = frame.get_column("protocol").to_list().index("cycling")
    typo_root = _variant(synth_dataset, tmp_path / "typo", {cycling_row: "cyling"})
    with pytest.warns(sdk.RegistrationWarning, match="'cyling'.*close to 'cycling'"):
        typo = cat.register("synth", root=typo_root, manifest="manifest.parquet")
    assert typo.created
    assert [(w["type"], w["protocol"], w["similar"]) for w in _names(typo.warnings)] == [
        ("near_miss_protocol", "cyling", "cycling")]
    assert "cyling" in repr(typo)
    with pytest.warns(sdk.RegistrationWarning, match="'cyling'"):  # said again on 200
        again = cat.register("synth", root=typo_root, manifest="manifest.parquet")
    assert not again.created
    new_root = _variant(synth_dataset, tmp_path / "new", {cycling_row: "thermal"})
    with pytest.warns(sdk.RegistrationWarning, match="'thermal' .* no other version"):
        new = cat.register("other", root=new_root, manifest="manifest.parquet")
    assert [w["type"] for w in _names(new.warnings)] == ["new_protocol"]
    cat.close()
