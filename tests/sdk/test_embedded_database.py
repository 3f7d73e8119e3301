"""``windpipe.embedded(data_dir)`` opens ``data_dir/catalog.db`` only when it is a regular
file (or not there yet): a symbolic link there is refused before anything is migrated
through it, and so is anything else that is not a file."""

from __future__ import annotations

from pathlib import Path

import pytest

import windpipe
from windpipe._embedded import check_database_file
from windpipe.sdk import InvalidConfig


def test_a_symlinked_database_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    elsewhere.write_bytes(b"")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "catalog.db").symlink_to(elsewhere)
    with pytest.raises(InvalidConfig, match="is a symbolic link") as caught:
        windpipe.embedded(data_dir, tier_bytes=0)
    assert caught.value.details == {"path": str(data_dir.resolve() / "catalog.db"),
                                    "target": str(elsewhere)}
    assert elsewhere.read_bytes() == b""  # nothing migrated into it


def test_a_dangling_symlink_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    target = tmp_path / "not-yet.db"
    (data_dir / "catalog.db").symlink_to(target)
    with pytest.raises(InvalidConfig, match="is a symbolic link"):
        windpipe.embedded(data_dir, tier_bytes=0)
    assert not target.exists()


def test_a_database_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "catalog.db").mkdir()
    with pytest.raises(InvalidConfig, match="is not a regular file"):
        windpipe.embedded(tmp_path, tier_bytes=0)


def test_a_regular_database_file_or_none_yet_is_opened(tmp_path: Path) -> None:
    assert check_database_file(tmp_path) == tmp_path / "catalog.db"  # not there yet
    with windpipe.embedded(tmp_path, tier_bytes=0) as cat:
        assert list(cat.datasets()) == []
    assert (tmp_path / "catalog.db").is_file()
    assert check_database_file(tmp_path) == tmp_path / "catalog.db"
    with windpipe.embedded(tmp_path, tier_bytes=0) as cat:  # and again, once it exists
        assert list(cat.datasets()) == []
