"""The vectorized planner against the loop-based reference (SEMANTICS 3, 4, 7)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.reference.schedule_ref import (
    ref_streams,
    reference_rank,
    reference_schedule,
    schedule_batches,
)
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.planning.ranks import rank_batch_counts, rank_batches, trimmed_batches
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.strategies.shuffled import epoch_phases
from windpipe.services.planning.streams import Streams, build_streams

B, T = 3, 4
EDGE_NS = [0, 1, 2, T, B * T, B * T + 1, 5, 25, 40, 3]
PROTOS = ["cycling", "hppc", "cycling", "hppc", "eis", "cycling", "hppc", "cycling", "eis", "hppc"]


def make_streams(ns: list[int], protos: list[str], *, cells: int = 4) -> Streams:
    """Streams built through ``build_streams`` from index/segment frames.

    Stream ``i`` is cell ``i % cells``, cycle ``i // cells``; its rows are split in
    up to three segments (listed out of ordinal order on purpose).
    """
    rows: list[dict[str, Any]] = []
    segs: list[dict[str, Any]] = []
    for i, (n, p) in enumerate(zip(ns, protos, strict=True)):
        mrid = 1000 + i
        rows.append({"manifest_row_id": mrid, "set_id": "s", "cell_id": f"c{i % cells}",
                     "cidx": i // cells, "protocol": p, "row_count": n})
        cuts = sorted({0, n // 3, n})
        parts = [(a, b) for a, b in itertools.pairwise(cuts)] or [(0, 0)]
        for ordinal, (a, b) in reversed(list(enumerate(parts))):
            segs.append({"manifest_row_id": mrid, "ordinal": ordinal,
                         "path": f"seg/{i}/{ordinal}.parquet", "row_count": b - a})
    index = pl.DataFrame(rows, schema={
        "manifest_row_id": pl.Int64, "set_id": pl.String, "cell_id": pl.String,
        "cidx": pl.Int64, "protocol": pl.String, "row_count": pl.Int64,
    }).sort(["set_id", "cell_id", "cidx", "protocol"])
    seg_frame = pl.DataFrame(segs, schema={
        "manifest_row_id": pl.Int64, "ordinal": pl.Int64, "path": pl.String,
        "row_count": pl.Int64,
    })
    names = set(protos) or {"cycling"}
    config = LoaderConfig(inputs=dict.fromkeys(names, ("v",)), targets=dict.fromkeys(names, ("v",)))
    return streams_of(index, seg_frame, config)


def streams_of(index: pl.DataFrame, segments: pl.DataFrame, cfg: LoaderConfig) -> Streams:
    """``build_streams`` with the plan's split, protocols and keys."""
    return build_streams(index, segments, split=cfg.split, protocols=cfg.ordered_protocols(),
                         group_key=cfg.group_key, alignment_key=cfg.alignment_key)


def stream_phases(streams: Streams, cfg: LoaderConfig, epoch: int) -> np.ndarray:
    """The phases a shuffled plan with ``cfg`` cuts its streams at in ``epoch``."""
    return epoch_phases(streams, WindowTable.for_protocols(cfg, streams.protocols),
                        OrderRules.from_spec(cfg), epoch)


def config(**kw: Any) -> LoaderConfig:
    protos = kw.pop("protocols", ("cycling", "eis", "hppc"))
    base: dict[str, Any] = {
        "inputs": dict.fromkeys(protos, ("v",)),
        "targets": dict.fromkeys(protos, ("v",)),
        "default_window": WindowConfig(batch_size=B, seq_len=T),
    }
    if kw.pop("mixed", False):
        base["window_by_protocol"] = {"hppc": WindowConfig(batch_size=2, seq_len=5)}
    base.update(kw)
    return LoaderConfig(**base)


