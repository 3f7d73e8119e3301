"""``version.split(...)`` says when a split puts cycles of one cell in both train and val:
a :class:`DataWarning` naming the count and the whole-cell ``group_by``, against a real
catalog over HTTP (SQLite and PostgreSQL); a whole-cell split and a split an older
catalog stored without the count make no warning."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from windpipe.sdk import Catalog, DatasetVersion, DataWarning, ValidationConfig
from windpipe.services.database import create_engine
from windpipe.services.synth import SynthResult

CYCLES = ValidationConfig.sample(fraction=0.3, seed=1)  # default group_by: one cycle
CELLS = ValidationConfig.sample(fraction=0.3, seed=1, group_by=("set_id", "cell_id"))


@pytest.fixture
def version(catalog_server: str, synth_dataset: SynthResult) -> Iterator[DatasetVersion]:
    # FastAPI builds each route on the first request that scans it, in the server's
    # thread, inside warnings.catch_warnings(), which swaps this process's warning filters
    # under the test's pytest.warns: a path that matches nothing builds them all now
    assert httpx.get(f"{catalog_server}/v1/no-such-path").status_code == 404
    cat = Catalog(catalog_server)  # the synthetic nulls' DataWarning: ignored (pyproject)
    try:
        yield cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
    finally:
        cat.close()


def _data_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


def test_a_split_of_cycles_warns_with_the_count_and_the_whole_cell_fix(
    version: DatasetVersion,
) -> None:
    with pytest.warns(DataWarning) as caught:
        split = version.split(CYCLES)
    leakage = split.leakage
    assert leakage is not None
    assert leakage.cells_on_both_sides > 0
    said = _data_warnings(caught.list)
    assert len(said) == 1
    assert f"{leakage.cells_on_both_sides} of {leakage.cells} cells" in said[0]
    assert str(leakage.examples[0]) in said[0]
    assert ("ValidationConfig.sample(fraction=0.3, seed=1, group_by=('set_id', 'cell_id'))"
            in said[0])
    assert "cells on both sides" in repr(split)

    with pytest.warns(DataWarning):  # found again (200): said again
        assert version.split(CYCLES).id == split.id


def test_a_split_of_whole_cells_does_not_warn(version: DatasetVersion) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        split = version.split(CELLS)
    assert _data_warnings(caught) == []
    assert split.leakage is not None
    assert split.leakage.cells_on_both_sides == 0
    assert split.counts["val"]["groups"] > 0


def test_a_split_stored_without_the_count_reads_unknown_and_does_not_warn(
    version: DatasetVersion, database_url: str,
) -> None:
    with pytest.warns(DataWarning):
        split = version.split(CYCLES)
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE splits SET leakage = NULL WHERE id = :id"),
                         {"id": split.id})
    finally:
        engine.dispose()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = version.split(CYCLES)
    assert _data_warnings(caught) == []
    assert again.id == split.id
    assert again.leakage is None
    assert "cells on both sides" not in repr(again)
