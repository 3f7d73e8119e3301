"""Pictures for a notebook: a batch, a split, a plan, a loader pass, a split's statistics.

matplotlib is an optional extra (``pip install 'windpipe[plot]'``), imported only when
a plot is drawn, so training jobs never pay for it. Every function returns the
``Figure`` (a notebook shows it as the cell's value; a script calls ``savefig``) and
closes it in pyplot, so it is drawn once. The data goes in vectorized (one artist per
series, never one per window), so a plan of 100k windows draws in a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from windpipe.services.contract.extras import install_hint

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

    from windpipe.sdk._batch import Batch
    from windpipe.sdk._stats import LoaderStats
    from windpipe.services.contract.configs import ScalingSpec
    from windpipe.services.contract.stats import SplitStatsData
    from windpipe.services.planning.artifact import PlanArtifact

__all__ = ["plot_batch", "plot_loader_stats", "plot_plan", "plot_split", "plot_split_stats"]

_PAD_COLOR = "0.85"


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        msg = f"plots need matplotlib: {install_hint('plot')}"
        raise ModuleNotFoundError(msg, name="matplotlib") from exc
    return plt


def _figure(rows: int, cols: int = 1, *, height: float, width: float = 9.0,
            sharex: bool = False) -> tuple[Figure, np.ndarray]:
    plt = _pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), sharex=sharex,
                             squeeze=False)
    plt.close(fig)  # returned, not shown twice
    return fig, axes.reshape(-1)


def _shade(ax: Any, where: np.ndarray, *, label: str, color: str = _PAD_COLOR) -> None:
    """Shade the runs of True in ``where`` (time steps) across the axes' height."""
    if not where.any():
        return
    edges = np.flatnonzero(np.diff(np.concatenate(([0], where.astype(np.int8), [0]))))
    starts, stops = edges[0::2], edges[1::2]
    for i, (a, b) in enumerate(zip(starts.tolist(), stops.tolist(), strict=True)):
        ax.axvspan(a - 0.5, b - 0.5, color=color, zorder=0, label=label if i == 0 else None)


_NULL_INPUT = -2.0  # what a batch holds for a null, absent or padded input (SEMANTICS 5)
_LABELLED_GROUPS = 40  # split.plot(): a labelled bar per group up to this many
_MAX_FIGURE_HEIGHT = 10.0  # inches


def _channel_label(name: str, scaling: Sequence[ScalingSpec]) -> str:
    spec = next((s for s in scaling if s.column == name), None)
    if spec is None:
        return f"{name} (unscaled)" if scaling else name
    if spec.transform == "standard":
        return f"{name} (standard: mean {spec.mean:.4g}, std {spec.std:.4g})"
    return (f"{name} ({spec.transform} [{spec.input_min:g}, {spec.input_max:g}] -> "
            f"[{spec.output_min:g}, {spec.output_max:g}])")


def _present(batch: Batch, lane: int, names: Sequence[str]) -> list[bool]:
    where = {c: i for i, c in enumerate(batch.channels)}
    has = batch.has_channel[lane].detach().cpu().numpy().astype(bool)
    return [bool(has[where[n]]) if n in where and where[n] < has.shape[0] else True
            for n in names]


