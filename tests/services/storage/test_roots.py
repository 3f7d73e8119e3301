"""The operator's allow-list of storage roots (``windpipe.services.storage.roots``) and S3
credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.storage.roots import AllowedRoots
from windpipe.services.storage.store import Storage, StorageOptions, open_root


def test_local_and_s3_entries(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "d").mkdir()
    (tmp_path / "lab-x").mkdir()
    allowed = AllowedRoots.parse([str(lab), "s3://bucket/lab"])
    assert allowed.permits(str(lab))
    assert allowed.permits((lab / "d").as_uri())
    assert allowed.permits(f"file://{lab}/not/yet/there")
    assert not allowed.permits((tmp_path / "lab-x").as_uri())
    assert not allowed.permits(f"file://{lab}/../lab-x")
    assert not allowed.permits("file:///")
    assert not allowed.permits("relative/dir")
    assert not allowed.permits("file://otherhost/x")
    assert allowed.permits("s3://bucket/lab")
    assert allowed.permits("s3://bucket/lab/run1")
    assert not allowed.permits("s3://bucket/lab-x")
    assert not allowed.permits("s3://bucket")
    assert not allowed.permits("s3://bucket/lab/../secret")
    assert not allowed.permits("s3://other/lab")
    assert not allowed.permits("gs://bucket/lab")
    with pytest.raises(ValueError, match="neither"):
        AllowedRoots.parse(["relative"])


def test_symlinked_root_is_judged_by_its_target(tmp_path: Path) -> None:
    lab, outside = tmp_path / "lab", tmp_path / "outside"
    lab.mkdir()
    outside.mkdir()
    (lab / "link").symlink_to(outside, target_is_directory=True)
    allowed = AllowedRoots.parse([lab])
    assert not allowed.permits((lab / "link").as_uri())
    # ... and a symlink inside an allowed dir pointing to another allowed place is fine.
    assert AllowedRoots.parse([lab, outside]).permits((lab / "link").as_uri())


def test_open_root_refuses_before_reading(tmp_path: Path) -> None:
    options = StorageOptions(allowed=AllowedRoots.parse([tmp_path / "lab"]))
    for uri in ("file:///etc", "file:///does/not/exist", "s3://any-bucket/x"):
        with pytest.raises(WindpipeError) as info:
            open_root(uri, options)
        assert info.value.type == ErrorType.FORBIDDEN
        assert info.value.http_status == 403
        assert str(tmp_path) not in info.value.message  # the allowed list is not revealed
    # Without a list (a library caller) any root opens; with one, a root inside it does.
    (tmp_path / "lab").mkdir()
    assert open_root((tmp_path / "lab").as_uri(), options).is_local
    assert open_root("file:///", StorageOptions()).is_local


def test_s3_never_uses_ambient_credentials_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    bare = Storage.from_uri("s3://bucket/p", StorageOptions())
    assert bare.store.config.get("skip_signature") == "true"
    opted = Storage.from_uri("s3://bucket/p", StorageOptions(s3_instance_credentials=True))
    assert "skip_signature" not in opted.store.config
    keys = Storage.from_uri("s3://bucket/p", StorageOptions(
        s3_access_key_id="AK", s3_secret_access_key="SK"))
    assert keys.store.config["access_key_id"] == "AK"
    assert "skip_signature" not in keys.store.config
    assert "SK" not in repr(StorageOptions(s3_access_key_id="AK", s3_secret_access_key="SK"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-ak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-sk")
    env = Storage.from_uri("s3://bucket/p", StorageOptions())
    assert "skip_signature" not in env.store.config


@pytest.mark.s3
def test_s3_keys_from_configuration_alone(s3_server, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"payload")
    uri = s3_server.upload_dir(tmp_path / "d", s3_server.unique_prefix("creds"))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    options = StorageOptions(
        s3_endpoint=s3_server.endpoint_url, s3_allow_http=True,
        s3_access_key_id="testing", s3_secret_access_key="testing",
        allowed=AllowedRoots.parse([uri]))
    assert open_root(uri, options).get("a.bin") == b"payload"
    with pytest.raises(WindpipeError) as info:
        open_root(f"s3://{s3_server.bucket}/elsewhere", options)
    assert info.value.type == ErrorType.FORBIDDEN
