"""TensorFlow's ``tf.data.Dataset`` of a plan (``plan.tf_dataset``, ``windpipe.tf``) against a
real catalog and Flight server sharing a host tier, over real files: every element holds
the bytes of the torch path's batch (``plan.batches``, itself checked against references
read from the files elsewhere) for sequential, shuffled, block-shuffled, stateful,
multi-protocol and aligned plans, both transports, epochs, ranks and resumption; the
element spec is the documented one; Keras trains on it and resumes mid-epoch; errors stay
ours; and the path needs no torch, while without TensorFlow it says what to install."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import windpipe.sdk as sdk
import windpipe.tf
from tests.sdk.deployment import deployment
from windpipe.sdk import LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.synth import write_synthetic_dataset

ROOT = Path(__file__).resolve().parents[2]
IO_IN = {"cycling": ("current_a", "temperature_c"), "hppc": ("current_a",)}
IO_OUT = {"cycling": ("voltage_v",), "hppc": ("voltage_v", "temperature_c")}
CYCLING = {"inputs": {"cycling": IO_IN["cycling"]}, "targets": {"cycling": IO_OUT["cycling"]},
           "default_window": WindowConfig(batch_size=4, seq_len=16)}
CONFIGS: dict[str, LoaderConfig] = {
    "sequential": LoaderConfig(**CYCLING),
    "shuffled": LoaderConfig(**CYCLING, strategy="shuffled", seed=3),
    "block_shuffled": LoaderConfig(**CYCLING, strategy="block_shuffled", seed=5,
                                   shuffle_block_bytes=1 << 20),
    "stateful": LoaderConfig(**CYCLING, strategy="shuffled", stateful_n_windows=3),
    # two protocols of different windows and channels in one plain plan
    "protocols": LoaderConfig(inputs=IO_IN, targets=IO_OUT, strategy="shuffled",
                              default_window=WindowConfig(batch_size=4, seq_len=16),
                              window_by_protocol={"hppc": WindowConfig(batch_size=4,
                                                                       seq_len=8)}),
    "aligned": LoaderConfig(inputs=IO_IN, targets=IO_OUT, align_by="alignment_key",
                            strategy="shuffled", seed=2,
                            default_window=WindowConfig(batch_size=3, seq_len=16),
                            window_by_protocol={"hppc": WindowConfig(batch_size=3,
                                                                     seq_len=8)}),
}
PLAIN = ("inputs", "targets", "mask", "target_valid", "has_channel")


def _spec(shape: tuple[int | None, ...], dtype: Any) -> tf.TensorSpec:
    return tf.TensorSpec(shape=shape, dtype=dtype)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("sdk-tf")
    # the last cell lacks temperature_c: has_channel False, hppc targets NaN
    data = write_synthetic_dataset(tmp / "data", cells=3, cycles=4, rows_per_cycle=120,
                                   seed=5, zarr_fraction=0.4, missing_channel="temperature_c",
                                   missing_cells=1, hppc_every=2, eis_every=3)
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", tier_bytes=64 << 20) as d:
        cat = sdk.Catalog(d.url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the synthetic data's nulls
            ver = cat.register("tf", root=data.path.resolve().as_uri(),
                               manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.25, seed=1,
                                                  group_by=("set_id", "cell_id")))
        d.extra.update(cat=cat, split=split, plans={})
        yield d
        cat.close()


def _plan(dep: Any, name: str) -> Any:
    plans = dep.extra["plans"]
    if name not in plans:
        plans[name] = dep.extra["split"].plan(CONFIGS[name])
    return plans[name]


def _torch_fields(batch: Any) -> dict[str, Any]:
    """A torch batch's fields as numpy, named as an element names them."""
    if isinstance(batch, sdk.AlignedBatch):
        out: dict[str, Any] = {name: {p: t.numpy() for p, t in getattr(batch, name).items()}
                               for name in PLAIN}
        out["has_data"] = {p: t.numpy() for p, t in batch.has_data.items()}
    else:
        out = {name: getattr(batch, name).numpy() for name in PLAIN}
    out["batch_idx"] = np.int64(batch.batch_idx)
    return out


