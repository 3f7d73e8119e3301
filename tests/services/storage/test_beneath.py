"""Files of a local root read below directories opened once, never through a link
(``windpipe.services.storage.beneath``): what it reads is the file's bytes, size and token; a path
with a link in it is left undecided (the caller's checked path decides it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from windpipe.services.storage.beneath import Beneath
from windpipe.services.storage.store import Storage


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "root"
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "f.bin").write_bytes(b"0123456789" * 10)
    (base / "top.bin").write_bytes(b"xyz")
    return base


def test_reads_the_tail_or_the_whole_file_with_the_storage_token(root: Path) -> None:
    storage = Storage.from_uri(str(root))
    with Beneath(root) as below:
        size, token, data = below.read("a/b/f.bin", nbytes=7)  # type: ignore[misc]
        assert (size, data) == (100, b"3456789")
        assert token == storage.version_token("a/b/f.bin")[1]
        assert below.read("a/b/f.bin", nbytes=7, whole_up_to=100) == (
            100, token, b"0123456789" * 10)
        assert below.read("top.bin", nbytes=64) == (3, storage.version_token("top.bin")[1],
                                                     b"xyz")


def test_a_missing_file_or_a_directory_is_not_found(root: Path) -> None:
    with Beneath(root) as below:
        for rel in ("a/b/nope.bin", "a/nope/f.bin", "a/b"):
            with pytest.raises(FileNotFoundError):
                below.read(rel, nbytes=8)


def test_a_link_anywhere_in_the_path_is_left_to_the_checked_path(
        root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"secret")
    os.symlink(outside, root / "a" / "out")  # a directory link leaving the root
    os.symlink(outside / "secret.bin", root / "a" / "b" / "s.bin")  # a file link
    os.symlink(root / "a" / "b", root / "inside")  # a link that stays inside
    (root / "a" / "b" / "x.bin").mkdir()  # a directory named like a file
    with Beneath(root) as below:
        assert below.read("a/out/secret.bin", nbytes=8) is None
        assert below.read("a/b/s.bin", nbytes=8) is None
        assert below.read("inside/f.bin", nbytes=8) is None
        assert below.read("top.bin/x", nbytes=8) is None  # a file where a directory goes
        with pytest.raises(FileNotFoundError):
            below.read("a/b/x.bin", nbytes=8)


def test_a_directory_swapped_for_a_link_after_it_was_opened_is_not_followed(
        root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "f.bin").write_bytes(b"not the root's")
    with Beneath(root) as below:
        first = below.read("a/b/f.bin", nbytes=1000)
        os.rename(root / "a", tmp_path / "moved")
        os.symlink(outside, root / "a")
        again = below.read("a/b/f.bin", nbytes=1000)  # the directory opened before
        assert again is not None
        assert first is not None
        assert again[2] == first[2]
    with Beneath(root) as fresh:
        assert fresh.read("a/b/f.bin", nbytes=1000) is None  # now a link: undecided


def test_directory_descriptors_are_bounded_and_closed(root: Path) -> None:
    for k in range(20):
        (root / f"d{k}").mkdir()
        (root / f"d{k}" / "f").write_bytes(b"1")
    before = len(os.listdir("/proc/self/fd"))
    with Beneath(root, keep=4) as below:
        for k in range(20):
            assert below.read(f"d{k}/f", nbytes=8) is not None
        assert len(os.listdir("/proc/self/fd")) <= before + 4 + 1  # the root's too
    assert len(os.listdir("/proc/self/fd")) == before