def plot_batch(batch: Batch, *, lane: int = 0, scaling: Sequence[ScalingSpec] = ()) -> Figure:
    """Lane ``lane``'s inputs (one line per channel) and targets in model space (what the
    model sees: after ``scaling``, which the legend names per channel), and where the
    loss must not look: padding (mask False) shaded grey, null targets (masked by
    ``target_valid``) shaded red. A null input is ``-2.0`` in the batch: drawn as a gap
    with a mark under it, not as a spike; a channel the lane's stream lacks is left out
    and named in the legend."""
    if not 0 <= lane < batch.batch_size:
        msg = f"lane must be in [0, {batch.batch_size}), got {lane}"
        raise IndexError(msg)
    state = batch.state
    inputs = batch.inputs[lane].detach().cpu().float().numpy()
    targets = batch.targets[lane].detach().cpu().float().numpy()
    mask = batch.mask[lane].detach().cpu().numpy().astype(bool)
    valid = batch.target_valid[lane].detach().cpu().numpy().astype(bool)
    fig, (ax_in, ax_out) = _figure(2, height=5.5, sharex=True)
    steps = np.arange(inputs.shape[0])
    in_names = state.input_columns or tuple(f"in{c}" for c in range(inputs.shape[1]))
    out_names = state.target_columns or tuple(f"out{c}" for c in range(targets.shape[1]))
    in_names, out_names = in_names[: inputs.shape[1]], out_names[: targets.shape[1]]
    real = np.concatenate(([False], mask[:-1])) | mask  # an input row with a real row
    marked = False
    for c, (name, present) in enumerate(zip(in_names, _present(batch, lane, in_names),
                                            strict=True)):
        if not present:
            ax_in.plot([], [], lw=0, label=f"{name}: absent in this stream")
            continue
        null = inputs[:, c] == _NULL_INPUT
        line = ax_in.plot(steps, np.where(null, np.nan, inputs[:, c]), lw=1.0,
                          label=_channel_label(name, scaling))[0]
        shown = null & real
        if shown.any():  # marks along the bottom edge, in the channel's colour
            ax_in.scatter(steps[shown], np.full(int(shown.sum()), 0.03), marker="x", s=16,
                          color=line.get_color(), transform=ax_in.get_xaxis_transform(),
                          label=None if marked else "null input (-2.0 in the batch)")
            marked = True
    for c, (name, present) in enumerate(zip(out_names, _present(batch, lane, out_names),
                                            strict=True)):
        label = _channel_label(name, scaling) if present else f"{name}: absent in this stream"
        ax_out.plot(steps, targets[:, c], lw=1.0, label=label)
    for ax in (ax_in, ax_out):
        _shade(ax, ~mask, label="padding (mask False)")
    _shade(ax_out, mask & ~valid, label="null target (target_valid False)",
           color="tab:red")
    protocol = state.protocols[lane] if lane < len(state.protocols) else "?"
    offset = state.window_offsets[lane] if lane < len(state.window_offsets) else -1
    ax_in.set_title(f"batch {state.batch_idx} [{state.split}], lane {lane}: {protocol}, "
                    f"source row {offset}")
    space = "model space (scaled)" if scaling else "model space"
    ax_in.set_ylabel(f"inputs, {space}")
    ax_out.set_ylabel(f"targets (next row),\n{space}")
    ax_out.set_xlabel("time step")
    for ax in (ax_in, ax_out):
        ax.legend(loc="upper right", fontsize="x-small")
    fig.tight_layout()
    return fig


def _split_legend(ax: Any, colors: dict[str, str]) -> None:
    from matplotlib.patches import Patch  # noqa: PLC0415

    ax.legend(handles=[Patch(color=c, label=s) for s, c in colors.items()],
              loc="lower right", fontsize="small")