def assert_same(element: dict[str, Any], batch: Any) -> None:
    """``element`` holds ``batch``'s bytes, field by field, with its dtypes and shapes."""
    want = _torch_fields(batch)
    assert set(element) == set(want)
    for name, value in want.items():
        got = element[name]
        pairs = ([(p, got[p], value[p]) for p in value] if isinstance(value, dict)
                 else [("", got, value)])
        if isinstance(value, dict):
            assert list(got) == list(value), name  # the plan's protocol order
        for p, tensor, w in pairs:
            g = tensor.numpy()
            where = f"{name} {p} of batch {batch.batch_idx}"
            assert g.dtype == w.dtype, where
            assert g.shape == w.shape, where
            assert g.tobytes() == np.ascontiguousarray(w).tobytes(), where


def _pass(dep: Any, name: str, ds: Any, *, epoch: int, rank: int = 0, world_size: int = 1,
          start: int = 0, transport: str) -> list[Any]:
    want = list(_plan(dep, name).batches(epoch, rank, world_size, start, progress=False,
                                         transport=transport))
    got = list(ds)
    assert len(got) == len(want) > 0
    for element, batch in zip(got, want, strict=True):
        assert_same(element, batch)
    return got


# -- the same batches ------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["local", "flight"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_plan_streams_the_torch_batches_byte_for_byte(dep: Any, name: str,
                                                           transport: str) -> None:
    plan = _plan(dep, name)
    for world_size in (1, 2):
        for rank in range(world_size):
            ds = plan.tf_dataset(rank=rank, world_size=world_size, transport=transport)
            assert ds._source.transport == transport
            for epoch in (0, 1):
                ds.set_epoch(epoch)
                assert len(ds) == plan.pass_length(epoch, rank=rank, world_size=world_size)
                got = _pass(dep, name, ds, epoch=epoch, rank=rank, world_size=world_size,
                            transport=transport)
                assert len(got) == len(ds)


def test_the_fixture_has_what_the_comparison_is_about(dep: Any) -> None:
    """Missing channels, NaN targets, padding and short or empty lanes are in the
    batches compared, and epochs of a shuffled plan differ."""
    plan = _plan(dep, "protocols")
    batches = list(plan.batches(0, progress=False))
    assert any(not b.has_channel.all() for b in batches)
    assert any(not b.target_valid.all() and b.mask.any() for b in batches)
    assert any(not b.mask.all() for b in batches)
    assert {b.inputs.shape[1:] for b in batches} == {(16, 2), (8, 1)}
    shuffled = _plan(dep, "shuffled")
    assert ([b.state.window_offsets for b in shuffled.batches(0, progress=False)]
            != [b.state.window_offsets for b in shuffled.batches(1, progress=False)])
    aligned = list(_plan(dep, "aligned").batches(0, progress=False))
    assert any(not b.has_data["hppc"].all() for b in aligned)


def test_element_spec_is_the_documented_signature(dep: Any) -> None:
    f32, b, i64 = tf.float32, tf.bool, tf.int64
    cycling = {
        "inputs": _spec((None, 16, 2), f32), "targets": _spec((None, 16, 1), f32),
        "mask": _spec((None, 16), b), "target_valid": _spec((None, 16), b),
        "has_channel": _spec((None, 3), b), "batch_idx": _spec((), i64),
    }
    for name in ("sequential", "shuffled", "block_shuffled", "stateful"):
        ds = _plan(dep, name).tf_dataset()
        assert ds.element_spec == cycling, name
        assert ds.dataset().element_spec == cycling, name
    with_valid = _plan(dep, "sequential").tf_dataset(input_valid=True)
    assert with_valid.element_spec == {**cycling, "input_valid": _spec((None, 16, 2), b)}
    # cycling 16 x (2 in, 1 out, 3 channels) and hppc 8 x (1 in, 2 out, 3 channels)
    assert _plan(dep, "protocols").tf_dataset().element_spec == {
        "inputs": _spec((None, None, None), f32), "targets": _spec((None, None, None), f32),
        "mask": _spec((None, None), b), "target_valid": _spec((None, None), b),
        "has_channel": _spec((None, 3), b), "batch_idx": _spec((), i64),
    }
    aligned = _plan(dep, "aligned").tf_dataset()
    assert aligned.element_spec == {
        "inputs": {"cycling": _spec((None, 16, 2), f32), "hppc": _spec((None, 8, 1), f32)},
        "targets": {"cycling": _spec((None, 16, 1), f32), "hppc": _spec((None, 8, 2), f32)},
        "mask": {"cycling": _spec((None, 16), b), "hppc": _spec((None, 8), b)},
        "target_valid": {"cycling": _spec((None, 16), b), "hppc": _spec((None, 8), b)},
        "has_channel": {"cycling": _spec((None, 3), b), "hppc": _spec((None, 3), b)},
        "has_data": {"cycling": _spec((None,), b), "hppc": _spec((None,), b)},
        "batch_idx": _spec((), i64),
    }
    assert aligned.dataset().element_spec == aligned.element_spec
    assert windpipe.tf.element_signature(CONFIGS["aligned"]) == aligned.element_spec


