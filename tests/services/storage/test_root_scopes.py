"""RootScopes: which dataset names a storage root may be registered under."""

from __future__ import annotations

from pathlib import Path

import pytest

from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.storage.roots import RootScopes


def test_a_root_in_or_around_a_bound_one_takes_only_its_names(tmp_path: Path) -> None:
    lab, ml = tmp_path / "lab", tmp_path / "ml"
    lab.mkdir()
    ml.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "into-ml").symlink_to(ml, target_is_directory=True)
    scopes = RootScopes.parse([f"lab-*={lab}", f"ml-*={ml}", f"team-*={ml}",
                               "lab-*=s3://bucket/lab"])
    assert scopes.permits(str(lab / "a"), dataset="lab-a")
    assert not scopes.permits(str(lab / "a"), dataset="ml-a")
    assert scopes.permits((ml / "x").as_uri(), dataset="team-x")  # two globs, one root
    assert not scopes.permits(str(tmp_path), dataset="lab-a")  # holds ml too
    assert not scopes.permits(str(tmp_path / "shared" / "into-ml"), dataset="lab-a")
    assert scopes.permits(str(tmp_path / "shared"), dataset="anything")
    assert scopes.permits("s3://bucket/lab/x", dataset="lab-x")
    assert not scopes.permits("s3://bucket/lab/x", dataset="ml-x")
    assert not scopes.permits("s3://bucket", dataset="ml-x")  # holds s3://bucket/lab
    assert scopes.permits("s3://bucket/lab-other", dataset="ml-x")  # '/' boundaries
    assert scopes.permits("s3://other/lab", dataset="ml-x")
    with pytest.raises(WindpipeError) as refused:
        scopes.check(str(lab), dataset="ml-a")
    assert refused.value.type is ErrorType.FORBIDDEN
    assert "lab-*" not in refused.value.message
    assert str(ml) not in refused.value.message
    assert RootScopes().permits("/anything", dataset="x")
    with pytest.raises(ValueError, match="root scope"):
        RootScopes.parse(["no-equals-sign"])
    with pytest.raises(ValueError, match="neither"):
        RootScopes.parse(["lab-*=relative"])