def plot_split(frame: pl.DataFrame, *, group_by: Sequence[str], title: str) -> Figure:
    """Groups per split over the grouping columns, each group's length the rows of the
    group (manifest rows when the index has no row counts), its colour its split (a
    group never has two colours: no leakage). Up to 40 groups one labelled bar each;
    more (thousands) one thin bar each in key order, in a figure of bounded size."""
    import polars as pl  # noqa: PLC0415

    keys = [c for c in group_by if c in frame.columns] or ["split"]
    weight = "n_rows" if "n_rows" in frame.columns else None
    agg = pl.col(weight).sum() if weight else pl.len()
    groups = (frame.group_by([*keys, "split"]).agg(agg.alias("rows"))
              .sort([*keys, "split"]))
    splits = sorted(groups.get_column("split").unique().to_list())
    colors = {s: f"C{i}" for i, s in enumerate(splits)}
    n = groups.height
    labelled = n <= _LABELLED_GROUPS
    height = min(max(2.5, 0.22 * n + 1.2), _MAX_FIGURE_HEIGHT) if labelled else 4.5
    fig, (ax_groups, ax_totals) = _figure(1, 2, height=height, width=10.0)
    rows = groups.get_column("rows").to_numpy()
    colour = [colors[s] for s in groups.get_column("split").to_list()]
    unit = "rows" if weight else "manifest rows"
    if labelled:
        ys = np.arange(n)
        labels = [" / ".join(str(v) for v in row) for row in groups.select(keys).iter_rows()]
        ax_groups.barh(ys, rows, color=colour)
        ax_groups.set_yticks(ys, labels, fontsize="small")
        ax_groups.invert_yaxis()
        ax_groups.set_xlabel(unit)
    else:  # one artist for every group, however many
        xs = np.arange(n)
        ax_groups.vlines(xs, 0, rows, colors=colour, lw=max(0.3, min(2.0, 400 / n)))
        ax_groups.set_xlim(-0.5, n - 0.5)
        ax_groups.set_ylim(0, float(rows.max()) * 1.05 if n else 1.0)
        ax_groups.set_xlabel(f"group, in {', '.join(keys)} order")
        ax_groups.set_ylabel(unit)
    ax_groups.set_title(f"{n:,} groups by {', '.join(keys)}")
    counts = groups.group_by("split").agg(pl.len().alias("groups"),
                                          pl.col("rows").sum()).sort("split")
    ax_totals.bar(counts.get_column("split").to_list(), counts.get_column("groups").to_list(),
                  color=[colors[s] for s in counts.get_column("split").to_list()])
    ax_totals.set_ylabel("groups")
    ax_totals.set_title("groups per split")
    _split_legend(ax_groups, colors)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_plan(artifact: PlanArtifact, *, epoch: int = 0, max_streams: int = 60) -> Figure:
    """Windows over streams (every lane of ``epoch`` as a segment on its stream, coloured
    by batch; past the stream's end, red: padding), and batches per protocol."""
    streams = artifact.streams
    schedule = artifact.epoch_schedule(epoch)
    ptr = np.asarray(schedule.batch_lane_ptr)
    n_batches = len(ptr) - 1
    per_lane = np.diff(ptr)
    lane_batch = np.repeat(np.arange(n_batches), per_lane)
    lane_len = np.repeat(np.asarray(schedule.batch_seq_len, dtype=np.int64), per_lane)
    lane_stream = np.asarray(schedule.lane_stream)
    lane_offset = np.asarray(schedule.lane_offset)
    real = lane_stream >= 0
    shown = real & (lane_stream < max_streams)
    n_shown = min(streams.count, max_streams)
    fig, (ax_w, ax_p) = _figure(1, 2, height=max(3.0, 0.18 * n_shown + 1.5), width=11.0)
    n_rows = np.asarray(streams.n_rows)[:n_shown]
    ax_w.hlines(np.arange(n_shown), 0, n_rows, colors=_PAD_COLOR, lw=6, label="stream rows")
    ys = lane_stream[shown]
    start = lane_offset[shown]
    stop = start + lane_len[shown] + 1  # the extra target row
    import matplotlib as mpl  # noqa: PLC0415

    cmap = mpl.colormaps["viridis"]
    colour = cmap(lane_batch[shown] / max(n_batches - 1, 1))
    ax_w.hlines(ys, start, np.minimum(stop, np.asarray(streams.n_rows)[ys]), colors=colour,
                lw=3)
    over = stop > np.asarray(streams.n_rows)[ys]
    if over.any():
        ax_w.hlines(ys[over], np.asarray(streams.n_rows)[ys[over]], stop[over],
                    colors="tab:red", lw=3, label="padding")
    ax_w.set_yticks(np.arange(n_shown),
                    [" / ".join(str(v) for v in k) for k in streams.group_keys[:n_shown]],
                    fontsize="x-small")
    ax_w.invert_yaxis()
    ax_w.set_xlabel("row in stream")
    more = f" (first {n_shown} of {streams.count})" if streams.count > n_shown else ""
    ax_w.set_title(f"epoch {epoch}: {int(real.sum())} windows over streams{more}")
    ax_w.legend(loc="lower right", fontsize="small")
    codes = np.asarray(schedule.batch_protocol, dtype=np.int64)
    names = list(streams.protocols)
    counts = np.bincount(codes, minlength=len(names)) if codes.size else np.zeros(len(names))
    ax_p.bar(names, counts, color=[f"C{i}" for i in range(len(names))])
    ax_p.set_ylabel("batches")
    ax_p.set_title(f"{n_batches} batches per protocol ({artifact.spec.strategy})")
    fig.suptitle(f"plan {artifact.plan_id}")
    fig.tight_layout()
    return fig