def test_input_valid_is_the_torch_batches(dep: Any) -> None:
    plan = _plan(dep, "sequential")
    want = list(plan.batches(0, progress=False, input_valid=True))
    got = list(plan.tf_dataset(input_valid=True))
    assert len(got) == len(want)
    for element, batch in zip(got, want, strict=True):
        assert element["input_valid"].numpy().tobytes() == batch.input_valid.numpy().tobytes()
    assert any(not b.input_valid.all() for b in want)


# -- epochs, ranks and resumption ------------------------------------------------------


def _idx(elements: list[Any]) -> list[int]:
    return [int(e["batch_idx"]) for e in elements]


@pytest.mark.parametrize("name", ["shuffled", "stateful", "aligned"])
def test_resume_from_state_dict_equals_the_uninterrupted_tail(dep: Any, name: str) -> None:
    plan = _plan(dep, name)
    full = plan.tf_dataset(epoch=1)
    everything = list(full)
    assert full.state_dict() == {"plan_id": plan.id, "epoch": 1, "batch": len(everything)}
    ds = plan.tf_dataset(epoch=1)
    seen = []
    for element in ds:
        seen.append(element)
        if len(seen) == 3:
            break
    state = ds.state_dict()
    assert state == {"plan_id": plan.id, "epoch": 1, "batch": 3}
    assert ds.state_dict(after=seen[1])["batch"] == 2
    again = plan.tf_dataset()
    again.load_state_dict(json.loads(json.dumps(state)))  # a checkpoint's round trip
    assert len(again) == len(everything) - 3
    tail = _pass(dep, name, again, epoch=1, start=3, transport="auto")
    for element, want in zip([*seen, *tail], everything, strict=True):
        assert_same_element(element, want)
    assert again.state_dict() == {"plan_id": plan.id, "epoch": 1, "batch": len(everything)}
    assert _idx(list(again)) == _idx(everything)  # the next pass starts the epoch over
    with pytest.raises(windpipe.sdk.InvalidConfig, match="belongs to plan"):
        again.load_state_dict({**state, "plan_id": "p-other"})
    with pytest.raises(windpipe.sdk.InvalidConfig, match="invalid state"):
        again.load_state_dict({**state, "batch": -1})


