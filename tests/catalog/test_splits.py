"""Train/val splits (SEMANTICS section 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from windpipe.catalog.splits import assign_splits, selector_mask, split_counts
from windpipe.services.contract.configs import ValidationConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.identity import unit_interval


def index(n_cells: int = 50, cycles: int = 4, protocols: tuple[str, ...] = ("cycling", "hppc"),
          set_id: str = "s") -> pl.DataFrame:
    rows = [
        {"manifest_row_id": i, "set_id": set_id, "cell_id": f"c{c:03d}", "cidx": k,
         "protocol": p, "temperature": 25.0 if c % 2 else 45.0, "row_count": 10 + k}
        for i, (c, k, p) in enumerate(
            (c, k, p) for c in range(n_cells) for k in range(cycles) for p in protocols
        )
    ]
    return pl.DataFrame(rows)


def val_groups(frame: pl.DataFrame, cols: tuple[str, ...] = ("set_id", "cell_id", "cidx")) -> set:
    return set(frame.filter(pl.col("split") == "val").select(cols).iter_rows())


def test_sample_matches_definition_and_keeps_order() -> None:
    frame = index(10)
    out = assign_splits(frame, ValidationConfig.sample(0.3, seed=7))
    assert out["manifest_row_id"].to_list() == frame["manifest_row_id"].to_list()
    for row in out.iter_rows(named=True):
        u = unit_interval(7, [row["set_id"], row["cell_id"], row["cidx"]])
        assert row["split"] == ("val" if u < 0.3 else "train")


def test_no_group_straddles() -> None:
    out = assign_splits(index(30), ValidationConfig.sample(0.5, seed=1))
    per_group = out.group_by(["set_id", "cell_id", "cidx"]).agg(pl.col("split").n_unique())
    assert per_group["split"].max() == 1
    coarse = assign_splits(index(30), ValidationConfig.sample(0.5, group_by=("cell_id",)))
    assert coarse.group_by("cell_id").agg(pl.col("split").n_unique())["split"].max() == 1


def test_fraction_within_binomial_bound() -> None:
    frame = index(500, cycles=4, protocols=("cycling",))  # 2000 groups
    out = assign_splits(frame, ValidationConfig.sample(0.2, seed=3))
    n = 2000
    val = len(val_groups(out))
    assert abs(val - 0.2 * n) <= 4 * math.sqrt(n * 0.2 * 0.8)
    other = assign_splits(frame, ValidationConfig.sample(0.2, seed=4))
    assert val_groups(other) != val_groups(out)


def test_stable_when_groups_are_added() -> None:
    small = assign_splits(index(40), ValidationConfig.sample(0.4, seed=11))
    big_frame = pl.concat([index(40), index(40, set_id="t")])
    big = assign_splits(big_frame, ValidationConfig.sample(0.4, seed=11))
    assert val_groups(small) == {g for g in val_groups(big) if g[0] == "s"}


def test_same_result_in_another_process() -> None:
    frame = index(20)
    here = assign_splits(frame, ValidationConfig.sample(0.5, seed=99))["split"].to_list()
    code = (
        "import json; from tests.catalog.test_splits import index; "
        "from windpipe.catalog.splits import assign_splits; "
        "from windpipe.services.contract.configs import ValidationConfig; "
        "print(json.dumps(assign_splits(index(20), ValidationConfig.sample(0.5, seed=99))"
        "['split'].to_list()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONHASHSEED": "123", "PATH": ""},
                          cwd=Path(__file__).resolve().parents[2])
    assert json.loads(done.stdout) == here


def test_cidx_float_and_int_draw_alike() -> None:
    ints = index(10)
    floats = ints.with_columns(pl.col("cidx").cast(pl.Float64))
    cfg = ValidationConfig.sample(0.5, seed=5)
    expect = assign_splits(ints, cfg)["split"].to_list()
    assert assign_splits(floats, cfg)["split"].to_list() == expect


def test_provide_and_type_tolerance() -> None:
    frame = index(6)
    out = assign_splits(frame, ValidationConfig.provide([{"cell_id": "c001", "cidx": 2.0}]))
    assert val_groups(out) == {("s", "c001", 2)}
    # a selector on a metadata column pulls whole groups
    out = assign_splits(frame, ValidationConfig.provide([{"temperature": 45}],
                                                        group_by=("cell_id",)))
    assert {r[0] for r in val_groups(out, ("cell_id",))} == {"c000", "c002", "c004"}


def test_selectors_on_integers_are_exact() -> None:
    frame = index(3).with_columns(
        pl.Series("serial", [2**53 + (i % 2) for i in range(index(3).height)], dtype=pl.Int64))
    # 2**53 + 1 is not a float64: a float comparison would match 2**53 too
    hit = selector_mask(frame, {"serial": 2**53 + 1})
    assert hit.tolist() == (frame.get_column("serial") == 2**53 + 1).to_list()
    assert 0 < hit.sum() < frame.height
    with pytest.raises(WindpipeError, match="matches no row"):
        assign_splits(frame, ValidationConfig.provide([{"cidx": 1.5}]))
    with pytest.raises(WindpipeError, match="matches no row"):
        assign_splits(frame, ValidationConfig.provide([{"cidx": 2**70}]))


def test_draw_is_below_one_for_the_largest_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    import windpipe.services.contract.identity as identity  # noqa: PLC0415

    monkeypatch.setattr(identity, "hash64", lambda *_: 2**64 - 1)
    u = identity.unit_interval(1, ["x"])
    assert u < 1.0
    assert u == 1.0 - 2.0**-53


def test_merge_is_union() -> None:
    frame = index(40)
    sampled = val_groups(assign_splits(frame, ValidationConfig.sample(0.3, seed=2)))
    merged = val_groups(assign_splits(
        frame, ValidationConfig.merge([{"cell_id": "c010"}], 0.3, seed=2)))
    assert merged == sampled | {("s", "c010", k) for k in range(4)}


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        (ValidationConfig.provide([{"cel_id": "c001"}]), "cel_id"),
        (ValidationConfig.provide([{"cell_id": "nope"}]), "nope"),
        (ValidationConfig.provide([{"cidx": "2"}]), "cidx"),
        (ValidationConfig.sample(0.2, group_by=("set_id", "batch")), "batch"),
    ],
)
def test_invalid_configs(cfg: ValidationConfig, needle: str) -> None:
    with pytest.raises(WindpipeError) as err:
        assign_splits(index(3), cfg)
    assert err.value.type == ErrorType.INVALID_CONFIG
    assert needle in err.value.message


def test_split_counts() -> None:
    out = assign_splits(index(5, cycles=2), ValidationConfig.provide([{"cell_id": "c000"}]))
    counts = split_counts(out)
    assert counts["val"] == {"groups": 2, "manifest_rows": 4, "rows": 10 + 10 + 11 + 11}
    assert counts["train"]["groups"] == 8
    assert counts["train"]["manifest_rows"] == 16
    empty = split_counts(assign_splits(index(2), ValidationConfig.sample(0.0)))
    assert empty["val"] == {"groups": 0, "manifest_rows": 0, "rows": 0}