def plot_loader_stats(stats: LoaderStats) -> Figure:
    """Throughput (tokens/s over a sliding window of batches) and the consumer's wait
    for each batch over the pass's time: waits high and throughput low mean input-bound."""
    timeline = np.asarray(stats.timeline, dtype=np.float64).reshape(-1, 3)
    fig, (ax_tp, ax_wait) = _figure(2, height=5.0, sharex=True)
    if timeline.shape[0]:
        t, wait, tokens = timeline[:, 0], timeline[:, 1], timeline[:, 2]
        k = max(1, min(20, t.shape[0] // 10))
        cum_t, cum_tok = np.concatenate(([0.0], t)), np.concatenate(([0.0], np.cumsum(tokens)))
        span = np.maximum(cum_t[k:] - cum_t[:-k], 1e-9)
        ax_tp.plot(t[k - 1:], (cum_tok[k:] - cum_tok[:-k]) / span / 1e6, lw=1.2)
        ax_wait.plot(t, wait * 1e3, lw=0.8, color="tab:orange")
    ax_tp.set_ylabel("M tokens/s")
    ax_tp.set_title(f"{stats.batches} batches on {stats.device}: {stats.verdict}",
                    fontsize="small", wrap=True)
    ax_wait.set_ylabel("consumer wait (ms)")
    ax_wait.set_xlabel("seconds into the pass")
    fig.tight_layout()
    return fig


def plot_split_stats(stats: SplitStatsData, *, columns: Sequence[str] | None = None) -> Figure:
    """One histogram per protocol and column (the stored fixed bins over ``[min, max]``),
    with the mean, the mean +- std and the p1 / p99 quantiles marked."""
    entries = [e for e in stats.stats
               if e.histogram is not None and (columns is None or e.column in columns)]
    n_cols = min(3, max(1, len(entries)))
    n_rows = max(1, -(-len(entries) // n_cols))
    fig, axes = _figure(n_rows, n_cols, height=2.4 * n_rows + 0.6, width=3.6 * n_cols)
    for ax, e in zip(axes, entries, strict=False):
        hist = e.histogram
        assert hist is not None
        edges = np.asarray(hist.edges, dtype=np.float64)
        ax.stairs(np.asarray(hist.counts, dtype=np.float64), edges, fill=True, alpha=0.6)
        for x, style, label in ((e.mean, "-", "mean"), (e.p1, ":", "p1 / p99"),
                                (e.p99, ":", None)):
            if x is not None:
                ax.axvline(x, color="tab:red", ls=style, lw=1.0, label=label)
        if e.mean is not None and e.std is not None:
            ax.axvspan(e.mean - e.std, e.mean + e.std, color="tab:red", alpha=0.08,
                       label="mean +- std")
        ax.set_title(f"{e.protocol}: {e.column}", fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in axes[len(entries):]:
        ax.set_visible(False)
    if entries:
        axes[0].legend(fontsize="x-small")
    fig.suptitle(f"{stats.side} side of {stats.split_id}: {stats.rows:,} rows", fontsize="small")
    fig.tight_layout()
    return fig
