"""The link check of a local root remembers the directories it proved link-free
(windpipe.services.storage.local_io.LinkCheck): a path in one costs two system calls, and a link
planted after the check is still refused, wherever it is planted."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from windpipe.services.storage import local_io
from windpipe.services.storage.local_io import LinkCheck, has_link
from windpipe.services.storage.store import PathEscapeError, Storage


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A root with ``a/b/x.bin`` and ``a/b/y.bin``, and a folder outside it holding the
    same names (what an escaping link would serve)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    for base in (root, outside):
        (base / "a" / "b").mkdir(parents=True)
        (base / "a" / "b" / "x.bin").write_bytes(b"inside" if base == root else b"secret")
        (base / "a" / "b" / "y.bin").write_bytes(b"inside" if base == root else b"secret")
    return root.resolve(), outside


def _refused(storage: Storage, path: str) -> None:
    with pytest.raises(PathEscapeError, match="outside the storage root"):
        storage.validate_relative_path(path)
    with pytest.raises(PathEscapeError):
        storage.get(path)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the ``stat`` and ``lstat`` calls of the link check (the real calls, counted;
    the check names its paths as strings, pathlib's own calls pass paths)."""
    calls = {"stat": 0, "lstat": 0}

    def counted(name: str, real: Callable[..., os.stat_result]) -> Callable[..., os.stat_result]:
        def call(path: object, *args: object, **kwargs: object) -> os.stat_result:
            if isinstance(path, str):
                calls[name] += 1
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(local_io.os, "stat", counted("stat", os.stat))
    monkeypatch.setattr(local_io.os, "lstat", counted("lstat", os.lstat))
    return calls


def test_a_proven_directory_costs_a_stat_and_an_lstat(
        tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    check = LinkCheck(root)
    calls = _counting(monkeypatch)
    assert not check("a/b/x.bin")
    assert calls == {"stat": 0, "lstat": 3}  # the walk: a, a/b, a/b/x.bin
    assert not check("a/b/y.bin")
    assert calls == {"stat": 1, "lstat": 4}  # a/b remembered: stat a/b, lstat a/b/y.bin
    assert not check("a/b/missing.bin")  # a missing file is no link (its read says so)


def test_a_path_below_a_proven_ancestor_walks_only_below_it(
        tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root, outside = tree
    (root / "a" / "c").mkdir()
    (root / "a" / "c" / "z.bin").write_bytes(b"inside")
    storage = Storage.from_uri(root.as_uri())
    assert storage.get("a/b/x.bin") == b"inside"  # a and a/b proven
    calls = _counting(monkeypatch)
    assert storage.get("a/c/z.bin") == b"inside"
    assert calls == {"stat": 1, "lstat": 2}  # stat a; lstat a/c, a/c/z.bin
    # a link planted below the remembered ancestor (a/d, never walked)
    (outside / "a" / "d").mkdir()
    (outside / "a" / "d" / "z.bin").write_bytes(b"secret")
    (root / "a" / "d").symlink_to(outside / "a" / "d", target_is_directory=True)
    _refused(storage, "a/d/z.bin")


def test_the_cache_answers_what_the_walk_answers(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    check = LinkCheck(root)
    (root / "a" / "b" / "link.bin").symlink_to(outside / "a" / "b" / "x.bin")
    for rel in ("a/b/x.bin", "a/b/link.bin", "a/b/x.bin", "a/b/link.bin", "a", "a/b"):
        assert check(rel) == has_link(root, rel), rel


def test_a_link_planted_after_the_check_is_refused_in_any_component(
        tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, outside = tree
    storage = Storage.from_uri(root.as_uri())
    assert storage.get("a/b/x.bin") == b"inside"  # a/b proven link-free
    # the file itself replaced by a link out of the root
    (root / "a" / "b" / "x.bin").unlink()
    (root / "a" / "b" / "x.bin").symlink_to(outside / "a" / "b" / "x.bin")
    _refused(storage, "a/b/x.bin")
    assert storage.get("a/b/y.bin") == b"inside"
    # the proven directory replaced by a link to a folder outside of the same shape
    (root / "a" / "b").rename(tmp_path / "b-moved")
    (root / "a" / "b").symlink_to(outside / "a" / "b", target_is_directory=True)
    _refused(storage, "a/b/y.bin")
    # an ancestor replaced by a link
    (root / "a" / "b").unlink()
    (tmp_path / "b-moved").rename(root / "a" / "b")
    assert storage.get("a/b/y.bin") == b"inside"
    (root / "a").rename(tmp_path / "a-moved")
    (root / "a").symlink_to(outside / "a", target_is_directory=True)
    _refused(storage, "a/b/y.bin")


def test_a_proven_directory_moved_out_and_linked_back_is_refused_once_it_changes(
        tree: tuple[Path, Path], tmp_path: Path) -> None:
    """The one thing the remembered identity lets through (LinkCheck's docstring): the
    very directory proven, reached through a planted link, serves only the entries it
    had; an entry added to it (or a changed one) is refused like the walk refuses it."""
    root, _ = tree
    storage = Storage.from_uri(root.as_uri())
    assert storage.get("a/b/x.bin") == b"inside"
    away = tmp_path / "away"
    away.mkdir()
    (root / "a").rename(away / "a")
    (root / "a").symlink_to(away / "a", target_is_directory=True)
    (away / "a" / "b" / "new.bin").write_bytes(b"planted")
    _refused(storage, "a/b/new.bin")
    _refused(storage, "a/b/x.bin")


def test_the_directories_kept_are_bounded(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    for k in range(5):
        (root / f"d{k}").mkdir()
        (root / f"d{k}" / "f.bin").write_bytes(b"x")
    check = LinkCheck(root, kept=3)
    for k in range(5):
        assert not check(f"d{k}/f.bin")
    assert len(check._dirs) == 3
