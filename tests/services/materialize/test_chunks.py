"""Chunk loads: each source column read once, scaled once, laid out as batch rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.fixtures.data import write_parquet_segment
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec
from windpipe.services.materialize.chunks import ChannelSpec, lay_out, load_chunk
from windpipe.services.storage.segments import inspect_segment
from windpipe.services.storage.store import Storage

ROWS = 32


def test_a_column_that_is_input_and_target_is_read_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=ROWS)
    v = rng.uniform(2.5, 4.2, size=ROWS)
    v[3] = np.nan
    unused = rng.normal(size=ROWS)
    write_parquet_segment(tmp_path, "seg.parquet", {"a": a, "v": v, "unused": unused},
                          row_group_rows=ROWS)
    storage = Storage.from_uri(tmp_path.as_uri())
    info = inspect_segment(storage, "seg.parquet")
    config = LoaderConfig(
        inputs={"cycling": ("a", "v")}, targets={"cycling": ("v",)},
        scaling=(ScalingSpec(column="v", input_min=2.5, input_max=4.5),),
    )
    spec = ChannelSpec.for_protocol(config, "cycling")
    assert spec.read_columns == ("a", "v")

    matrices, read = load_chunk(storage, info, 0, spec)

    assert read == 2 * ROWS * 8  # a and v decoded once each (float64), "unused" never
    scaled = -1.0 + (v - 2.5) * 2.0 / 2.0
    np.testing.assert_allclose(matrices.inputs[:, 0], a.astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(matrices.inputs[:, 1], np.where(np.isnan(v), -2.0, scaled),
                               rtol=1e-6)
    np.testing.assert_allclose(matrices.targets[:, 0], scaled, rtol=1e-6)  # NaN stays NaN
    assert np.isnan(matrices.targets[3, 0])
    assert matrices.inputs.dtype == matrices.targets.dtype == np.float32
    assert matrices.nbytes == spec.nbytes(ROWS)


def test_infinities_are_null_inputs_and_nan_targets_even_clipped(tmp_path: Path) -> None:
    """SEMANTICS 5: +-inf is null; clip=True must not turn an infinite target into 1.0."""
    a = np.array([1.0, np.inf, -np.inf, 2.0] * (ROWS // 4))
    v = np.array([3.0, 3.5, np.inf, -np.inf] * (ROWS // 4))
    write_parquet_segment(tmp_path, "inf.parquet", {"a": a, "v": v}, row_group_rows=ROWS)
    storage = Storage.from_uri(tmp_path.as_uri())
    info = inspect_segment(storage, "inf.parquet")
    config = LoaderConfig(
        inputs={"cycling": ("a", "v")}, targets={"cycling": ("v",)},
        scaling=(ScalingSpec(column="v", input_min=2.5, input_max=4.5, clip=True),),
    )
    matrices, _ = load_chunk(storage, info, 0, ChannelSpec.for_protocol(config, "cycling"))

    assert np.isfinite(matrices.inputs).all()
    np.testing.assert_array_equal(matrices.inputs[np.isinf(a), 0], -2.0)
    np.testing.assert_array_equal(matrices.inputs[np.isinf(v), 1], -2.0)
    assert np.isnan(matrices.targets[np.isinf(v), 0]).all()
    assert np.isfinite(matrices.targets[np.isfinite(v), 0]).all()
    assert not np.isinf(matrices.targets).any()


def test_lay_out_pads_every_input_float32_cannot_hold() -> None:
    """Null, NaN, +-inf and a finite value past float32's range are -2.0 as inputs (no input
    is ever +-inf); as targets they are NaN; absent channels are padding."""
    a = np.array([1.5, np.nan, np.inf, -np.inf, 1e39, -2.5])
    spec = ChannelSpec(input_columns=("a", "b"), input_present=(True, False),
                       target_columns=("a", "b"), target_present=(True, False), scaling=())
    out = lay_out({"a": a}, 6, spec)
    np.testing.assert_array_equal(out.inputs[:, 0], np.float32([1.5, -2, -2, -2, -2, -2.5]))
    assert (out.inputs[:, 1] == np.float32(-2.0)).all()
    np.testing.assert_array_equal(out.targets[:5, 0], np.float32([1.5, *[np.nan] * 4]))
    assert out.targets[5, 0] == np.float32(-2.5)
    assert np.isnan(out.targets[:, 1]).all()
    assert out.rows.dtype == np.float32
    assert out.rows.flags.c_contiguous  # one row matrix: a row's inputs, then its targets
    np.testing.assert_array_equal(out.rows, np.concatenate([out.inputs, out.targets], axis=1))