def assert_same_element(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert tf.nest.map_structure(lambda g, w: g.numpy().tobytes() == w.numpy().tobytes(),
                                 got, want) == tf.nest.map_structure(lambda _: True, want)


def test_a_tf_data_iteration_is_one_pass_of_the_epoch_selected_then(dep: Any) -> None:
    plan = _plan(dep, "shuffled")
    n = {e: plan.pass_length(e) for e in range(8)}
    same = [e for e in n if e and n[e] == n[0]]
    other = [e for e in n if n[e] != n[0]]
    assert same  # the phase shift makes some epochs longer or shorter, others not
    assert other
    ds = plan.tf_dataset()
    data = ds.dataset().prefetch(2)  # read ahead, as Keras reads it
    assert int(data.cardinality()) == n[0]
    for epoch in (0, same[0], 0):
        ds.set_epoch(epoch)
        want = list(plan.batches(epoch, progress=False))
        got = list(data)
        assert len(got) == len(want)
        for element, batch in zip(got, want, strict=True):
            assert_same(element, batch)
    # tf.data read ahead of the consumer: the cursor is not known, and is never guessed
    with pytest.raises(windpipe.sdk.InvalidConfig, match="state_dict\\(after=element\\)"):
        ds.state_dict()
    assert ds.state_dict(after=got[4]) == {"plan_id": plan.id, "epoch": 0, "batch": 5}
    ds.load_state_dict({"plan_id": plan.id, "epoch": 0, "batch": 4})
    resumed = ds.dataset()
    assert int(resumed.cardinality()) == n[0] - 4
    assert _idx(list(resumed)) == list(range(4, n[0]))
    # an epoch of another length than the dataset's is refused, not cut short
    ds.set_epoch(other[0])
    with pytest.raises(tf.errors.OpError, match=f"holds {n[0]} batches.*has {n[other[0]]}"):
        list(data)
    assert _idx(list(ds.dataset())) == list(range(n[other[0]]))


def test_ranks_get_disjoint_equal_passes(dep: Any) -> None:
    plan = _plan(dep, "shuffled")
    world = 3
    keys = []
    for rank in range(world):
        got = list(plan.tf_dataset(rank=rank, world_size=world))
        assert _idx(got) == list(range(len(got)))  # rank-local indexes
        keys.append([b.state.window_offsets for b in plan.batches(0, rank, world,
                                                                 progress=False)])
        assert len(got) == len(keys[-1])
    assert len({len(k) for k in keys}) == 1  # the distributed tail is trimmed
    flat = [tuple(k) for ks in keys for k in ks]
    assert len(flat) == len(set(flat))
    with pytest.raises(windpipe.sdk.InvalidConfig, match="rank 3"):
        plan.tf_dataset(rank=3, world_size=3)
    with pytest.raises(windpipe.sdk.InvalidConfig, match="does not use the option 'num_workers'"):
        plan.tf_dataset(num_workers=2)


def test_a_distribution_strategy_gives_each_input_pipeline_its_rank(dep: Any) -> None:
    """``input_context`` (what ``distribute_datasets_from_function`` passes) sets the rank
    and world size; through a real strategy the batches are the torch pass's."""
    plan = _plan(dep, "shuffled")
    ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2)
    ds = plan.tf_dataset(input_context=ctx)
    assert (ds.rank, ds.world_size) == (2, 3)
    _pass(dep, "shuffled", ds, epoch=0, rank=2, world_size=3, transport="auto")
    with pytest.raises(windpipe.sdk.InvalidConfig, match="not both"):
        plan.tf_dataset(rank=0, input_context=ctx)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    seen: list[Any] = []

    def per_pipeline(context: Any) -> Any:
        made = plan.tf_dataset(input_context=context)
        seen.append((made.rank, made.world_size))
        return made.dataset()

    got = list(strategy.distribute_datasets_from_function(per_pipeline))
    assert seen == [(0, 1)]
    want = list(plan.batches(0, progress=False))
    assert len(got) == len(want) > 0
    for element, batch in zip(got, want, strict=True):
        assert_same(element, batch)


def test_a_retired_plan_raises_ours_through_tensorflow(dep: Any) -> None:
    plan = dep.extra["split"].plan(CONFIGS["sequential"].model_copy(update={"seed": 99}))
    ds = plan.tf_dataset(transport="flight")
    plan.retire()
    with pytest.raises(windpipe.sdk.Conflict, match="retired"):
        list(ds)


# -- Keras -------------------------------------------------------------------------------


