"""``batch.input_valid`` (SEMANTICS 5b) through the SDK: equal to a reference read straight
from the files the batch's provenance names, on every path (embedded, same-host tier,
Flight), off by default with the same batches, and never part of the plan."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import zarr

import windpipe
from tests.reference.input_valid_ref import value_is_valid
from tests.sdk.deployment import deployment
from windpipe.sdk import (
    AlignedBatch,
    Batch,
    Catalog,
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.synth import write_synthetic_dataset

INPUTS = ("current_a", "temperature_c")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Parquet and zarr segments with nulls (NaN in zarr) and a cell without a temperature
    sensor."""
    out = tmp_path_factory.mktemp("input-valid-data") / "data"
    write_synthetic_dataset(out, cells=4, cycles=3, rows_per_cycle=200, seed=4,
                            null_fraction=0.05, zarr_fraction=0.4, row_group_rows=64,
                            hppc_every=2, missing_channel="temperature_c", missing_cells=1)
    return out


def _split(cat: Catalog, data: Path) -> Any:
    with warnings.catch_warnings():  # the nulls are reported: they are the subject here
        warnings.simplefilter("ignore", UserWarning)
        ver = cat.register("iv", root=data.resolve().as_uri(), manifest="manifest.parquet")
    return ver.split(ValidationConfig.sample(fraction=0.25, seed=2, group_by=("set_id", "cell_id")))


def _config(split: Any, **more: Any) -> LoaderConfig:
    stats = split.stats(side="train")
    scaling = tuple(ScalingSpec.from_stats(stats, c, kind="standard", protocol="cycling")
                    for c in (*INPUTS, "voltage_v"))
    return LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=48),
                        inputs={"cycling": INPUTS}, targets={"cycling": ("voltage_v",)},
                        scaling=scaling, **more)