def check(streams: Streams, cfg: LoaderConfig, epoch: int = 0) -> None:
    sched = epoch_schedule(streams, cfg, epoch)
    refs = ref_streams(streams)
    expect = reference_schedule(refs, cfg, epoch)
    got = schedule_batches(sched, streams.protocols)
    assert got == expect
    for world in (1, 2, 3, 7):
        for rank in range(world):
            ids = rank_batches(sched, rank=rank, world_size=world,
                               drop_incomplete_distributed=cfg.drop_incomplete_distributed)
            mine = reference_rank(refs, cfg, epoch, rank=rank, world_size=world)
            assert schedule_batches(sched, streams.protocols, ids) == mine


@pytest.fixture(scope="module")
def edge_streams() -> Streams:
    return make_streams(EDGE_NS, PROTOS)


PLAIN_CASES = [
    {},
    {"mixed": True},
    {"default_window": WindowConfig(batch_size=B, seq_len=T, step_rows=5)},
    {"default_window": WindowConfig(batch_size=B, seq_len=T, step_rows=20)},
    {"default_window": WindowConfig(batch_size=B, seq_len=T, drop_incomplete=True)},
    {"drop_incomplete_batches": True},
    {"drop_incomplete_distributed": False},
    {"protocol_order": ("hppc", "cycling", "eis"), "mixed": True},
]
SEGMENT_CASES = [
    {"strategy": strategy, "stateful_n_windows": k, **extra}
    for strategy in ("sequential", "shuffled")
    for k in (0, 1, 3, -1)
    for extra in ({}, {"mixed": True, "drop_incomplete_batches": True},
                  {"default_window": WindowConfig(batch_size=B, seq_len=T, drop_incomplete=True),
                   "drop_incomplete_distributed": False},
                  {"protocol_order": ("eis", "hppc", "cycling")})
    if not (strategy == "sequential" and k == 0)
]
CHAIN_CASES = [
    {"strategy": strategy, "stateful_n_windows": k, "cross_protocol_state_carry": "chain", **extra}
    for strategy in ("sequential", "shuffled")
    for k in (1, 3, -1)
    for extra in ({}, {"drop_incomplete_batches": True},
                  {"protocol_order": ("hppc", "eis", "cycling"), "phase_shift": False})
]


@pytest.mark.parametrize("kw", PLAIN_CASES + SEGMENT_CASES + CHAIN_CASES)
def test_schedule_matches_reference(edge_streams: Streams, kw: dict[str, Any]) -> None:
    cfg = config(**kw)
    for epoch in (0, 1, 5) if cfg.strategy == "shuffled" else (0,):
        check(edge_streams, cfg, epoch)


def test_plain_sequential_exact_layout() -> None:
    streams = make_streams([13, 1], ["cycling", "cycling"])
    sched = epoch_schedule(streams, config(), 0)
    # B*T = 12: window 0 lanes at 0, 4, 8; window 1 (s=12 > N-2=11) does not exist
    assert sched.n_batches == 1
    assert sched.lane_offset.tolist() == [0, 4, 8]
    assert sched.dropped.short_streams == 1
    assert sched.dropped.short_stream_rows == 1
    assert (sched.batch_group == -1).all()


def test_shuffled_deterministic_and_epochs_differ(edge_streams: Streams) -> None:
    cfg = config(strategy="shuffled", stateful_n_windows=1)
    a = epoch_schedule(edge_streams, cfg, 3)
    b = epoch_schedule(edge_streams, cfg, 3)
    assert np.array_equal(a.lane_offset, b.lane_offset)
    assert np.array_equal(a.lane_stream, b.lane_stream)
    phases = np.stack([stream_phases(edge_streams, cfg, e) for e in range(6)])
    assert (phases.max(axis=0) != phases.min(axis=0)).any()
    orders = {tuple(epoch_schedule(edge_streams, cfg, e).lane_stream.tolist()) for e in range(4)}
    assert len(orders) > 1
    assert not stream_phases(edge_streams, cfg.model_copy(update={"phase_shift": False}), 2).any()