class _Steps(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """The batches each Keras epoch trained on."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[int, int] = {}

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.steps[epoch] = 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.steps[max(self.steps)] += 1


class _Stop(tf.keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch + 1 == self.after:
            self.model.stop_training = True


def _model(shape: tuple[int, int] = (16, 2)) -> Any:
    keras = tf.keras
    model = keras.Sequential([keras.Input(shape), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def _fit(model: Any, ds: Any, epoch: int, *callbacks: Any) -> Any:
    return model.fit(ds.dataset().map(windpipe.tf.for_keras), initial_epoch=epoch,
                     epochs=epoch + 1, verbose=0, shuffle=False,
                     callbacks=[ds.keras_callback(), *callbacks])


def test_keras_trains_epoch_by_epoch_and_resumes_mid_epoch(dep: Any) -> None:
    plan = _plan(dep, "shuffled")
    n = {e: plan.pass_length(e) for e in (0, 1, 2)}
    ds = plan.tf_dataset()
    model, steps = _model(), _Steps()
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        history = _fit(model, ds, epoch, steps)
        assert np.isfinite(history.history["loss"]).all()  # NaN targets weigh 0, and are 0
        assert ds.state_dict() == {"plan_id": plan.id, "epoch": epoch, "batch": n[epoch]}
    assert steps.steps == {0: n[0], 1: n[1]}
    # a run stopped after 3 steps of epoch 2 resumes at its fourth batch
    stopped = plan.tf_dataset(epoch=2)
    _fit(_model(), stopped, 2, _Stop(3))
    state = stopped.state_dict()
    assert state == {"plan_id": plan.id, "epoch": 2, "batch": 3}
    resumed = plan.tf_dataset()
    resumed.load_state_dict(state)
    steps = _Steps()
    _fit(model, resumed, 2, steps)  # Keras reads a first batch before: the point holds
    assert steps.steps == {2: n[2] - 3}
    assert resumed.state_dict() == {"plan_id": plan.id, "epoch": 2, "batch": n[2]}


def test_keras_fits_an_aligned_plan_by_protocol(dep: Any) -> None:
    plan = _plan(dep, "aligned")
    keras = tf.keras
    inputs = {"cycling": keras.Input((16, 2), name="cycling"),
              "hppc": keras.Input((8, 1), name="hppc")}
    outputs = {"cycling": keras.layers.Dense(1, name="cycling_out")(inputs["cycling"]),
               "hppc": keras.layers.Dense(2, name="hppc_out")(inputs["hppc"])}
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss={"cycling": "mse", "hppc": "mse"})
    ds = plan.tf_dataset()
    x, y, w = next(iter(ds.dataset().map(windpipe.tf.for_keras)))
    assert list(x) == list(y) == list(w) == ["cycling", "hppc"]
    valid = next(iter(ds))["target_valid"]["hppc"].numpy()
    assert not valid.all()  # the lacking cell's hppc targets are NaN: weight 0, value 0
    assert np.isfinite(y["hppc"].numpy()).all()
    assert (w["hppc"].numpy() == valid).all()
    history = _fit(model, ds, 0)
    assert np.isfinite(history.history["loss"]).all()


# -- without torch, without TensorFlow ---------------------------------------------------

WITHOUT = r'''
import json
import sys

blocked, url, plan_id = sys.argv[1:4]
sys.modules[blocked] = None  # as if it were not installed
import windpipe
import windpipe.tf

loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow")
                        and sys.modules[m] is not None)
out = {"after_import": loaded()}
with windpipe.Catalog(url) as cat:
    ds = cat.plan(plan_id).tf_dataset()
    try:
        out["batches"] = [int(e["batch_idx"]) for e in ds]
        out["length"] = len(ds)
        out["sum"] = float(sum(float(e["inputs"].numpy().sum()) for e in ds))
    except ModuleNotFoundError as exc:
        out["error"] = {"type": type(exc).__name__, "name": exc.name, "message": str(exc)}
out["loaded"] = loaded()
print(json.dumps(out))
'''


def _without(blocked: str, dep: Any) -> dict[str, Any]:
    plan = _plan(dep, "sequential")
    result = subprocess.run([sys.executable, "-c", WITHOUT, blocked, dep.url, plan.id],
                            cwd=ROOT, capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow  # a fresh interpreter imports TensorFlow: tens of seconds on 2 busy cores
def test_tensorflow_batches_need_no_torch(dep: Any) -> None:
    out = _without("torch", dep)
    assert out["after_import"] == []  # importing windpipe.tf imports neither framework
    assert "error" not in out, out
    n = _plan(dep, "sequential").pass_length(0)
    assert out["batches"] == list(range(n)) != []
    assert out["length"] == n
    assert np.isfinite(out["sum"])
    assert out["loaded"]
    assert all(m.split(".")[0] == "tensorflow" for m in out["loaded"])


def test_without_tensorflow_the_dataset_says_what_to_install(dep: Any) -> None:
    out = _without("tensorflow", dep)
    assert out["error"]["type"] == "TensorFlowMissing"
    assert out["error"]["name"] == "tensorflow"
    assert out["error"]["message"].startswith(
        "windpipe's TensorFlow datasets need TensorFlow: pip install -e '.[tf]' in a checkout")
    assert out["loaded"] == []
