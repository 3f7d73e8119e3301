"""The training loop against a real catalog and Flight server over the synthetic dataset
(null targets, HPPC on some cycles only): ``len()`` of loaders and datasets is the pass,
masked losses stay finite where the obvious loss is NaN, one config gives train and
validation, the plan report warns of extreme padding, and the errors a notebook meets
(pin_memory without CUDA) are ours."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tests.sdk.deployment import deployment
from windpipe.sdk import (
    AlignedBatch,
    Batch,
    Catalog,
    InvalidConfig,
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.sdk.losses import masked_mae, masked_mse

CONFIG = LoaderConfig(
    default_window=WindowConfig(batch_size=4, seq_len=64), strategy="shuffled",
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
    transport="flight",
)
ALIGNED = LoaderConfig(
    align_by="alignment_key", strategy="shuffled",
    default_window=WindowConfig(batch_size=4, seq_len=64),
    window_by_protocol={"hppc": WindowConfig(batch_size=4, seq_len=16)},
    inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a",)},
    targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)}, transport="flight",
)


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("training")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state") as dep:
        cat = Catalog(dep.url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the synthetic data's nulls (DataWarning)
            ver = cat.register("demo", root=synth_dataset.path.resolve().as_uri(),
                               manifest="manifest.parquet")
        yield ver.split(ValidationConfig.sample(fraction=0.3, seed=69))
        cat.close()


def _count(it: Any) -> int:
    return sum(1 for _ in it)


@pytest.mark.parametrize("strategy", ["sequential", "shuffled"])
def test_len_is_the_batch_count_of_the_pass(split: Any, strategy: str) -> None:
    plan = split.plan(LoaderConfig.model_validate({**CONFIG.model_dump(), "strategy": strategy}))
    for epoch in range(3):
        for rank, world in ((0, 1), (0, 2), (1, 2)):
            n = _count(plan.batches(epoch, rank, world))
            assert n > 0
            assert plan.pass_length(epoch, rank=rank, world_size=world) == n
            loader = plan.loader(device="cpu", epoch=epoch, rank=rank, world_size=world,
                                 progress=False)
            assert len(loader) == n
            assert _count(loader) == n
            ds = plan.torch_dataset(epoch, rank=rank, world_size=world)
            assert len(ds) == n
            assert _count(ds) == n
    n = plan.pass_length(1)
    assert len(plan.loader(device="cpu", epoch=1, start_batch=3, progress=False)) == n - 3
    ds = plan.torch_dataset(0)
    ds.load_state_dict({"plan_id": plan.id, "epoch": 1, "batch": 2})
    assert len(ds) == n - 2  # the rest of the resumed epoch
    assert _count(ds) == n - 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when a dataset yields more than len()
        warnings.simplefilter("ignore", ResourceWarning)  # another test's garbage, collected
        loader = plan.dataloader(epoch=1)
        assert len(loader) == n
        assert _count(loader) == n


def test_len_of_an_aligned_plan_counts_aligned_batches(split: Any) -> None:
    plan = split.plan(ALIGNED)
    batches = list(plan.batches(epoch=1))
    assert all(isinstance(b, AlignedBatch) for b in batches)
    assert len(plan.loader(device="cpu", epoch=1, progress=False)) == len(batches)
    assert len(plan.torch_dataset(1)) == len(batches)


def test_a_progress_bar_has_the_total(split: Any, capsys: pytest.CaptureFixture[str]) -> None:
    plan = split.plan(CONFIG)
    n = plan.pass_length(0)
    capsys.readouterr()
    assert _count(plan.loader(device="cpu", progress=True)) == n
    err = capsys.readouterr().err
    assert f"{n}/{n}" in err, err  # tqdm knows the total: a bar and an ETA, not a counter


def test_one_config_gives_train_and_validation(split: Any) -> None:
    train_plan, val_plan = split.plans(CONFIG)
    assert train_plan.id == split.plan(CONFIG).id
    assert val_plan.config.split == "val"
    assert val_plan.config.strategy == "sequential"
    for field in ("inputs", "targets", "scaling", "default_window"):
        assert getattr(val_plan.config, field) == getattr(CONFIG, field)
    train, val = split.loaders(CONFIG, epoch=2, device="cpu", progress=False)
    train_batches, val_batches = list(train), list(val)
    assert len(train) == len(train_batches) > 0
    assert len(val) == len(val_batches) > 0
    assert {b.state.split for b in train_batches} == {"train"}
    assert {b.state.split for b in val_batches} == {"val"}
    again = list(split.loaders(CONFIG, epoch=5, device="cpu", progress=False)[1])
    assert [b.batch_idx for b in again] == [b.batch_idx for b in val_batches]
    for a, b in zip(again, val_batches, strict=True):  # validation: the same every epoch
        assert torch.equal(a.inputs, b.inputs)
        assert torch.equal(a.mask, b.mask)
    train_ids = {k for b in train_batches for k in b.state.group_keys}
    assert not train_ids & {k for b in val_batches for k in b.state.group_keys}


def test_masked_losses_stay_finite_where_the_obvious_loss_is_nan(split: Any) -> None:
    naive_nan = checked = 0
    for batch in split.plan(CONFIG).batches(epoch=0):
        assert isinstance(batch, Batch)
        valid = batch.target_valid
        pred = torch.zeros_like(batch.targets, requires_grad=True)
        loss = batch.masked_mse(pred)
        if not valid.any():
            assert loss is None
            continue
        assert loss is not None
        loss.backward()
        assert torch.isfinite(loss)
        assert pred.grad is not None
        assert torch.isfinite(pred.grad).all()
        expected = ((batch.targets[valid] - 0.0) ** 2).mean()
        assert torch.allclose(loss.detach(), expected)
        mae = masked_mae(pred.detach(), batch)
        assert mae is not None
        assert torch.allclose(mae, batch.targets[valid].abs().mean())
        total = batch.masked_mse(pred.detach(), reduction="sum")
        assert total is not None
        assert torch.allclose(total, (batch.targets[valid] ** 2).sum())
        naive = torch.zeros_like(batch.targets, requires_grad=True)
        ((naive - batch.targets) ** 2)[valid].mean().backward()
        assert naive.grad is not None
        naive_nan += int(not torch.isfinite(naive.grad).all())
        checked += 1
    assert checked > 0
    assert naive_nan > 0  # the trap is real: arithmetic first gives NaN gradients


def test_the_losses_are_public_as_windpipe_losses() -> None:
    import windpipe.losses  # noqa: PLC0415 - the documented import, checked as such

    assert windpipe.losses.masked_mse is masked_mse
    assert windpipe.losses.masked_mae is masked_mae


def test_an_empty_selection_is_none_and_a_wrong_shape_is_said(split: Any) -> None:
    batch = next(iter(split.plan(CONFIG).batches(epoch=0)))
    assert isinstance(batch, Batch)
    empty = batch.with_tensors(inputs=batch.inputs, targets=batch.targets,
                               mask=torch.zeros_like(batch.mask))
    assert empty.masked_mse(torch.zeros_like(batch.targets)) is None
    assert masked_mse(torch.zeros_like(batch.targets), empty) is None
    with pytest.raises(ValueError, match=r"pred has shape \(4, 64\), the targets \(4, 64, 1\)"):
        batch.masked_mse(torch.zeros(batch.targets.shape[:2]))


def test_aligned_masked_loss_sums_the_protocols_that_have_data(split: Any) -> None:
    partial = 0
    for batch in split.plan(ALIGNED).batches(epoch=0):
        assert isinstance(batch, AlignedBatch)
        pred = {p: torch.zeros_like(batch.targets[p], requires_grad=True)
                for p in batch.protocols}
        loss = batch.masked_mse(pred)
        parts = [batch[p].masked_mse(pred[p]) for p in batch.protocols]
        have = [x for x in parts if x is not None]
        if not have:
            assert loss is None
            continue
        assert loss is not None
        assert torch.allclose(loss, sum(have[1:], have[0]))
        loss.backward()
        for p in batch.protocols:
            grad = pred[p].grad
            assert grad is None or torch.isfinite(grad).all()
        partial += int(len(have) < len(parts) or not bool(batch.has_data["hppc"].all()))
    assert partial > 0  # keys without HPPC data: that protocol adds nothing, no NaN
    with pytest.raises(KeyError, match="does not have"):
        batch.masked_mse({"eis": torch.zeros(1)})


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only message")
def test_pin_memory_without_cuda_is_explained(split: Any) -> None:
    plan = split.plan(CONFIG)
    batch = next(iter(plan.batches(epoch=0)))
    with pytest.raises(InvalidConfig, match="pin_memory needs CUDA: page-locked memory"):
        batch.pin_memory()
    aligned = next(iter(split.plan(ALIGNED).batches(epoch=0)))
    with pytest.raises(InvalidConfig, match="pin_memory needs CUDA"):
        aligned.pin_memory()
    with pytest.raises(InvalidConfig, match="leave pin_memory unset"):
        plan.loader(device="cpu", pin_memory=True)


def test_loader_stats_repr_is_the_readable_table(split: Any) -> None:
    loader = split.plan(CONFIG).loader(device="cpu", progress=False)
    _count(loader)
    stats = loader.stats
    assert stats is not None
    text = repr(stats)
    assert text == str(stats)
    assert text.startswith("LoaderStats\n")
    assert "verdict" in text
    assert "timeline" not in text  # not the dataclass's raw field dump


def test_the_report_warns_of_extreme_padding(split: Any) -> None:
    padded = split.plan(LoaderConfig(
        default_window=WindowConfig(batch_size=4, seq_len=4096),
        inputs={"hppc": ("current_a",)}, targets={"hppc": ("voltage_v",)}))
    report = padded.report()
    assert len(report.warnings) == 1
    warning = report.warnings[0]
    assert warning.type == "padding"
    assert warning.protocol == "hppc"
    assert warning.share is not None
    assert warning.share > 0.5
    assert warning.share == pytest.approx(1 - report.real_tokens / report.tokens, abs=1e-4)
    assert "seq_len" in warning.message
    shown = rf"\n  warning +hppc: {warning.share:.0%} of the batches' tokens are padding"
    assert re.search(shown, repr(report)), repr(report)
    assert report.raw["warnings"][0]["type"] == "padding"
    plain = split.plan(CONFIG).report()
    assert plain.warnings == []
    assert "warnings" not in plain.raw  # nothing to say: the key is left out
