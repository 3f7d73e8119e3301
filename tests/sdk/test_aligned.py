"""Aligned multi-protocol batches (SEMANTICS section 9) end to end: a real catalog and
Flight server stream ``align_by="alignment_key"`` plans, and every value, mask, flag and
provenance field equals the plain-loop reference read straight from the files
(``tests/reference/aligned_batches_ref.py``), over strategies, epochs, ranks,
resumption, both transports, and a raw pyarrow client decoding the wire."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import polars as pl
import pyarrow.flight as fl
import pytest
import torch

import windpipe.sdk as sdk
from tests.reference.aligned_batches_ref import (
    RefAlignedBatch,
    RefSource,
    load_sources,
    ref_stream_list,
    reference_aligned_batches,
)
from tests.reference.aligned_ref import reference_aligned_rank
from tests.sdk.deployment import deployment
from windpipe.services.contract.configs import (
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.planning.aligned import aligned_rank_batches, aligned_schedule
from windpipe.services.planning.streams import build_streams
from windpipe.services.synth import write_synthetic_dataset

LACKING = "cell_002"  # the last of three cells has no temperature sensor
SPLIT = ValidationConfig.sample(fraction=0.25, seed=1)
# cycling: voltage is input and target (read once); hppc: temperature is a *target*, so
# the lacking cell's hppc lanes have mask False throughout; eis: log1p-scaled frequency
IO_IN = {"cycling": ("current_a", "temperature_c", "voltage_v"),
         "eis": ("freq_hz", "z_real_ohm"),
         "hppc": ("current_a", "soc_pct")}
IO_OUT = {"cycling": ("voltage_v",), "eis": ("z_imag_ohm",),
          "hppc": ("voltage_v", "temperature_c")}
SCALING = (
    ScalingSpec(column="current_a", input_min=-5.0, input_max=5.0),
    ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0),
    ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.3),
    ScalingSpec(column="soc_pct", input_min=0.0, input_max=100.0, clip=True),
    ScalingSpec(column="freq_hz", input_min=0.0, input_max=1e4, transform="log1p"),
    ScalingSpec(column="z_real_ohm", input_min=0.0, input_max=0.2),
)
WINDOWS: dict[str, WindowConfig] = {
    "hppc": WindowConfig(batch_size=4, seq_len=20, drop_incomplete=True),
    "eis": WindowConfig(batch_size=4, seq_len=8),
}
BASE = LoaderConfig(
    align_by="alignment_key", inputs=IO_IN, targets=IO_OUT, scaling=SCALING,
    default_window=WindowConfig(batch_size=4, seq_len=32), window_by_protocol=WINDOWS,
)
CONFIGS: dict[str, LoaderConfig] = {
    "sequential": BASE.model_copy(update={"protocol_order": ("cycling", "hppc", "eis")}),
    "shuffled": BASE.model_copy(update={
        "strategy": "shuffled", "seed": 11, "protocol_order": ("hppc", "eis", "cycling")}),
    # no protocol_order: ``inputs`` is given in sorted order, so "sorted names" and
    # "the order of inputs" (both readings of section 9) agree
    "shuffled-drop": BASE.model_copy(update={
        "strategy": "shuffled", "seed": 3, "drop_incomplete_batches": True}),
}
EPOCHS = {"sequential": (0,), "shuffled": (0, 1), "shuffled-drop": (1,)}


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-aligned")
    data = write_synthetic_dataset(tmp / "data", cells=3, cycles=4, rows_per_cycle=120,
                                   seed=5, zarr_fraction=0.4, missing_channel="temperature_c",
                                   missing_cells=1, hppc_every=2, eis_every=3)
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", tier_bytes=64 << 20) as d:
        cat = sdk.Catalog(d.url)
        ver = cat.register("aligned", root=data.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        split = ver.split(SPLIT)
        frame = split.index().frame
        members = set(frame.filter(pl.col("split") == "train")
                      .get_column("manifest_row_id").to_list())
        d.extra.update(cat=cat, ver=ver, split=split, frame=frame, root=data.path,
                       sources=load_sources(data.path, members, BASE), plans={})
        yield d
        cat.close()


def _plan(dep: Any, name: str, **update: Any) -> Any:
    key = (name, tuple(sorted(update.items())))
    if key not in dep.extra["plans"]:
        config = CONFIGS[name].model_copy(update=update) if update else CONFIGS[name]
        dep.extra["plans"][key] = dep.extra["split"].plan(config)
    return dep.extra["plans"][key]


def _reference(dep: Any, config: LoaderConfig, epoch: int, *, rank: int = 0,
               world_size: int = 1) -> list[RefAlignedBatch]:
    return reference_aligned_batches(dep.extra["sources"], config, epoch, rank=rank,
                                     world_size=world_size)


def _segments(state: Any) -> list[tuple[Any, ...]]:
    return sorted((s.lane, s.path, s.row_start, s.row_count, s.window_row_start,
                   s.window_row_count) for s in state.segments)


def assert_aligned_equal(got: Any, want: RefAlignedBatch, *, split: str = "train") -> None:
    """One ``windpipe.sdk.AlignedBatch`` equals its reference batch, protocol by protocol."""
    where = f"batch {want.batch_idx}"
    assert isinstance(got, sdk.AlignedBatch)
    assert got.protocols == want.protocols
    assert got.batch_idx == want.batch_idx
    assert got.alignment_keys == want.keys, where
    assert got.batch_size == len(want.keys)
    all_valid = True
    for p, part in want.parts.items():
        at = f"{p} of {where}"
        assert got[p] is got.parts[p]
        assert got.parts[p].channels == part.channels, at
        assert got.inputs[p].dtype == got.targets[p].dtype == torch.float32
        assert got.mask[p].dtype == got.has_channel[p].dtype == got.has_data[p].dtype == torch.bool
        np.testing.assert_array_equal(got.mask[p].numpy(), part.mask, err_msg=f"mask, {at}")
        np.testing.assert_array_equal(got.has_channel[p].numpy(), part.has_channel,
                                      err_msg=f"has_channel, {at}")
        np.testing.assert_array_equal(got.has_data[p].numpy(), part.has_data,
                                      err_msg=f"has_data, {at}")
        np.testing.assert_allclose(got.inputs[p].numpy(), part.inputs, rtol=2e-6, atol=1e-6,
                                   err_msg=f"inputs, {at}")
        np.testing.assert_allclose(got.targets[p].numpy(), part.targets, rtol=2e-6, atol=1e-6,
                                   err_msg=f"targets, {at}")
        valid = part.mask & np.isfinite(part.targets).all(axis=-1)
        np.testing.assert_array_equal(got.target_valid[p].numpy(), valid, err_msg=at)
        all_valid &= bool(valid.all())
        st = got.state[p]
        assert st.split == split
        assert st.batch_idx == want.batch_idx
        assert st.protocols == part.protocols, at
        assert st.window_offsets == part.window_offsets, at
        assert st.manifest_row_ids == part.manifest_row_ids, at
        assert st.manifest_paths == part.manifest_paths, at
        assert st.group_keys == part.group_keys, at
        assert st.alignment_keys == part.alignment_keys == want.keys, at
        assert _segments(st) == sorted(part.segments), at
        assert (st.stateful_group_idx, st.stateful_step_idx, st.stateful_steps) == (
            want.group, want.step, want.steps), at
    assert got.all_valid == all_valid, where


def assert_pass_equal(got: Iterable[Any], want: list[RefAlignedBatch]) -> None:
    got = list(got)
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        assert_aligned_equal(g, w)


def _bytes(batch: Any) -> tuple[Any, ...]:
    """Everything of an aligned batch, as bytes and plain values."""
    parts = [(p, batch.inputs[p].numpy().tobytes(), batch.targets[p].numpy().tobytes(),
              batch.mask[p].numpy().tobytes(), batch.has_channel[p].numpy().tobytes(),
              batch.has_data[p].numpy().tobytes(), batch.state[p]) for p in batch.protocols]
    return (*parts, batch.batch_idx, batch.alignment_keys)


# -- the reference itself: the fixture exercises what section 9 is about --------------


def test_the_fixture_has_keys_without_data_and_a_lacking_cell(dep: Any) -> None:
    sources: list[RefSource] = dep.extra["sources"]
    keys = {s.alignment_key for s in sources}
    for p in ("hppc", "eis"):
        assert {s.alignment_key for s in sources if s.protocol == p} < keys
    assert any(s.alignment_key[1] == LACKING for s in sources)
    assert all(("temperature_c" in s.columns) == (s.alignment_key[1] != LACKING)
               for s in sources if s.protocol != "eis")
    assert any(len(s.pieces) > 1 for s in sources)
    assert any(p.path.endswith(".zarr") for s in sources for p in s.pieces)
    batches = _reference(dep, CONFIGS["sequential"], 0)
    hppc = [b.parts["hppc"] for b in batches]
    assert any(not part.has_data.all() for part in hppc)
    assert any(-1 in part.manifest_row_ids for part in hppc)
    lacking = [part for part in hppc for b, key in enumerate(part.alignment_keys)
               if key[1] == LACKING and part.has_data[b]]
    assert lacking  # its hppc lanes lack a target column: mask False throughout
    assert all(not part.mask[b].any() for part in lacking
               for b, key in enumerate(part.alignment_keys) if key[1] == LACKING)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_reference_schedule_matches_the_planning_core(dep: Any, name: str,
                                                      world_size: int) -> None:
    """The streams read from the files equal the planning core's streams of the catalog's
    split index, and the reference's keys, lanes, offsets and steps equal
    ``windpipe.services.planning.aligned`` (validates the reference, independent of the new API)."""
    config = CONFIGS[name]
    frame = dep.extra["frame"]
    segments = (frame.select("manifest_row_id", "segment_paths", "segment_rows")
                .explode(["segment_paths", "segment_rows"])
                .with_columns(pl.int_range(pl.len()).over("manifest_row_id").alias("ordinal"))
                .rename({"segment_paths": "path", "segment_rows": "row_count"}))
    streams = build_streams(frame, segments, split=config.split,
                            protocols=config.ordered_protocols(), group_key=config.group_key,
                            alignment_key=config.alignment_key)
    sources: list[RefSource] = dep.extra["sources"]
    assert [tuple(k) for k in streams.group_keys] == [s.group_key for s in sources]
    assert streams.n_rows.tolist() == [s.n_rows for s in sources]
    assert list(streams.piece_path) == [p.path for s in sources for p in s.pieces]
    refs = ref_stream_list(sources)
    for epoch in (0, 1):
        schedule = aligned_schedule(streams, config, epoch)
        for rank in range(world_size):
            want = reference_aligned_rank(refs, config, epoch, rank=rank, world_size=world_size)
            mine = _reference(dep, config, epoch, rank=rank, world_size=world_size)
            got = aligned_rank_batches(
                schedule, rank=rank, world_size=world_size,
                drop_incomplete_distributed=config.drop_incomplete_distributed).tolist()
            assert len(got) == len(want) == len(mine)
            for g, ref, full in zip(got, want, mine, strict=True):
                lo, hi = int(schedule.batch_lane_ptr[g]), int(schedule.batch_lane_ptr[g + 1])
                keys = tuple(schedule.keys[k] for k in schedule.lane_key[lo:hi])
                assert keys == ref.keys == full.keys
                assert full.global_batch == g
                assert (int(schedule.batch_step[g]), int(schedule.batch_steps[g])) == (
                    ref.step, ref.steps) == (full.step, full.steps)
                assert int(schedule.batch_group[g]) == full.group
                has = schedule.has_data(g)
                for c, p in enumerate(schedule.protocols):
                    offsets = schedule.lane_offset[c, lo:hi].tolist()
                    assert offsets == [o for _, o in ref.lanes[p]]
                    assert offsets == list(full.parts[p].window_offsets)
                    assert has[c].tolist() == full.parts[p].has_data.tolist()


# -- the SDK against the reference ----------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_batch_equals_the_reference(dep: Any, name: str) -> None:
    plan = _plan(dep, name)
    for epoch in EPOCHS[name]:
        want = _reference(dep, CONFIGS[name], epoch)
        assert len(want) > 0
        assert_pass_equal(plan.batches(epoch=epoch, transport="flight"), want)
    if CONFIGS[name].strategy == "shuffled" and len(EPOCHS[name]) > 1:
        a, b = (_reference(dep, CONFIGS[name], e) for e in EPOCHS[name])
        assert [x.keys for x in a] != [x.keys for x in b]  # epochs reshuffle the keys


@pytest.mark.parametrize("trim", [True, False])
def test_each_rank_of_two_equals_the_reference(dep: Any, trim: bool) -> None:
    plan = _plan(dep, "shuffled", drop_incomplete_distributed=trim)
    config = plan.config
    passes = []
    for rank in range(2):
        want = _reference(dep, config, 1, rank=rank, world_size=2)
        assert_pass_equal(plan.batches(epoch=1, rank=rank, world_size=2, transport="flight"),
                          want)
        passes.append(want)
    if trim:
        assert len(passes[0]) == len(passes[1])
    else:  # every group once, on one rank, its steps consecutive
        full = _reference(dep, config, 1)
        assert sorted(b.global_batch for p in passes for b in p) == list(range(len(full)))


def test_drop_incomplete_batches_leaves_only_full_groups(dep: Any) -> None:
    plan = _plan(dep, "shuffled-drop")
    got = list(plan.batches(epoch=1, transport="flight"))
    assert got
    assert all(b.batch_size == 4 for b in got)
    kept = _reference(dep, CONFIGS["shuffled-drop"].model_copy(
        update={"drop_incomplete_batches": False}), 1)
    assert any(len(b.keys) < 4 for b in kept)  # without the option a smaller group exists


@pytest.mark.parametrize("transport", ["flight", "local"])
def test_resuming_gives_the_tail_of_the_full_pass(dep: Any, transport: str) -> None:
    plan = _plan(dep, "shuffled")
    full = [_bytes(b) for b in plan.batches(epoch=1, transport=transport)]
    want = _reference(dep, CONFIGS["shuffled"], 1)
    for k in sorted({1, len(full) // 2, len(full) - 1}):
        tail = list(plan.batches(epoch=1, start_batch=k, transport=transport))
        assert [_bytes(b) for b in tail] == full[k:]
        assert_pass_equal(tail, want[k:])


@pytest.mark.parametrize("name", ["sequential", "shuffled"])
def test_local_and_flight_give_the_same_bytes(dep: Any, name: str) -> None:
    plan = _plan(dep, name)
    assert plan.transport() == "local"
    for rank, world_size in ((0, 1), (1, 2)):
        local = [_bytes(b) for b in plan.batches(epoch=1, rank=rank, world_size=world_size,
                                                 transport="local")]
        flight = [_bytes(b) for b in plan.batches(epoch=1, rank=rank, world_size=world_size,
                                                  transport="flight")]
        assert local == flight
        assert len(local) > 0


def test_an_aligned_batch_moves_to_a_device(dep: Any) -> None:
    batch = next(iter(_plan(dep, "sequential").batches(transport="flight")))
    moved = batch.to("cpu")
    assert moved.protocols == batch.protocols
    for p in batch.protocols:
        assert torch.equal(moved.inputs[p], batch.inputs[p])
        assert torch.equal(moved.has_data[p], batch.has_data[p])
    if torch.cuda.is_available():
        pinned = batch.pin_memory()
        assert all(pinned.inputs[p].is_pinned() for p in batch.protocols)


# -- a raw pyarrow client -------------------------------------------------------------


def _raw_chunks(location: str, plan_id: str, *, epoch: int,
                start_batch: int = 0) -> list[tuple[dict[str, Any], Any]]:
    """Every record batch of a pass with raw pyarrow.flight (docs/wire.md section 7)."""
    command = {"kind": "windpipe.batches", "v": 1, "plan_id": plan_id, "epoch": epoch,
               "rank": 0, "world_size": 1, "start_batch": start_batch}
    client = fl.connect(location)
    out = []
    try:
        info = client.get_flight_info(fl.FlightDescriptor.for_command(
            json.dumps(command).encode()))
        for ep in info.endpoints:
            target = fl.connect(ep.locations[0]) if ep.locations else client
            for chunk in target.do_get(ep.ticket):
                if chunk.data is not None:
                    out.append((json.loads(chunk.app_metadata.to_pybytes()), chunk.data))
            if target is not client:
                target.close()
    finally:
        client.close()
    return out


def _flat(data: Any, name: str, dtype: Any) -> np.ndarray:
    return data.column(name).values.to_numpy(zero_copy_only=False).astype(dtype)


def _json_key(text: str) -> tuple[Any, ...]:
    return tuple(json.loads(text)) if text else ()


def _assert_raw_part(meta: dict[str, Any], data: Any, want: RefAlignedBatch, i: int) -> None:
    p = want.protocols[i]
    part = want.parts[p]
    at = f"{p} of batch {want.batch_idx}"
    assert meta["aligned"] == {"protocol": p, "part": i, "parts": len(want.protocols),
                               "has_data": [int(x) for x in part.has_data]}, at
    assert meta["batch_idx"] == want.batch_idx
    assert meta["global_batch"] == want.global_batch
    assert meta["split"] == "train"
    assert (meta["seq_len"], meta["c_in"], meta["c_out"]) == (
        part.seq_len, len(part.input_columns), len(part.target_columns)), at
    assert tuple(meta["input_columns"]) == part.input_columns
    assert tuple(meta["target_columns"]) == part.target_columns
    assert tuple(meta["channels"]) == part.channels
    assert (meta["stateful_group_idx"], meta["stateful_step_idx"], meta["stateful_steps"]) == (
        want.group, want.step, want.steps), at
    b, t = data.num_rows, meta["seq_len"]
    assert b == len(want.keys)
    inputs = _flat(data, "inputs", np.float32).reshape(b, t, meta["c_in"])
    targets = _flat(data, "targets", np.float32).reshape(b, t, meta["c_out"])
    mask = _flat(data, "mask", np.uint8).astype(bool).reshape(b, t)
    has_channel = _flat(data, "has_channel", np.uint8).astype(bool).reshape(
        b, len(meta["channels"]))
    np.testing.assert_array_equal(mask, part.mask, err_msg=at)
    np.testing.assert_array_equal(has_channel, part.has_channel, err_msg=at)
    np.testing.assert_allclose(inputs, part.inputs, rtol=2e-6, atol=1e-6, err_msg=at)
    np.testing.assert_allclose(targets, part.targets, rtol=2e-6, atol=1e-6, err_msg=at)
    col = data.column
    assert col("protocol").to_pylist() == list(part.protocols), at
    assert col("window_offset").to_pylist() == list(part.window_offsets), at
    assert col("manifest_row_id").to_pylist() == list(part.manifest_row_ids), at
    assert col("manifest_path").to_pylist() == list(part.manifest_paths), at
    assert [_json_key(k) for k in col("group_key").to_pylist()] == list(part.group_keys), at
    assert [_json_key(k) for k in col("alignment_key").to_pylist()] == list(want.keys), at
    segs: list[tuple[Any, ...]] = []
    names = ("seg_path", "seg_row_start", "seg_row_count", "seg_window_row_start",
             "seg_window_row_count")
    lists = [col(n).to_pylist() for n in names]
    for lane in range(b):
        segs.extend((lane, *row) for row in zip(*(x[lane] for x in lists), strict=True))
    assert sorted(segs) == sorted(part.segments), at


@pytest.mark.parametrize("start_batch", [0, 3])
def test_a_raw_pyarrow_client_decodes_the_parts(dep: Any, start_batch: int) -> None:
    """Only pyarrow.flight, json and numpy: P consecutive record batches per aligned batch,
    one per protocol in order, sharing ``batch_idx``; resuming starts at part 0."""
    plan = _plan(dep, "shuffled")
    want = _reference(dep, CONFIGS["shuffled"], 1)[start_batch:]
    chunks = _raw_chunks(dep.locations[0], plan.id, epoch=1, start_batch=start_batch)
    n_parts = len(CONFIGS["shuffled"].ordered_protocols())
    assert len(chunks) == n_parts * len(want)
    for k, batch in enumerate(want):
        for i in range(n_parts):
            meta, data = chunks[k * n_parts + i]
            _assert_raw_part(meta, data, batch, i)


# -- configs that cannot align --------------------------------------------------------


def test_configs_that_break_the_rules_are_refused(dep: Any) -> None:
    mixed = {"hppc": WindowConfig(batch_size=3, seq_len=20)}
    base = CONFIGS["sequential"].model_dump()
    for update in ({"window_by_protocol": mixed}, {"stateful_n_windows": 1},
                   {"stateful_n_windows": -1}):
        with pytest.raises((sdk.InvalidConfig, ValueError), match="align_by"):
            LoaderConfig.model_validate({**base, **update})
    chain = {"cross_protocol_state_carry": "chain", "stateful_n_windows": 1,
             "window_by_protocol": {}}  # a valid chain, but not aligned
    LoaderConfig.model_validate({**base, **chain, "align_by": None})
    with pytest.raises((sdk.InvalidConfig, ValueError)):
        LoaderConfig.model_validate({**base, **chain})
    body = CONFIGS["sequential"].planning_dict()
    body["window_by_protocol"]["hppc"]["batch_size"] = 3
    url = f"{dep.url}/v1/splits/{dep.extra['split'].id}/plans"
    response = httpx.post(url, json=body, timeout=30.0)
    assert response.status_code == 422, response.text
    ok = httpx.post(url, json=CONFIGS["sequential"].planning_dict(), timeout=30.0)
    assert ok.status_code in (200, 201), ok.text


# -- training ------------------------------------------------------------------------


def test_a_one_layer_model_trains_through_the_dataloader(dep: Any) -> None:
    """One ``Linear`` per protocol over its inputs; the loss mask is ``target_valid`` of
    lanes that have data; absent input channels are zeroed by ``has_channel``."""
    plan = _plan(dep, "shuffled")
    config = plan.config
    torch.manual_seed(0)
    models = torch.nn.ModuleDict({
        p: torch.nn.Linear(len(config.inputs[p]), len(config.targets[p]))
        for p in config.ordered_protocols()})
    opt = torch.optim.Adam(models.parameters(), lr=0.03)
    losses = []
    seen_no_data = False
    for epoch in range(4):
        for batch in plan.dataloader(epoch=epoch):
            assert isinstance(batch, sdk.AlignedBatch)
            total = torch.zeros(())
            for p in batch.protocols:
                c_in = batch.inputs[p].shape[2]
                present = batch.has_channel[p][:, None, :c_in]
                x = torch.where(present, batch.inputs[p], torch.zeros_like(batch.inputs[p]))
                keep = batch.target_valid[p] & batch.has_data[p][:, None]
                seen_no_data |= not bool(batch.has_data[p].all())
                err = (models[p](x) - torch.nan_to_num(batch.targets[p])) ** 2
                weight = keep[:, :, None].float()
                total = total + (err * weight).sum() / (weight.sum() * err.shape[2]).clamp(min=1)
            opt.zero_grad()
            total.backward()
            opt.step()
            losses.append(float(total.detach()))
    assert seen_no_data
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all())
               for p in models.parameters())
    assert all(map(math.isfinite, losses))
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < first


# -- the device feed, DataLoader workers, the schedule route ---------------------------


def test_the_device_loader_feeds_aligned_batches(dep: Any) -> None:
    plan = _plan(dep, "shuffled")
    want = [_bytes(b) for b in plan.batches(epoch=1, transport="flight")]
    loader = plan.loader(device="cpu", epoch=1, transport="flight", progress=False)
    got = list(loader)
    assert [_bytes(b) for b in got] == want
    assert loader.stats is not None
    assert loader.stats.batches == len(want)
    assert loader.stats.tokens == sum(b.tokens for b in got)


@pytest.mark.slow
def test_dataloader_workers_keep_aligned_batches_whole_and_in_order(dep: Any) -> None:
    """Spawned workers take whole aligned batches (all parts of a ``batch_idx``), and
    the loader hands them out in the pass's order; the cursor resumes mid-epoch."""
    plan = _plan(dep, "sequential")
    want = [_bytes(b) for b in plan.batches(transport="flight")]
    loader = plan.dataloader(num_workers=2, transport="flight")
    got = []
    for batch in loader:
        got.append(_bytes(batch))
        if len(got) == 3:
            break
    state = loader.dataset.state_dict()  # type: ignore[attr-defined]
    assert state["batch"] == 3
    assert got == want[:3]
    loader.dataset.load_state_dict(state)  # type: ignore[attr-defined]
    assert [_bytes(b) for b in loader] == want[3:]