def test_rank_partition_and_trim(edge_streams: Streams) -> None:
    cfg = config(strategy="shuffled", stateful_n_windows=3)
    sched = epoch_schedule(edge_streams, cfg, 1)
    for world in (1, 2, 3, 7):
        full = [rank_batches(sched, rank=r, world_size=world, drop_incomplete_distributed=False)
                for r in range(world)]
        assert sorted(np.concatenate(full).tolist()) == list(range(sched.n_batches))
        for ids in full:  # a group stays whole on one rank, its steps in order
            for g in set(sched.batch_group[ids].tolist()):
                mine = ids[sched.batch_group[ids] == g]
                assert mine.tolist() == np.flatnonzero(sched.batch_group == g).tolist()
                assert sched.batch_step[mine].tolist() == list(range(len(mine)))
        trimmed = [rank_batches(sched, rank=r, world_size=world, drop_incomplete_distributed=True)
                   for r in range(world)]
        assert len({len(t) for t in trimmed}) == 1
        assert trimmed_batches(sched, world) == sched.n_batches - world * len(trimmed[0])
        assert rank_batch_counts(sched, world).sum() == sched.n_batches
        for t, f in zip(trimmed, full, strict=True):
            assert np.array_equal(t, f[: len(t)])


def test_stateful_lanes_continue(edge_streams: Streams) -> None:
    cfg = config(strategy="sequential", stateful_n_windows=3)
    sched = epoch_schedule(edge_streams, cfg, 0)
    for i in range(1, sched.n_batches):
        if sched.batch_step[i] == 0:
            continue
        prev = slice(sched.batch_lane_ptr[i - 1], sched.batch_lane_ptr[i])
        cur = slice(sched.batch_lane_ptr[i], sched.batch_lane_ptr[i + 1])
        assert np.array_equal(sched.lane_stream[prev], sched.lane_stream[cur])
        for po, co in zip(sched.lane_offset[prev], sched.lane_offset[cur], strict=True):
            if co >= 0:
                assert co == po + sched.batch_seq_len[i]


def test_drop_counts(edge_streams: Streams) -> None:
    cfg = config(strategy="shuffled",
                 default_window=WindowConfig(batch_size=B, seq_len=T, drop_incomplete=True),
                 drop_incomplete_batches=True)
    sched = epoch_schedule(edge_streams, cfg, 2)
    d = sched.dropped
    assert d.short_streams == 2
    assert d.short_stream_rows == 1
    phases = stream_phases(edge_streams, cfg, 2)
    assert d.phase_rows == int(phases.sum())
    assert d.incomplete_windows > 0
    assert d.incomplete_groups > 0
    assert d.incomplete_group_batches == d.incomplete_groups  # k = 0: one batch a group


@pytest.mark.parametrize("step", [5, B * T, B * T + 1, 20])
def test_step_gap_rows_count_what_no_lane_takes_as_input(edge_streams: Streams,
                                                         step: int) -> None:
    cfg = config(protocols=("cycling",),
                 default_window=WindowConfig(batch_size=B, seq_len=T, step_rows=step))
    got = epoch_schedule(edge_streams, cfg, 0).dropped.step_gap_rows
    expected = 0  # straight from SEMANTICS 3a: windows at k*step while k*step <= N-2
    for stream in range(edge_streams.count):
        n = int(edge_streams.n_rows[stream])
        starts = list(range(0, max(n - 1, 0), step))
        for s_k, s_next in itertools.pairwise(starts):
            expected += len(range(s_k + B * T, s_next))
    assert got == expected
    assert (got > 0) == (step > B * T)


def test_group_key_without_protocol_rejected() -> None:
    index = pl.DataFrame({"manifest_row_id": [1], "set_id": ["s"], "cell_id": ["c"],
                          "cidx": [0], "protocol": ["cycling"], "row_count": [5]})
    segs = pl.DataFrame({"manifest_row_id": [1], "ordinal": [0], "path": ["a"],
                         "row_count": [5]})
    cfg = config(protocols=("cycling",), group_key=("set_id", "cell_id"))
    with pytest.raises(WindpipeError, match="protocol"):
        streams_of(index, segs, cfg)
    cfg = config(protocols=("cycling",), group_key=("set_id", "nope", "protocol"))
    with pytest.raises(WindpipeError, match="nope"):
        streams_of(index, segs, cfg)


