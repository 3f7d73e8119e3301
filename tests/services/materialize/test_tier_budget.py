"""The tier's budget: set, off, or by default half the free space of the disk
that holds it, resolved when a server starts and stated with how it was chosen."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from windpipe.flight_server.config import FlightServerConfig
from windpipe.services.materialize import tier as tier_module
from windpipe.services.materialize.tier import (
    AUTO_TIER_CAP,
    AUTO_TIER_FLOOR,
    Tier,
    TierInfo,
    mapping_charge,
    tier_budget,
)
from windpipe.services.settings import Settings


def _free(free: int) -> object:
    return lambda _path: shutil._ntuple_diskusage(free * 4, free * 3, free)  # type: ignore[attr-defined]


def test_a_set_budget_is_kept_and_zero_is_no_tier(tmp_path: Path) -> None:
    assert tier_budget(tmp_path, 123 << 20).bytes == 123 << 20
    assert tier_budget(tmp_path, 123 << 20).source == "set"
    assert tier_budget(tmp_path, 0).bytes == 0


def test_auto_is_half_the_free_space_of_the_nearest_existing_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []

    def usage(path: Path) -> object:
        seen.append(Path(path))
        return _free(10 << 30)(path)

    monkeypatch.setattr(tier_module.shutil, "disk_usage", usage)
    budget = tier_budget(tmp_path / "not" / "yet", None)
    assert budget.bytes == 5 << 30
    assert budget.source == "auto: 50% of 10.0 GiB free"
    assert seen == [tmp_path.resolve()]


def test_auto_counts_its_own_blocks_and_has_a_floor_and_a_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ab.wpb").write_bytes(b"x" * (1 << 20))
    monkeypatch.setattr(tier_module.shutil, "disk_usage", _free(9 << 30))
    assert tier_budget(tmp_path, None).bytes == ((9 << 30) + (1 << 20)) // 2
    monkeypatch.setattr(tier_module.shutil, "disk_usage", _free(2 * AUTO_TIER_FLOOR - (4 << 20)))
    low = tier_budget(tmp_path / "empty", None)
    assert low.bytes == 0
    assert low.source.endswith("no tier")
    monkeypatch.setattr(tier_module.shutil, "disk_usage", _free(4 * AUTO_TIER_CAP))
    assert tier_budget(tmp_path, None).bytes == AUTO_TIER_CAP


def test_the_server_config_resolves_auto_at_start(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tier_module.shutil, "disk_usage", _free(8 << 30))
    config = FlightServerConfig.from_settings(Settings(data_dir=tmp_path))
    assert Settings().tier_bytes is None
    assert (config.tier_dir, config.tier_bytes) == (tmp_path / "tier", 4 << 30)
    assert config.tier_source.startswith("auto: 50% of 8.0 GiB free")
    monkeypatch.setattr(tier_module.shutil, "disk_usage", _free(1 << 20))
    assert FlightServerConfig.from_settings(Settings(data_dir=tmp_path)).tier_dir is None
    assert FlightServerConfig.from_settings(Settings(tier_bytes=0)).tier_dir is None


def test_the_advertised_tier_says_how_its_budget_was_chosen(tmp_path: Path) -> None:
    tier = Tier(tmp_path, budget_bytes=1 << 20, budget_source="auto: 50% of 2.0 GiB free")
    info = tier.info()
    assert TierInfo.from_dict(info.as_dict()) == info
    assert info.as_dict()["budget_source"] == "auto: 50% of 2.0 GiB free"
    old = {k: v for k, v in info.as_dict().items() if k != "budget_source"}
    assert TierInfo.from_dict(old) is not None  # an older server's answer still reads


def test_a_mapped_block_charges_the_cache_its_mapping() -> None:
    assert mapping_charge(512 << 20) == 64 + (1 << 20)
