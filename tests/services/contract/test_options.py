"""The runtime options, grouped by concern, keep docs/types.md's flat spelling; a call's
overrides are merged by one function that checks names and values."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.contract.errors import InvalidConfig, WindpipeError
from windpipe.services.contract.options import (
    DeviceOptions,
    LoaderOptions,
    OptionKeywords,
    SourceOptions,
    WorkerOptions,
)

CONTRACT = Path(__file__).resolve().parents[3] / "windpipe" / "services" / "contract"
PLAN = {"inputs": {"cycling": ("current_a",)}, "targets": {"cycling": ("voltage_v",)}}


def _config(**kwargs: Any) -> LoaderConfig:
    return LoaderConfig(**PLAN, **kwargs)  # type: ignore[arg-type]


def test_flat_keywords_land_in_their_group_and_read_back_flat() -> None:
    flat = _config(data_access="full_in_mem", transport="flight", device="cpu",
                   pin_memory=False, prefetch_to_device=False, non_blocking=False,
                   num_workers=2, prefetch_factor=3, persistent_workers=True,
                   multiprocessing_context="forkserver")
    grouped = _config(
        source=SourceOptions(data_access="full_in_mem", transport="flight"),
        device_feed=DeviceOptions(device="cpu", pin_memory=False, prefetch_to_device=False,
                                  non_blocking=False),
        workers={"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True,
                 "multiprocessing_context": "forkserver"},
    )
    assert flat == grouped
    assert hash(flat) == hash(grouped)
    assert (flat.data_access, flat.transport) == ("full_in_mem", "flight")
    assert (flat.device, flat.pin_memory, flat.prefetch_to_device, flat.non_blocking) == (
        "cpu", False, False, False)
    assert (flat.num_workers, flat.prefetch_factor, flat.persistent_workers,
            flat.multiprocessing_context) == (2, 3, True, "forkserver")
    assert flat.workers == WorkerOptions(num_workers=2, prefetch_factor=3,
                                         persistent_workers=True,
                                         multiprocessing_context="forkserver")
    dumped = flat.model_dump()
    assert not set(dumped) & set(LoaderOptions.OPTION_NAMES)  # stored by group
    assert LoaderConfig.model_validate(dumped) == flat
    assert LoaderConfig.model_validate(json.loads(flat.model_dump_json())) == flat
    # flat and grouped mix: each group takes its own keywords
    mixed = _config(workers=WorkerOptions(num_workers=2), prefetch_factor=3, device="cpu")
    assert (mixed.num_workers, mixed.prefetch_factor, mixed.device) == (2, 3, "cpu")
    with pytest.raises(ValueError, match="frozen"):  # pydantic's ValidationError
        flat.num_workers = 3  # type: ignore[misc]


def test_an_option_given_flat_and_in_its_group_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="num_workers given twice"):
        _config(num_workers=1, workers=WorkerOptions(num_workers=2))
    with pytest.raises(InvalidConfig, match="device given twice"):
        _config(device="cpu", device_feed={"device": "cpu"})


def test_mistakes_name_the_option() -> None:
    with pytest.raises(InvalidConfig, match="did you mean 'num_workers'"):
        _config(num_worker=2)
    with pytest.raises(InvalidConfig, match="num_workers"):
        _config(num_workers=-1)
    with pytest.raises(InvalidConfig, match="device must be"):
        _config(device="gpu")
    with pytest.raises(InvalidConfig, match="multiprocessing_context"):
        _config(multiprocessing_context="spwan")


def test_merged_lets_every_given_value_win() -> None:
    config = _config(num_workers=2, pin_memory=True, non_blocking=True,
                     persistent_workers=True, transport="flight")
    merged = config.merged(num_workers=0, pin_memory=None, non_blocking=False,
                           persistent_workers=False)
    assert (merged.num_workers, merged.pin_memory, merged.non_blocking,
            merged.persistent_workers) == (0, None, False, False)
    assert merged.transport == "flight"  # not given: the config's
    assert merged.plan_spec() == config.plan_spec()
    assert type(merged) is LoaderConfig
    assert config.merged() is config
    assert LoaderOptions().merged(device="cpu") == LoaderOptions(device="cpu")


def test_merged_refuses_unknown_names_and_bad_values() -> None:
    with pytest.raises(InvalidConfig, match="unknown loader option 'prefetch'") as info:
        LoaderOptions().merged(prefetch=2)
    assert info.value.details["option"] == "prefetch"
    with pytest.raises(InvalidConfig, match="did you mean 'pin_memory'"):
        LoaderOptions().merged(pinned_memory=True)
    with pytest.raises(InvalidConfig, match="prefetch_factor"):
        LoaderOptions().merged(prefetch_factor=0)
    with pytest.raises(InvalidConfig, match="transport"):
        LoaderOptions().merged(transport="carrier-pigeon")


def test_model_copy_routes_flat_names_through_merged() -> None:
    config = _config()
    copy = config.model_copy(update={"num_workers": 2, "seed": 5})
    assert (copy.num_workers, copy.seed) == (2, 5)
    with pytest.raises(WindpipeError, match="num_workers"):
        config.model_copy(update={"num_workers": -1})


def test_prefetch_factor_is_per_worker_and_read_ahead_counts_them() -> None:
    # torch's meaning: batches read ahead per worker; without workers the main process
    # is the one worker
    assert LoaderOptions().read_ahead == 4
    assert LoaderOptions(prefetch_factor=3).read_ahead == 3
    assert LoaderOptions(prefetch_factor=3, num_workers=2).read_ahead == 6
    assert WorkerOptions(prefetch_factor=2, num_workers=4).read_ahead == 8


def test_the_plan_body_carries_no_option_and_is_unchanged() -> None:
    body = _config(num_workers=3, device="cpu", transport="flight").planning_dict()
    assert body == _config().planning_dict()
    # what the SDK posts (plan ids digest it): exactly the bytes of before the groups
    assert json.dumps(body, separators=(",", ":")) == (
        '{"split":"train","default_window":{"batch_size":8,"seq_len":1024,'
        '"drop_incomplete":false,"step_rows":null},"window_by_protocol":{},"seed":69,'
        '"strategy":"sequential","phase_shift":true,"protocol_order":null,'
        '"stateful_n_windows":0,"cross_protocol_state_carry":null,'
        '"drop_incomplete_batches":false,"drop_incomplete_distributed":true,'
        '"group_key":["set_id","cell_id","cidx","protocol"],'
        '"alignment_key":["set_id","cell_id","cidx"],"align_by":null,'
        '"inputs":{"cycling":["current_a"]},"targets":{"cycling":["voltage_v"]},'
        '"scaling":[]}')


def _typed_init(path: Path, cls: str) -> ast.arguments:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    for stmt in node.body:
        if isinstance(stmt, ast.If):
            for inner in stmt.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "__init__":
                    return inner.args
    raise AssertionError(f"{cls} has no __init__ for type checkers")


def test_type_checkers_see_every_keyword() -> None:
    # editors and mypy read these signatures: the flat keywords must stay in them
    assert list(OptionKeywords.__annotations__) == list(LoaderOptions.OPTION_NAMES)
    for path, cls, names in [
        (CONTRACT / "options.py", "LoaderOptions", set(LoaderOptions.model_fields)),
        (CONTRACT / "configs.py", "LoaderConfig", set(LoaderConfig.model_fields)),
    ]:
        args = _typed_init(path, cls)
        assert {a.arg for a in args.kwonlyargs} == names
        assert args.kwarg is not None
        assert ast.unparse(args.kwarg.annotation or ast.Constant(None)) == (
            "Unpack[OptionKeywords]")