def test_build_streams_coarse_key_split_and_protocol_filter() -> None:
    index = pl.DataFrame({
        "manifest_row_id": [1, 2, 3, 4, 5],
        "set_id": ["s"] * 5, "cell_id": ["a", "a", "a", "b", "b"],
        "cidx": [0, 0, 1, 0, 1], "protocol": ["cycling", "hppc", "cycling", "cycling", "eis"],
        "row_count": [3, 4, 5, 6, 7], "split": ["train", "train", "train", "val", "train"],
    })
    segs = pl.DataFrame({"manifest_row_id": [3, 1, 1, 2, 4, 5], "ordinal": [0, 1, 0, 0, 0, 0],
                         "path": ["m3", "m1b", "m1a", "m2", "m4", "m5"],
                         "row_count": [5, 1, 2, 4, 6, 7]})
    cfg = config(protocols=("cycling", "hppc"), group_key=("set_id", "cell_id", "protocol"))
    st = streams_of(index, segs, cfg)
    assert st.count == 2  # (a, cycling) = rows 1+3, (a, hppc) = row 2; b is val / eis
    assert st.protocols == ("cycling", "hppc")
    assert st.n_rows.tolist() == [8, 4]
    assert st.piece_path == ("m1a", "m1b", "m3", "m2")
    assert st.piece_start.tolist() == [0, 2, 3, 0]
    assert st.piece_ptr.tolist() == [0, 3, 4]
    assert st.group_keys == (("s", "a", "cycling"), ("s", "a", "hppc"))
    assert st.alignment_keys == (("s", "a", 0), ("s", "a", 0))
    assert st.piece_manifest_row_id.tolist() == [1, 1, 3, 2]


def test_random_configs_match_reference() -> None:
    rng = np.random.default_rng(20261129)
    for _ in range(50):
        n_streams = int(rng.integers(0, 9))
        ns = [int(x) for x in rng.integers(0, 60, n_streams)]
        protos = [str(rng.choice(["cycling", "hppc"])) for _ in ns]
        streams = make_streams(ns, protos, cells=int(rng.integers(1, 4)))
        chain = bool(rng.random() < 0.3)
        k = int(rng.choice([1, 2, -1])) if chain else int(rng.choice([0, 1, 2, 5, -1]))
        shape = {"batch_size": int(rng.integers(1, 5)), "seq_len": int(rng.integers(1, 7))}
        hppc = shape if chain else {"batch_size": int(rng.integers(1, 5)),
                                    "seq_len": int(rng.integers(1, 7))}
        step = None if rng.random() < 0.5 else int(rng.integers(1, 30))
        cfg = config(
            protocols=("cycling", "hppc"),
            strategy=str(rng.choice(["sequential", "shuffled"])),
            stateful_n_windows=k,
            cross_protocol_state_carry="chain" if chain else None,
            seed=int(rng.integers(0, 1000)),
            default_window=WindowConfig(**shape, drop_incomplete=bool(rng.random() < 0.3),
                                        step_rows=step),
            window_by_protocol={"hppc": WindowConfig(**hppc)},
            drop_incomplete_batches=bool(rng.random() < 0.3),
            drop_incomplete_distributed=bool(rng.random() < 0.5),
        )
        check(streams, cfg, epoch=int(rng.integers(0, 4)))


def test_million_windows_plan_fast() -> None:
    """A million shuffled windows in one epoch schedule (bench/planning.py times it)."""
    rng = np.random.default_rng(1)
    ns = rng.integers(2, 200_000, 1000)
    streams = Streams.from_pieces(
        protocols=("cycling",), stream_protocols=["cycling"] * len(ns),
        group_keys=[("s", "c", i, "cycling") for i in range(len(ns))],
        alignment_keys=[("s", "c", i) for i in range(len(ns))],
        pieces=[[(f"p{i}", i, int(n))] for i, n in enumerate(ns)],
    )
    cfg = config(protocols=("cycling",), strategy="shuffled", stateful_n_windows=4,
                 default_window=WindowConfig(batch_size=64, seq_len=100))
    sched = epoch_schedule(streams, cfg, 0)
    assert sched.lane_offset.shape[0] >= 900_000