@pytest.fixture(scope="module")
def embedded(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cat = windpipe.embedded(tmp_path_factory.mktemp("iv-embedded") / ".windpipe")
    split = _split(cat, data)
    yield cat, split, _config(split)
    cat.close()


class _Files:
    """Columns of the segments a batch read, straight from the files (float64, NaN for
    null; None for a column the segment does not have)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._columns: dict[str, dict[str, np.ndarray]] = {}

    def column(self, path: str, name: str) -> np.ndarray | None:
        if path not in self._columns:
            full = self.root / path
            if full.suffix == ".zarr":
                group = zarr.open_group(str(full), mode="r")
                cols = {n: np.asarray(a[...], dtype=np.float64) for n, a in group.arrays()}
            else:
                table = pq.read_table(full)
                cols = {n: np.asarray(table.column(n).cast(pa.float64()).to_numpy(
                    zero_copy_only=False), dtype=np.float64) for n in table.column_names}
            self._columns[path] = cols
        return self._columns[path].get(name)


def reference(batch: Batch, files: _Files, config: LoaderConfig) -> np.ndarray:
    """``input_valid`` from the batch's provenance (SEMANTICS 8): each lane's rows are the
    segment ranges it read; a row no range covers is padding."""
    state = batch.state
    b, t, c_in = batch.inputs.shape
    out = np.zeros((b, t, c_in), dtype=bool)
    for lane in range(b):
        refs = state.segments_of(lane)
        for c, col in enumerate(state.input_columns):
            if col not in config.inputs[state.protocols[lane]]:
                continue
            if any(files.column(r.path, col) is None for r in refs):
                continue  # the stream lacks the column
            for r in refs:
                values = files.column(r.path, col)
                assert values is not None
                for k in range(r.row_count):
                    step = r.window_row_start + k
                    if step < t:
                        out[lane, step, c] = value_is_valid(float(values[r.row_start + k]),
                                                            config.scaling_for(col))
    return out


def _passes(plan: Any, **options: Any) -> list[Batch]:
    out = []
    for epoch, rank, world in ((0, 0, 1), (1, 1, 2)):
        out += list(plan.batches(epoch=epoch, rank=rank, world_size=world, **options))
    return out


def test_toggling_input_valid_keeps_the_plan(embedded: Any) -> None:
    _cat, split, config = embedded
    plain = split.plan(config)
    asked = split.plan(config.model_copy(update={"input_valid": True}))
    assert asked.config.input_valid
    assert not plain.config.input_valid
    assert asked.id == plain.id
    assert asked.n_batches == plain.n_batches
    assert asked.report().raw == plain.report().raw
    assert config.planning_dict() == asked.config.planning_dict()


def test_embedded_batches_carry_the_reference_and_the_same_values(embedded: Any,
                                                                  data: Path) -> None:
    _cat, split, config = embedded
    plan = split.plan(config)
    files = _Files(data)
    plain, asked = _passes(plan), _passes(plan, input_valid=True)
    assert len(plain) == len(asked) > 0
    missing = filled = 0
    for p, a in zip(plain, asked, strict=True):
        assert p.input_valid is None
        assert a.input_valid is not None
        assert a.input_valid.dtype == torch.bool
        assert a.input_valid.shape == a.inputs.shape
        for name in ("inputs", "targets", "mask", "has_channel"):
            assert getattr(a, name).numpy().tobytes() == getattr(p, name).numpy().tobytes()
        assert a.state == p.state
        valid = a.input_valid.numpy()
        np.testing.assert_array_equal(valid, reference(a, files, config))
        assert (a.inputs.numpy()[~valid] == -2.0).all()
        filled += int((~valid).sum())
        lacking = ~a.input_has_channel().numpy()  # (B, C_in): the cell without the sensor
        missing += int(lacking.sum())
        assert not valid.transpose(0, 2, 1)[lacking].any()
    assert filled > 0
    assert missing > 0


def test_the_loader_and_the_dataloader_carry_it(embedded: Any) -> None:
    _cat, split, config = embedded
    plan = split.plan(config.model_copy(update={"input_valid": True}))
    want = [b.input_valid for b in plan.batches()]
    assert all(v is not None for v in want)
    got = list(plan.loader(device="cpu"))
    assert len(got) == len(want)
    for b, v in zip(got, want, strict=True):
        assert torch.equal(b.input_valid, v)
        assert "input_valid" in b.tensors()
        assert torch.equal(b.to("cpu").input_valid, v)
        assert torch.equal(b.contiguous().input_valid, v)
        back = pickle.loads(pickle.dumps(b))
        assert torch.equal(back.input_valid, v)
        assert back.nbytes == b.nbytes > b.inputs.numel() * 4
    off = next(iter(plan.loader(device="cpu", input_valid=False)))
    assert off.input_valid is None
    dataloaded = [b.input_valid for b in plan.dataloader(num_workers=0)]
    assert all(torch.equal(x, y) for x, y in zip(dataloaded, want, strict=True))
    # what a DataLoader worker gets: the dataset pickled, its passes opened afresh
    worker = pickle.loads(pickle.dumps(plan.torch_dataset()))
    first = next(iter(worker))
    assert first.input_valid is not None
    assert torch.equal(first.input_valid, want[0])


def test_aligned_batches_carry_it_per_protocol(embedded: Any) -> None:
    _cat, split, _ = embedded
    config = LoaderConfig(
        default_window=WindowConfig(batch_size=2, seq_len=16), align_by="alignment_key",
        inputs={"cycling": INPUTS, "hppc": ("current_a",)},
        targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)})
    plan = split.plan(config)
    batch = next(iter(plan.batches(input_valid=True)))
    assert isinstance(batch, AlignedBatch)
    valid = batch.input_valid
    assert valid is not None
    assert set(valid) == set(batch.protocols)
    for p in batch.protocols:
        assert valid[p].shape == batch.inputs[p].shape
        assert (batch.inputs[p][~valid[p]] == -2.0).all()
        lanes_without = ~batch.has_data[p]
        assert not valid[p][lanes_without].any()
    assert next(iter(plan.batches())).input_valid is None


def test_same_host_and_flight_give_the_same_input_valid(data: Path,
                                                        tmp_path: Path) -> None:
    with deployment(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "state",
                    tier_bytes=64 << 20, allowed_roots=(str(data.resolve()),)) as dep:
        cat = Catalog(dep.url)
        try:
            split = _split(cat, data)
            config = _config(split, input_valid=True)
            plan = split.plan(config)
            assert plan.transport() == "local"
            files = _Files(data)
            local = _passes(plan, transport="local")
            streamed = _passes(plan, transport="flight")
            assert len(local) == len(streamed) > 0
            for x, y in zip(local, streamed, strict=True):
                assert x.input_valid is not None
                assert y.input_valid is not None
                assert x.input_valid.numpy().tobytes() == y.input_valid.numpy().tobytes()
                assert x.inputs.numpy().tobytes() == y.inputs.numpy().tobytes()
                np.testing.assert_array_equal(x.input_valid.numpy(), reference(x, files, config))
            plain = next(iter(plan.batches(transport="local", input_valid=False)))
            assert plain.input_valid is None
            assert plain.inputs.numpy().tobytes() == local[0].inputs.numpy().tobytes()
        finally:
            cat.close()
