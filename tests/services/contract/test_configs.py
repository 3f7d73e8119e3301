"""The public config types validate on construction (TYPES.md, SEMANTICS section 6)."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from windpipe.services.contract.configs import (
    DatasetProtocolId,
    LoaderConfig,
    LoaderOptions,
    PlanSpec,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.contract.errors import WindpipeError


def _loader(**kwargs):
    base = {"inputs": {"cycling": ("current_a",)}, "targets": {"cycling": ("voltage_v",)}}
    base.update(kwargs)
    return LoaderConfig(**base)


def test_defaults_match_types_md():
    cfg = _loader()
    assert cfg.split == "train"
    assert cfg.default_window == WindowConfig(batch_size=8, seq_len=1024)
    assert cfg.seed == 69
    assert cfg.strategy == "sequential"
    assert cfg.phase_shift is True
    assert cfg.stateful_n_windows == 0
    assert cfg.drop_incomplete_distributed is True
    assert cfg.group_key == ("set_id", "cell_id", "cidx", "protocol")
    assert cfg.alignment_key == ("set_id", "cell_id", "cidx")
    assert cfg.data_access == "windowed"
    assert cfg.prefetch_factor == 4
    assert cfg.device == "auto"
    v = ValidationConfig.sample()
    assert (v.fraction, v.seed, v.group_by) == (0.2, 69, ("set_id", "cell_id", "cidx"))


def test_window_properties():
    w = WindowConfig(batch_size=4, seq_len=16)
    assert w.window_rows == 64
    assert w.step == 64
    assert WindowConfig(batch_size=4, seq_len=16, step_rows=10).step == 10
    with pytest.raises(WindpipeError):
        WindowConfig(batch_size=0, seq_len=16)
    with pytest.raises(WindpipeError):
        WindowConfig(batch_size=1, seq_len=1, step_rows=0)


def test_configs_are_immutable():
    w = WindowConfig(batch_size=4, seq_len=16)
    with pytest.raises(ValidationError, match="frozen"):
        w.batch_size = 5  # type: ignore[misc]


def test_protocol_keys_accept_enum_and_strings():
    cfg = LoaderConfig(
        inputs={DatasetProtocolId.CYCLING: ("current_a",), "hppc": "current_a"},
        targets={"cycling": ("voltage_v",), DatasetProtocolId.HPPC: ("voltage_v",)},
        window_by_protocol={DatasetProtocolId.HPPC: WindowConfig(batch_size=2, seq_len=8)},
    )
    assert set(cfg.inputs) == {"cycling", "hppc"}
    assert cfg.inputs["hppc"] == ("current_a",)
    assert cfg.window_for("hppc").seq_len == 8
    assert cfg.window_for(DatasetProtocolId.CYCLING) == cfg.default_window


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"targets": {"hppc": ("voltage_v",)}}, "targets must name exactly"),
        ({"protocol_order": ("cycling", "eis")}, "protocol_order"),
        ({"window_by_protocol": {"eis": {"batch_size": 1, "seq_len": 2}}}, "window_by_protocol"),
        ({"scaling": (ScalingSpec(column="temperature_c", input_min=0, input_max=1),)},
         "neither inputs nor targets"),
        ({"inputs": {"cycling": ("a", "a")}}, "twice"),
        ({"inputs": {"Cycling": ("a",)}, "targets": {"Cycling": ("b",)}}, "lower-case"),
        ({"device": "gpu"}, "device"),
        ({"device": "cuda:\u00b2"}, "device"),  # a Unicode digit is no device index
        ({"cross_protocol_state_carry": "chain"}, "stateful_n_windows"),
        ({"stateful_n_windows": -2}, "greater than or equal"),
    ],
)
def test_loader_config_rejects(kwargs, needle):
    with pytest.raises(WindpipeError, match=needle):
        _loader(**kwargs)


def test_chain_requires_shared_shapes():
    with pytest.raises(WindpipeError, match="share batch_size and seq_len"):
        LoaderConfig(
            inputs={"cycling": ("current_a",), "hppc": ("current_a",)},
            targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
            window_by_protocol={"hppc": WindowConfig(batch_size=8, seq_len=64)},
            stateful_n_windows=2, cross_protocol_state_carry="chain",
        )
    cfg = LoaderConfig(
        inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("voltage_v", "current_a")},
        targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
        stateful_n_windows=-1, cross_protocol_state_carry="chain",
        protocol_order=("hppc", "cycling"),
    )
    assert cfg.input_columns("cycling") == ("voltage_v", "current_a", "temperature_c")
    assert cfg.target_columns("hppc") == ("voltage_v",)


def test_validation_config_constructors():
    assert ValidationConfig.provide([{"cell_id": "A"}]).strategy == "provide"
    m = ValidationConfig.merge([{"cell_id": "A"}], fraction=0.1, seed=3)
    assert (m.strategy, m.fraction, m.seed) == ("merge", 0.1, 3)
    with pytest.raises(WindpipeError, match="selector"):
        ValidationConfig(strategy="provide")
    with pytest.raises(WindpipeError):
        ValidationConfig.sample(fraction=1.5)
    with pytest.raises(WindpipeError, match="empty selector"):
        ValidationConfig.provide([{}])


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"input_min": 1.0, "input_max": 1.0}, "input_max equals input_min"),
        ({"input_min": 0.0, "input_max": math.inf}, "finite"),
        ({"input_min": math.nan, "input_max": 1.0}, "finite"),
        ({"input_min": -2.0, "input_max": 1.0, "transform": "log1p"}, "above -1"),
        ({"input_min": 0.0, "input_max": 1.0, "output_min": 1.0, "output_max": 1.0}, "output"),
        # distinct bounds whose log1p collapse: every value would scale to NaN or inf
        ({"input_min": 1e16, "input_max": 1e16 + 4, "transform": "log1p"}, "degenerate"),
        ({"input_min": 0.0, "input_max": 1e-320}, "degenerate"),
        ({"input_min": -1e308, "input_max": 1e308}, "degenerate"),
    ],
)
def test_scaling_rejects(kwargs, needle):
    with pytest.raises(WindpipeError, match=needle):
        ScalingSpec(column="x", **kwargs)


def test_linear_scaling_forward_inverse_numpy_and_torch():
    s = ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0)
    x = np.array([-10.0, 0.0, 5.0, 10.0, np.nan])
    y = s.forward(x)
    np.testing.assert_allclose(y, [-1.0, 0.0, 0.5, 1.0, np.nan])
    np.testing.assert_allclose(s.inverse(y), x)
    t = s.forward(torch.tensor([-10.0, 0.0, 5.0], dtype=torch.float32))
    assert torch.allclose(t, torch.tensor([-1.0, 0.0, 0.5]))
    assert torch.allclose(s.inverse(t), torch.tensor([-10.0, 0.0, 5.0]))


def test_log1p_and_clip():
    s = ScalingSpec(column="f", input_min=0.0, input_max=math.expm1(2.0), transform="log1p",
                    output_min=0.0, output_max=1.0, clip=True)
    x = np.array([0.0, math.expm1(1.0), math.expm1(4.0), -1.0, -5.0, np.nan])
    y = s.forward(x)
    np.testing.assert_allclose(y[:3], [0.0, 0.5, 1.0])
    assert np.isnan(y[3:]).all()
    np.testing.assert_allclose(s.inverse(y[:2]), x[:2], rtol=1e-12)
    ty = s.forward(torch.tensor([0.0, math.expm1(1.0), -1.0], dtype=torch.float64))
    assert ty[:2].tolist() == pytest.approx([0.0, 0.5])
    assert torch.isnan(ty[2])


def test_configs_are_immutable_all_the_way_down_and_hashable():
    cfg = LoaderConfig(inputs={"cycling": ("a",)}, targets={"cycling": ("v",)},
                       window_by_protocol={"cycling": WindowConfig(batch_size=2, seq_len=3)})
    for mutate in (lambda: cfg.inputs.__setitem__("hppc", ("x",)),
                   lambda: cfg.targets.pop("cycling"),
                   cfg.window_by_protocol.clear,
                   lambda: cfg.inputs.update({"eis": ("z",)})):
        with pytest.raises(TypeError, match="immutable"):
            mutate()
    assert cfg.inputs == {"cycling": ("a",)}
    same = LoaderConfig.model_validate(cfg.model_dump(mode="json"))
    assert same == cfg
    assert hash(same) == hash(cfg)
    assert {cfg: 1}[same] == 1
    val = ValidationConfig.provide([{"cell_id": "c1"}])
    with pytest.raises(TypeError, match="immutable"):
        val.provided[0].clear()
    assert pickle.loads(pickle.dumps(val)) == val
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_loader_config_splits_into_plan_spec_and_options():
    cfg = LoaderConfig(inputs={"cycling": ("a",)}, targets={"cycling": ("v",)}, seed=3,
                       strategy="shuffled", device="cpu", num_workers=2,
                       data_access="full_in_mem")
    # the halves are exactly TYPES' planning and runtime fields, and together all of them
    assert set(LoaderConfig.PLANNING_FIELDS) == {
        "split", "default_window", "window_by_protocol", "seed", "strategy", "phase_shift",
        "protocol_order", "stateful_n_windows", "cross_protocol_state_carry",
        "drop_incomplete_batches", "drop_incomplete_distributed", "group_key",
        "alignment_key", "inputs", "targets", "scaling",
        "align_by",  # windpipe's addition (SEMANTICS 9)
        "shuffle_block_bytes"}  # windpipe's addition (SEMANTICS 3c)
    assert set(LoaderConfig.RUNTIME_FIELDS) == {
        "data_access", "num_workers", "prefetch_factor", "persistent_workers", "pin_memory",
        "multiprocessing_context", "device", "prefetch_to_device", "non_blocking", "transport",
        "input_valid"}
    # the runtime options are held by concern, in three groups
    assert set(LoaderConfig.model_fields) == {*LoaderConfig.PLANNING_FIELDS,
                                              "source", "device_feed", "workers"}
    assert {n for g in LoaderOptions.GROUPS.values() for n in g.model_fields} == set(
        LoaderConfig.RUNTIME_FIELDS)
    spec = cfg.plan_spec()
    assert type(spec) is PlanSpec
    assert spec.seed == 3
    assert spec.strategy == "shuffled"
    assert spec.planning_dict() == cfg.planning_dict()
    assert spec.plan_spec() is spec
    options = cfg.options()
    assert type(options) is LoaderOptions
    assert (options.device, options.num_workers, options.data_access) == ("cpu", 2,
                                                                          "full_in_mem")
    assert isinstance(cfg, PlanSpec)  # every planner function takes a LoaderConfig too
    assert LoaderConfig.model_validate({**spec.planning_dict(), **options.model_dump()}) == cfg
    with pytest.raises(ValidationError, match="device"):  # validation keeps pydantic's
        PlanSpec.model_validate({**spec.planning_dict(), "device": "cpu"})
    with pytest.raises(WindpipeError, match="scaling"):  # the plan's rules hold on a spec
        PlanSpec(inputs={"cycling": ("a",)}, targets={"cycling": ("v",)},
                 scaling=(ScalingSpec(column="zz", input_min=0, input_max=1),))


@pytest.mark.parametrize(("update", "match"), [
    ({"window_by_protocol": {"hppc": WindowConfig(batch_size=3, seq_len=8)}},
     "one batch_size"),
    ({"stateful_n_windows": 2}, "stateful_n_windows=0"),
    ({"default_window": WindowConfig(batch_size=2, seq_len=8, step_rows=4)}, "step_rows"),
])
def test_align_by_refuses_what_cannot_align(update: dict[str, Any], match: str) -> None:
    base = {"align_by": "alignment_key", "inputs": {"cycling": ("a",), "hppc": ("a",)},
            "targets": {"cycling": ("b",), "hppc": ("b",)},
            "default_window": WindowConfig(batch_size=2, seq_len=8)}
    assert LoaderConfig(**base).aligned  # type: ignore[arg-type]
    with pytest.raises(WindpipeError, match=match):
        LoaderConfig(**{**base, **update})  # type: ignore[arg-type]
    with pytest.raises(WindpipeError, match="align_by"):
        LoaderConfig(**{**base, "align_by": "cell_id"})  # type: ignore[arg-type]
