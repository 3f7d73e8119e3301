"""A path pattern's matching is bounded (windpipe/catalog/pattern_syntax.py): many fields against a
long name answer at once with the values a greedy backtracking regex gives, where such a
regex tried every split of the name among the fields (a 10-field pattern and a 240-character
name never finished); the fields, the pattern and each name matched have stated bounds,
refused naming them."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.pattern import PatternSource, manifest_from_pattern
from windpipe.catalog.pattern_syntax import (
    MAX_NAME_CHARS,
    MAX_PATTERN_CHARS,
    MAX_PATTERN_FIELDS,
    Component,
    match_path,
    parse_pattern,
)
from windpipe.sdk import Catalog, InvalidManifest
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.settings import Settings
from windpipe.services.storage.store import Storage

# ten fields in the last component, all separated by "_" but the last: every "_" of a
# name is a place where a backtracking regex could split it
MANY = "{cell_id}_{cidx}_{a}_{b}_{c}_{d}_{e}_{f}_{g}-{h}.parquet"
CELL = "_".join(["c"] * 107)  # 213 characters, 106 of them "_"
GOOD = f"{CELL}_17_a_b_c_d_e_f_g-h.parquet"  # 240 characters
NO_DASH = f"{CELL}_17_a_b_c_d_e_f_g_h.parquet"  # fits everywhere but the one "-"


def _segment(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"time_s": np.arange(5, dtype=np.float64),
                  "current_a": np.zeros(5, dtype=np.float32),
                  "voltage_v": np.full(5, 3.7, dtype=np.float32)}).write_parquet(path)
    return path


def _regex(component: Component) -> re.Pattern[str]:
    """The backtracking regex the matcher replaces: its values are the reference."""
    body = "".join(re.escape(lit) + "([^/]+)"
                   for lit in component.literals[:-1]) + re.escape(component.literals[-1])
    return re.compile(body)


def test_many_fields_against_a_long_name_give_the_greedy_values() -> None:
    parsed = parse_pattern(MANY)
    assert len(GOOD) == 240
    assert len(parsed.types) == 10
    values = match_path(parsed, GOOD)
    # the first field as long as the rest still matches, each later one likewise
    assert values == {"cell_id": CELL, "cidx": 17, "a": "a", "b": "b", "c": "c", "d": "d",
                      "e": "e", "f": "f", "g": "g", "h": "h"}
    # the example docs/data.md gives
    assert match_path(parse_pattern("{cell_id}_{cidx}.parquet"), "a_b_3.parquet") == {
        "cell_id": "a_b", "cidx": 3}


@pytest.mark.parametrize("name", [
    NO_DASH,  # the literal "-" occurs nowhere
    GOOD.replace(".parquet", ".pq"),  # the suffix differs
    f"{'c-' * 100}17_a_b.parquet",  # too few "_" for the fields
])
def test_a_long_name_that_does_not_fit_is_named_not_searched(name: str) -> None:
    assert match_path(parse_pattern(MANY), name) == (
        f"name {name!r} does not match {MANY!r}")


def test_the_values_are_those_of_a_backtracking_regex() -> None:
    rng = random.Random(7)
    alphabet = "ab_."
    compared = matched = 0
    for _ in range(20_000):
        count = rng.randint(0, 4)
        literals = ["".join(rng.choice(alphabet) for _ in range(
            rng.randint(0 if i in (0, count) else 1, 3))) for i in range(count + 1)]
        component = Component("".join(literals), tuple(literals),
                              tuple(f"f{i}" for i in range(count)))
        name = "".join(lit + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
                       for lit in literals[:-1]) + literals[-1]
        if rng.random() < 0.5:  # one character changed: often no longer a match
            at = rng.randrange(len(name) or 1)
            name = name[:at] + rng.choice(alphabet + "/") + name[at + 1:]
        found = _regex(component).fullmatch(name)
        assert component.match(name) == (None if found is None else found.groups()), (
            literals, name)
        compared += 1
        matched += found is not None
    # both kinds met
    assert matched > compared // 4
    assert compared - matched > compared // 20


def test_more_fields_than_the_bound_are_refused_naming_it() -> None:
    extra = "_".join(f"{{m{i}}}" for i in range(MAX_PATTERN_FIELDS - 2))
    assert len(parse_pattern(f"{{cell_id}}/{extra}_{{cidx}}.parquet").types) == 16
    with pytest.raises(WindpipeError) as exc:
        parse_pattern(f"{{cell_id}}/{extra}_{{m99}}_{{cidx}}.parquet")
    assert exc.value.type.value == "invalid_request"
    assert f"more than {MAX_PATTERN_FIELDS} fields" in exc.value.message
    assert exc.value.details["max"] == MAX_PATTERN_FIELDS


def test_a_pattern_over_the_length_bound_is_refused_naming_it() -> None:
    text = "x" * MAX_PATTERN_CHARS + "/{cell_id}/cycle_{cidx}.parquet"
    with pytest.raises(WindpipeError) as exc:
        parse_pattern(text)
    assert exc.value.type.value == "invalid_request"
    assert f"above the bound of {MAX_PATTERN_CHARS}" in exc.value.message
    assert len(exc.value.message) < 300  # named by its start, not echoed whole


@pytest.mark.parametrize(("path", "what"), [
    (f"c1/cycle_{'1' * MAX_NAME_CHARS}.parquet", "name"),
    (f"{'c' * (MAX_NAME_CHARS + 1)}/cycle_1.parquet", "folder"),
])
def test_a_name_over_the_length_bound_is_a_problem_naming_it(path: str, what: str) -> None:
    problem = match_path(parse_pattern("{cell_id}/cycle_{cidx}.parquet"), path)
    assert isinstance(problem, str)
    assert problem.startswith(f"{what} ")
    assert f"above the bound of {MAX_NAME_CHARS}" in problem
    assert len(problem) < 300


def test_a_folder_of_long_names_builds_its_manifest(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _segment(root / "lab" / GOOD)
    _segment(root / "lab" / GOOD.replace("_17_", "_18_"))
    frame = manifest_from_pattern(Storage.from_uri(str(root)),
                                  PatternSource(f"lab/{MANY}"), dataset="lab")
    assert frame.get_column("cidx").to_list() == [17, 18]
    assert set(frame.get_column("cell_id")) == {CELL}
    _segment(root / "lab" / NO_DASH)
    with pytest.raises(WindpipeError) as exc:
        manifest_from_pattern(Storage.from_uri(str(root)), PatternSource(f"lab/{MANY}"),
                              dataset="lab")
    problem: dict[str, Any] = exc.value.details["problems"][0]
    assert problem["segment_path"] == f"lab/{NO_DASH}"
    assert "does not match" in problem["problem"]


def test_a_registration_with_a_long_name_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _segment(root / GOOD)
    _segment(root / NO_DASH)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'catalog.db'}",
                        data_dir=tmp_path / "state", log_level="WARNING")
    with run_catalog_server(settings) as url, Catalog(url) as cat:
        with pytest.raises(InvalidManifest) as exc:
            cat.register("long", root=root.as_uri(), pattern=MANY, progress=False)
        assert exc.value.details["problems"][0]["segment_path"] == NO_DASH
        (root / NO_DASH).unlink()
        ver = cat.register("long", root=root.as_uri(), pattern=MANY, progress=False)
        assert ver.index().frame.get_column("cell_id").to_list() == [CELL]
