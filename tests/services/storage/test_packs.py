"""Packs (windpipe/services/storage/packs.py): a block filled from a version's pack equals the rows
read straight from the files; a segment changed since registration, a column the pack
lacks, a pack that is missing or broken: the files are read, with their checks; a pack is
renamed into place whole or not at all."""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.fixtures.data import write_parquet_segment
from tests.flight_server.helpers import Dataset, write_dataset
from tests.services.materialize.test_block_fill import SPECS, _expected, _fill, _plan
from windpipe.services.contract.errors import SegmentChanged
from windpipe.services.materialize import block_fill
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.storage.formats.base import float64_columns
from windpipe.services.storage.formats.parquet import PARQUET
from windpipe.services.storage.packs import PackStore, PackWriter, VersionPack
from windpipe.services.storage.segments import SMALL_FILE_BYTES
from windpipe.services.storage.store import Storage

VERSION = "v-" + "ab" * 16


def _pack(ds: Dataset, store: PackStore, *, only: tuple[str, ...] | None = None) -> PackWriter:
    """A writer holding ds's parquet segments as registration's checks read them (their
    decoded numeric columns; ``only``: just these columns)."""
    storage = Storage.from_uri(ds.root.resolve().as_uri())
    writer = store.writer(storage.uri)
    assert writer is not None
    items = []
    for path, info in ds.segments.items():
        if info.format != "parquet":
            continue
        described, values = PARQUET.inspect_values(storage, path, max_bytes=SMALL_FILE_BYTES,
                                                   also=())
        assert values is not None
        assert described.fingerprint == info.fingerprint
        size, token = storage.version_token(path)
        table = values.table if only is None else values.table.select(list(only))
        items.append(((described, size, str(token)), table))
    # stacked by schema, as registration's figures stack a batch's groups
    for _schema, group in itertools.groupby(items, key=lambda item: item[1].schema):
        reads, tables = zip(*group, strict=True)
        names = tuple(tables[0].column_names)
        columns = float64_columns(list(tables), list(names))
        offsets = np.concatenate([[0], np.cumsum([t.num_rows for t in tables])])
        writer.add_columns(list(reads), names, [columns[n] for n in names], offsets)
    return writer


