"""Plots, reprs and the loss mask, rendered (Agg) from a real plan: the real catalog and a
real Flight server over the synthetic dataset (which has null targets)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.sdk.deployment import deployment
from windpipe.sdk import Batch, Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")

CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=4, seq_len=64),
    inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a",)},
    targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
    scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),),
    transport="flight",
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("plots")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state") as dep:
        cat = Catalog(dep.url)
        ver = cat.register("demo", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.3, seed=69))
        plan = split.plan(CONFIG)
        batches = list(plan.batches(epoch=0))
        yield cat, split, plan, batches
        cat.close()


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png")
    data = out.getvalue()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return data


def test_target_valid_is_the_mask_of_a_finite_loss(env: Any) -> None:
    _cat, _split, _plan, batches = env
    nan_under_mask = 0
    for batch in batches:
        valid = batch.target_valid
        assert valid.dtype == torch.bool
        assert valid.shape == batch.mask.shape
        assert torch.equal(valid, batch.mask & torch.isfinite(batch.targets).all(-1))
        if torch.isnan(batch.targets[batch.mask]).any():
            nan_under_mask += 1
        pred = torch.zeros_like(batch.targets, requires_grad=True)
        loss = torch.nn.functional.mse_loss(pred[valid], batch.targets[valid])
        if valid.any():
            loss.backward()
            assert torch.isfinite(loss)
            assert pred.grad is not None
            assert torch.isfinite(pred.grad).all()
        assert batch.all_valid == bool(valid.all())
    assert nan_under_mask > 0, "the synthetic data has null targets the mask alone keeps"


def test_batch_plot_shades_padding_and_null_targets(env: Any) -> None:
    _cat, _split, _plan, batches = env
    lane_of: tuple[Batch, int] | None = None
    for batch in batches:
        bad = batch.mask & ~batch.target_valid
        lanes = bad.any(dim=1).nonzero().flatten().tolist()
        if lanes:
            lane_of = (batch, lanes[0])
            break
    assert lane_of is not None
    batch, lane = lane_of
    fig = batch.plot(lane=lane)
    ax_in, ax_out = fig.axes
    assert f"batch {batch.batch_idx}" in ax_in.get_title()
    assert f"lane {lane}" in ax_in.get_title()
    assert len(ax_in.get_lines()) == batch.inputs.shape[2]
    assert len(ax_out.get_lines()) == batch.targets.shape[2]
    labels = [t.get_text() for t in ax_out.get_legend().get_texts()]
    assert "null target (target_valid False)" in labels
    _png(fig)
    with pytest.raises(IndexError, match="lane must be in"):
        batch.plot(lane=batch.batch_size)


def test_split_plot_draws_one_bar_per_group_in_one_colour(env: Any) -> None:
    _cat, split, _plan, _batches = env
    fig = split.plot()
    ax_groups, ax_totals = fig.axes
    frame = split.index().frame
    keys = list(split.config.group_by)
    n_groups = frame.select(keys).unique().height
    assert len(ax_groups.patches) == n_groups  # a group is never in two splits
    totals = {t.get_text(): p.get_height()
              for t, p in zip(ax_totals.get_xticklabels(), ax_totals.patches, strict=True)}
    assert sum(totals.values()) == n_groups
    assert set(totals) == set(frame.get_column("split").unique().to_list())
    _png(fig)


def test_plan_plot_draws_every_window_and_batches_per_protocol(env: Any) -> None:
    _cat, _split, plan, batches = env
    fig = plan.plot()
    ax_windows, ax_protocols = fig.axes
    assert sum(p.get_height() for p in ax_protocols.patches) == len(batches)
    names = [t.get_text() for t in ax_protocols.get_xticklabels()]
    per_protocol = dict(zip(names, (p.get_height() for p in ax_protocols.patches),
                            strict=True))
    seen: dict[str, int] = {}
    for batch in batches:
        proto = batch.state.protocols[0]
        seen[proto] = seen.get(proto, 0) + 1
    assert {k: v for k, v in per_protocol.items() if v} == seen
    lanes = sum(sum(1 for o in b.state.window_offsets if o >= 0) for b in batches)
    assert f"{lanes} windows" in ax_windows.get_title()
    _png(fig)


def test_loader_stats_plot_has_the_pass_over_time(env: Any) -> None:
    _cat, _split, plan, batches = env
    loader = plan.loader(device="cpu", progress=False)
    assert sum(1 for _ in loader) == len(batches)
    stats = loader.stats
    assert stats is not None
    assert "last pass: " in repr(loader)
    assert "device=cpu" in repr(loader)
    assert len(stats.timeline) == len(batches)
    times = [t for t, _w, _n in stats.timeline]
    assert times == sorted(times)
    assert sum(n for _t, _w, n in stats.timeline) == stats.tokens
    fig = stats.plot()
    ax_tp, ax_wait = fig.axes
    assert len(ax_wait.get_lines()[0].get_xdata()) == len(batches)
    assert "batches on cpu" in ax_tp.get_title()
    _png(fig)


def test_rich_and_text_reprs(env: Any) -> None:
    cat, split, plan, batches = env
    batch = batches[0]
    html = batch._repr_html_()
    assert f"Batch {batch.batch_idx}" in html
    assert "target_valid True" in html
    assert "<table>" in html
    assert "Batch(idx=" in repr(batch)
    page = cat._repr_html_()
    assert "demo" in page
    assert cat.url in page
    assert plan.id in repr(plan)
    assert split.id in repr(split)


def test_plots_say_what_to_install_without_matplotlib(
    env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    _cat, _split, _plan, batches = env
    import sys  # noqa: PLC0415

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ModuleNotFoundError, match=r"windpipe\[plot\]"):
        batches[0].plot()


def _lane_with_null_input(batches: list[Any]) -> tuple[Batch, int]:
    for batch in batches:
        c_in = batch.inputs.shape[2]
        present = batch.input_has_channel()[:, None, :]  # (B, 1, C_in)
        null = (batch.inputs == -2.0) & batch.mask[:, :, None] & present
        hit = null.nonzero()
        if hit.shape[0]:
            lane, _step, channel = (int(x) for x in hit[0])
            assert channel < c_in
            return batch, lane
    raise AssertionError("the synthetic data has null inputs in real rows")


def test_batch_plot_marks_null_inputs_and_says_the_axes_are_scaled(env: Any) -> None:
    _cat, _split, plan, batches = env
    batch, lane = _lane_with_null_input(batches)
    fig = batch.plot(lane=lane, scaling=plan.config.scaling)
    ax_in, ax_out = fig.axes
    for line in ax_in.get_lines():  # a null input is a gap, never a spike to -2.0
        ys = [y for y in line.get_ydata() if y == y]  # NaN (a gap) is not equal to itself
        assert -2.0 not in ys
    marks = [c for c in ax_in.collections if c.get_label() == "null input (-2.0 in the batch)"]
    assert len(marks) == 1
    assert len(marks[0].get_offsets()) >= 1
    assert "model space (scaled)" in ax_in.get_ylabel()
    assert "model space (scaled)" in ax_out.get_ylabel()
    labels = [t.get_text() for t in ax_in.get_legend().get_texts()]
    assert "current_a (linear [-10, 10] -> [-1, 1])" in labels
    assert any(t.endswith("(unscaled)") for t in labels), labels
    assert "null input (-2.0 in the batch)" in labels
    plain = batch.plot(lane=lane)  # without the plan's scaling: no map named
    assert plain.axes[0].get_ylabel() == "inputs, model space"
    _png(fig)
    assert batch.has_channel[lane].any()


def test_split_plot_legend_colours_are_the_bars_colours(env: Any) -> None:
    _cat, split, _plan, _batches = env
    fig = split.plot()
    ax_groups, _totals = fig.axes
    legend = {t.get_text(): h.get_facecolor() for t, h in
              zip(ax_groups.get_legend().get_texts(),
                  ax_groups.get_legend().legend_handles, strict=True)}
    colours = {tuple(p.get_facecolor()) for p in ax_groups.patches}
    assert set(legend) == {"train", "val"}
    assert {tuple(c) for c in legend.values()} == colours


def test_split_plot_of_thousands_of_groups_is_one_bounded_figure() -> None:
    import polars as pl  # noqa: PLC0415

    from windpipe.sdk._plots import plot_split  # noqa: PLC0415

    n = 3000
    frame = pl.DataFrame({
        "set_id": ["s"] * n, "cell_id": [f"c{i // 30:03d}" for i in range(n)],
        "cidx": [i % 30 for i in range(n)],
        "split": ["val" if i % 5 == 0 else "train" for i in range(n)],
        "n_rows": [1000 + i % 7 for i in range(n)],
    })
    fig = plot_split(frame, group_by=("set_id", "cell_id", "cidx"), title="3000 groups")
    png = _png(fig)
    width, height = fig.get_size_inches()
    assert width <= 10.0
    assert height <= 10.0
    assert len(png) < 2_000_000
    ax_groups, ax_totals = fig.axes
    assert "3,000 groups" in ax_groups.get_title()
    assert len(ax_groups.collections) == 1  # one artist for every group
    totals = {t.get_text(): p.get_height()
              for t, p in zip(ax_totals.get_xticklabels(), ax_totals.patches, strict=True)}
    assert totals == {"train": 2400, "val": 600}
    handles = ax_groups.get_legend().legend_handles
    by_split = dict(zip([t.get_text() for t in ax_groups.get_legend().get_texts()],
                        [tuple(h.get_facecolor()) for h in handles], strict=True))
    bars = {t.get_text(): tuple(p.get_facecolor())
            for t, p in zip(ax_totals.get_xticklabels(), ax_totals.patches, strict=True)}
    assert by_split == bars
