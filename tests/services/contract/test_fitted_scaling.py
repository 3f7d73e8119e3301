"""Fitted scaling: ``transform="standard"``, ``ScalingSpec.from_stats``, the
inverse of every kind, and identities: an existing plan keeps its id, a re-fit does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from windpipe.catalog.service import content_id
from windpipe.services.contract.configs import PlanSpec, ScalingSpec, WindowConfig
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.stats import ColumnStats, SplitStatsData, pooled_stats
from windpipe.services.materialize.chunks import ChannelSpec


def _entry(protocol: str, values: np.ndarray, column: str = "x") -> ColumnStats:
    v = values[np.isfinite(values)]
    p1, p50, p99 = np.quantile(v, [0.01, 0.5, 0.99])
    return ColumnStats(protocol=protocol, column=column, rows=values.size, count=v.size,
                       nulls=int(np.isnan(values).sum()), non_finite=int(np.isinf(values).sum()),
                       min=float(v.min()), max=float(v.max()), mean=float(v.mean()),
                       std=float(v.std()), p1=float(p1), p50=float(p50), p99=float(p99))


def _stats(*entries: ColumnStats) -> SplitStatsData:
    return SplitStatsData(split_id="s-test", version_id="v-test", side="train", columns=None,
                      rows=sum(e.rows for e in entries), stats=list(entries))


RNG = np.random.default_rng(21)
A = RNG.normal(3.0, 2.0, size=1001)
B = RNG.normal(-1.0, 0.5, size=333)
STATS = _stats(_entry("cycling", A), _entry("hppc", B))


def test_standard_is_x_minus_mean_over_std_and_inverts() -> None:
    spec = ScalingSpec(column="x", transform="standard", mean=2.0, std=4.0)
    x32 = np.array([2.0, 6.0, -2.0, np.nan, np.inf], dtype=np.float32)
    y = spec.forward(x32)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y[:3], [0.0, 1.0, -1.0])
    assert np.isnan(y[3])  # non-finite stays non-finite
    assert np.isinf(y[4])
    np.testing.assert_array_equal(spec.inverse(np.array([0.0, 1.0, -1.5])), [2.0, 6.0, -4.0])
    t = spec.forward(torch.tensor([2.0, 10.0]))
    assert torch.equal(t, torch.tensor([0.0, 2.0]))
    assert torch.equal(spec.inverse(t), torch.tensor([2.0, 10.0]))
    assert spec.forward(np.array([6], dtype=np.int64)).dtype == np.float64


@pytest.mark.parametrize(("fields", "match"), [
    ({"transform": "standard", "mean": 1.0}, "needs mean and std"),
    ({"transform": "standard", "mean": 1.0, "std": 0.0}, "std must be positive"),
    ({"transform": "standard", "mean": 1.0, "std": -1.0}, "std must be positive"),
    ({"transform": "standard", "mean": math.nan, "std": 1.0}, "finite"),
    ({"transform": "standard", "mean": 1.0, "std": 1e-320}, "std must be positive"),
    ({"transform": "standard", "mean": 1.0, "std": 1.0, "clip": True}, "clip apply"),
    ({"transform": "standard", "mean": 1.0, "std": 1.0, "input_min": 0.0}, "bounds"),
    ({"transform": "standard", "mean": 1.0, "std": 1.0, "output_max": 2.0}, "bounds"),
    ({"input_min": 0.0, "input_max": 1.0, "mean": 0.5}, "belong to transform='standard'"),
    ({}, "needs input_min and input_max"),
])
def test_standard_is_checked_when_made(fields: dict[str, object], match: str) -> None:
    with pytest.raises(WindpipeError, match=match) as info:
        ScalingSpec(column="x", **fields)  # type: ignore[arg-type]
    assert info.value.type == "invalid_config"


def test_from_stats_fits_each_kind_from_one_protocol() -> None:
    mm = ScalingSpec.from_stats(STATS, "x", kind="minmax", protocol="cycling")
    assert (mm.transform, mm.input_min, mm.input_max, mm.clip) == (
        "linear", A.min(), A.max(), False)
    np.testing.assert_allclose(mm.forward(np.array([A.min(), A.max()])), [-1.0, 1.0])
    unit = ScalingSpec.from_stats(STATS, "x", kind="minmax", protocol="cycling",
                                  output_min=0.0, output_max=1.0)
    np.testing.assert_allclose(unit.forward(A).min(), 0.0, atol=1e-12)
    st = ScalingSpec.from_stats(STATS, "x", kind="standard", protocol="cycling")
    assert (st.mean, st.std) == (A.mean(), A.std())
    z = st.forward(A)
    np.testing.assert_allclose([z.mean(), z.std()], [0.0, 1.0], atol=1e-12)
    rb = ScalingSpec.from_stats(STATS, "x", kind="robust", protocol="cycling")
    p1, p99 = np.quantile(A, [0.01, 0.99])
    assert (rb.input_min, rb.input_max, rb.clip) == (p1, p99, True)
    assert rb.forward(np.array([A.min(), A.max()])).tolist() == [-1.0, 1.0]  # clipped
    # the inverse maps back for every kind (robust: inside its bounds)
    inside = A[(p1 <= A) & (p99 >= A)]
    for spec, values in ((mm, A), (st, A), (rb, inside), (unit, A)):
        np.testing.assert_allclose(spec.inverse(spec.forward(values)), values, rtol=1e-12,
                                   atol=1e-12)
        back = spec.inverse(spec.forward(torch.tensor(values)))
        np.testing.assert_allclose(back.numpy(), values, rtol=1e-12, atol=1e-12)


def test_several_protocols_pool_exactly_or_ask() -> None:
    both = np.concatenate([A, B])
    pooled = ScalingSpec.from_stats(STATS, "x", kind="standard",
                                    protocol=["cycling", "hppc"])
    assert pooled.mean == pytest.approx(both.mean(), rel=1e-13)
    assert pooled.std == pytest.approx(both.std(), rel=1e-13)
    mm = ScalingSpec.from_stats(STATS, "x", kind="minmax", protocol=("hppc", "cycling"))
    assert (mm.input_min, mm.input_max) == (both.min(), both.max())
    entry = pooled_stats(STATS.stats)
    assert (entry.count, entry.p50, entry.histogram) == (both.size, None, None)
    with pytest.raises(WindpipeError, match=r"protocols \['cycling', 'hppc'\]: pass protocol="):
        ScalingSpec.from_stats(STATS, "x")
    with pytest.raises(WindpipeError, match="quantiles do not pool"):
        ScalingSpec.from_stats(STATS, "x", kind="robust", protocol=["cycling", "hppc"])
    with pytest.raises(WindpipeError, match=r"no statistics in protocol\(s\) \['eis'\]"):
        ScalingSpec.from_stats(STATS, "x", protocol="eis")
    with pytest.raises(WindpipeError, match="no column 'y'"):
        ScalingSpec.from_stats(STATS, "y")
    only = _stats(_entry("cycling", A))
    assert ScalingSpec.from_stats(only, "x").mean == A.mean()  # one protocol: no need to say


def test_nothing_to_fit_is_refused() -> None:
    constant = _stats(_entry("cycling", np.full(10, 3.0)))
    for kind in ("minmax", "standard", "robust"):
        with pytest.raises(WindpipeError, match="is constant") as info:
            ScalingSpec.from_stats(constant, "x", kind=kind)  # type: ignore[arg-type]
        assert info.value.type == "invalid_config"
    empty = _stats(ColumnStats(protocol="cycling", column="x", rows=4, count=0, nulls=4,
                               non_finite=0))
    with pytest.raises(WindpipeError, match="no finite value"):
        ScalingSpec.from_stats(empty, "x")
    with pytest.raises(WindpipeError, match="kind must be one of"):
        ScalingSpec.from_stats(STATS, "x", kind="zscore", protocol="cycling")  # type: ignore[arg-type]


def _spec(*scaling: ScalingSpec) -> PlanSpec:
    return PlanSpec(default_window=WindowConfig(batch_size=4, seq_len=16),
                    inputs={"cycling": ("current_a", "temperature_c")},
                    targets={"cycling": ("voltage_v",)}, scaling=scaling)


EXISTING = (
    ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),
    ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2, clip=True),
    ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0, transform="log1p",
                output_min=0.0),
)


def test_an_existing_plan_keeps_its_id_and_cache_keys() -> None:
    """Recorded before the fitted-scaling fields existed: a spec that does not use them
    dumps, and so digests, exactly as before."""
    spec = _spec(*EXISTING)
    assert content_id("p", "s-0123", spec.planning_dict()) == "p-cee0165f25f2b530c6c1a6faa4161e63"
    assert ChannelSpec.for_protocol(spec, "cycling").digest == "383ea8fbaafe2725d84f9aa0"
    dumped = spec.planning_dict()["scaling"][0]
    assert set(dumped) == {"column", "input_min", "input_max", "output_min", "output_max",
                           "clip", "transform"}
    assert PlanSpec.model_validate(spec.planning_dict()) == spec


def test_a_refit_is_a_new_plan_and_new_cache_keys() -> None:
    fit_a = ScalingSpec(column="current_a", transform="standard", mean=0.5, std=2.0)
    fit_b = ScalingSpec(column="current_a", transform="standard", mean=0.5, std=2.0000001)
    a, b = _spec(fit_a, *EXISTING[1:]), _spec(fit_b, *EXISTING[1:])
    assert a.planning_dict()["scaling"][0] == {
        "column": "current_a", "output_min": -1.0, "output_max": 1.0, "clip": False,
        "transform": "standard", "mean": 0.5, "std": 2.0}
    assert content_id("p", "s-0123", a.planning_dict()) != content_id(
        "p", "s-0123", b.planning_dict())
    assert ChannelSpec.for_protocol(a, "cycling").digest != ChannelSpec.for_protocol(
        b, "cycling").digest
    assert PlanSpec.model_validate(a.planning_dict()) == a  # the stored spec reads back