def _with_pack(plan: PlanContext, store: PackStore) -> PlanContext:
    pack = store.open(VERSION, plan.root_uri)
    assert pack is not None
    return dataclasses.replace(plan, packs=pack)


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The segment paths block fills read from their files from now on (in order)."""
    read: list[str] = []
    original = block_fill.read_chunks

    def counting(storage, info, chunks, columns):  # type: ignore[no-untyped-def]
        read.append(info.path)
        return original(storage, info, chunks, columns)

    monkeypatch.setattr(block_fill, "read_chunks", counting)
    return read


@pytest.mark.parametrize("fmt", ["parquet", "mixed"])
@pytest.mark.parametrize("threads", [1, 3])
def test_a_block_from_the_pack_equals_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                fmt: str, threads: int) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt=fmt, chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    assert _pack(ds, store).commit(VERSION)
    plan = _with_pack(_plan(ds), store)
    monkeypatch.setattr(block_fill, "RUN_ROWS", 40)  # several runs a block
    monkeypatch.setattr(block_fill, "THREAD_CHUNK_ROWS", 1)
    read = count_reads(monkeypatch)
    for layout in block_layouts(plan):
        inputs, targets, nbytes, steps = _fill(plan, layout, threads=threads)
        want_in, want_tg = _expected(ds, plan, layout)
        np.testing.assert_array_equal(inputs, want_in)
        np.testing.assert_array_equal(targets, want_tg)
        assert nbytes == layout.rows * len(plan.specs[layout.protocol].read_columns) * 8
        assert steps[-1][0] == layout.chunks.shape[0]
    # only segments that are not parquet files were opened
    assert all(ds.segments[p].format != "parquet" for p in read)
    assert set(read) == {p for p, info in ds.segments.items() if info.format != "parquet"}


def test_a_segment_changed_since_registration_fails_as_before(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    assert _pack(ds, store).commit(VERSION)
    plan = _with_pack(_plan(ds), store)
    layout = block_layouts(plan)[0]
    victim = plan.streams.piece_path[int(plan.chunk_piece[layout.chunks[3]])]
    write_parquet_segment(ds.root, victim, {"current_a": pa.array([1.0, 2.0]),
                                            "voltage_v": pa.array([3.0, 4.0])},
                          row_group_rows=16)
    with pytest.raises(SegmentChanged) as err:
        _fill(plan, layout, threads=1)
    assert err.value.details["path"] == victim


def test_columns_the_pack_lacks_are_read_from_the_files(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    assert _pack(ds, store, only=("voltage_v",)).commit(VERSION)  # current_a not packed
    plan = _with_pack(_plan(ds), store)
    read = count_reads(monkeypatch)
    layout = block_layouts(plan)[0]
    inputs, targets, _, _ = _fill(plan, layout, threads=1)
    want_in, want_tg = _expected(ds, plan, layout)
    np.testing.assert_array_equal(inputs, want_in)
    np.testing.assert_array_equal(targets, want_tg)
    assert len(read) == len({plan.streams.piece_path[int(p)]
                                for p in plan.chunk_piece[layout.chunks]})


def test_a_broken_data_file_is_left_for_the_files(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    assert _pack(ds, store).commit(VERSION)
    for data in (tmp_path / "packs" / VERSION).glob("rows-*.arrow"):
        data.write_bytes(b"not arrow")
    plan = _with_pack(_plan(ds), store)
    layout = block_layouts(plan)[0]
    inputs, targets, _, _ = _fill(plan, layout, threads=1)
    want_in, want_tg = _expected(ds, plan, layout)
    np.testing.assert_array_equal(inputs, want_in)
    np.testing.assert_array_equal(targets, want_tg)


def test_a_pack_appears_whole_once_and_only_when_committed(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    root_uri = ds.root.resolve().as_uri()
    first = _pack(ds, store)
    assert store.open(VERSION, root_uri) is None  # not there before its commit
    aborted = _pack(ds, store)
    aborted.abort()
    assert not aborted.commit(VERSION)
    assert first.commit(VERSION)
    assert not _pack(ds, store).commit(VERSION)  # the same version again: the first stays
    assert sorted(p.name for p in (tmp_path / "packs").iterdir()) == [VERSION]
    pack = store.open(VERSION, root_uri)
    assert isinstance(pack, VersionPack)
    assert store.open(VERSION, "file:///elsewhere") is None  # another root: not this pack
    assert store.open("../" + VERSION, root_uri) is None  # not a version id
    # segments over the row limit, or without rows, are left out
    small = PackStore(tmp_path / "small-packs", max_rows=40)
    assert _pack(ds, small).commit(VERSION)
    limited = small.open(VERSION, root_uri)
    assert limited is not None
    paths = list(ds.segments)
    where = limited.pieces(paths, [ds.segments[p].fingerprint for p in paths])
    assert [bool(f >= 0) for f in where.file] == [
        ds.segments[p].format == "parquet" and 0 < ds.segments[p].row_count <= 40
        for p in paths]
    other = limited.pieces(paths, ["another fingerprint"] * len(paths))
    assert (other.file == -1).all()  # registered under another fingerprint: not these rows
    assert PackStore(tmp_path / "off", max_rows=0).writer(root_uri) is None


def test_sweep_removes_only_old_half_written_packs(tmp_path: Path) -> None:
    store = PackStore(tmp_path / "packs")
    old = tmp_path / "packs" / ".tmp-1-old"
    new = tmp_path / "packs" / ".tmp-2-new"
    for d in (old, new):
        d.mkdir(parents=True)
    os.utime(old, (1, 1))
    assert store.sweep() == 1
    assert not old.exists()
    assert new.exists()


def test_pieces_finds_each_packed_path_with_its_fingerprint_only(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds", SPECS, fmt="parquet", chunk_rows=16, seed=4)
    store = PackStore(tmp_path / "packs", max_rows=1000)
    assert _pack(ds, store).commit(VERSION)
    pack = store.open(VERSION, Storage.from_uri(ds.root.resolve().as_uri()).uri)
    assert pack is not None
    paths = [*ds.segments, "not/packed.parquet"]
    fingerprints = [info.fingerprint for info in ds.segments.values()] + ["x"]
    fingerprints[1] = "another"  # registered with other contents: not taken from the pack
    for given in ((paths, fingerprints), (pa.array(paths), pa.array(fingerprints)),
                  (pa.array(paths, pa.large_string()), tuple(fingerprints))):
        found = pack.pieces(*given)
        assert (found.file >= 0).tolist() == [True, False] + [True] * (len(paths) - 3) + [False]
        for p, path in enumerate(paths[:-1]):  # each where registration read it
            if found.file[p] >= 0:
                st = os.stat(ds.root / path)
                assert (int(found.size[p]), int(found.inode[p]), int(found.mtime_ns[p])) == (
                    st.st_size, st.st_ino, st.st_mtime_ns)
    assert pack.pieces([], []).file.shape == (0,)