def test_the_schedule_route_lists_each_aligned_batch_by_part(dep: Any) -> None:
    plan = _plan(dep, "sequential")
    protocols = plan.config.ordered_protocols()
    body = httpx.get(f"{dep.url}/v1/plans/{plan.id}/schedule",
                     params={"page_size": 2 * len(protocols)}).json()
    items = body["items"]
    assert [i["part"] for i in items] == list(range(len(protocols))) * 2
    assert [i["batch_idx"] for i in items] == [0] * len(protocols) + [1] * len(protocols)
    assert [i["protocol"] for i in items] == list(protocols) * 2
    first = next(iter(plan.batches(transport="flight")))
    for item in items[: len(protocols)]:
        offsets = [lane["offset"] for lane in item["lanes"]]
        assert tuple(offsets) == first.state[item["protocol"]].window_offsets
        no_data = [lane["stream_idx"] == -1 for lane in item["lanes"]]
        assert no_data == (~first.has_data[item["protocol"]]).tolist()
    assert plan.report().raw["batches"] == plan.n_batches == len(list(plan.batches()))


def test_the_raw_consumer_of_docs_wire_md_reads_aligned_batches(dep: Any) -> None:
    """The Python block of docs/wire.md section 4a, run as written, against the server:
    what it decodes is what the SDK hands out."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "wire.md").read_text()
    section = text[text.index("## 4a."):text.index("## 5.")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/wire.md", "exec"), scope)
    plan = _plan(dep, "sequential")
    client = fl.connect(dep.locations[0])
    try:
        raw = list(scope["aligned_batches"](client, plan.id, start_batch=1))
    finally:
        client.close()
    ours = list(plan.batches(start_batch=1, transport="flight"))
    assert len(raw) == len(ours) > 0
    for got, want in zip(raw, ours, strict=True):
        assert tuple(got) == want.protocols
        for p, (x, y, mask, has) in got.items():
            np.testing.assert_array_equal(x, want.inputs[p].numpy())
            np.testing.assert_array_equal(y, want.targets[p].numpy())
            np.testing.assert_array_equal(mask, want.mask[p].numpy())
            np.testing.assert_array_equal(has, want.has_data[p].numpy())
