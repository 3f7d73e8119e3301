"""``block_shuffled`` (SEMANTICS 3c) against a plain-loop reference written from the text.

The reference below never calls the planner: it forms blocks from per-stream chunk row
counts, cuts windows, draws the contract's permutations and cuts each block into
batches, one loop at a time. Only the random draws are shared, because they are the
definition (``hash64`` phase, ``rng_for("blocks")``, ``rng_for("block-windows")``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.reference.schedule_ref import RefBatch, schedule_batches
from tests.services.planning.test_schedule import make_streams
from windpipe.services.contract.configs import LoaderConfig, PlanSpec, WindowConfig
from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.identity import hash64, rng_for
from windpipe.services.planning.artifact import (
    PieceLayout,
    PieceRecord,
    PlanArtifact,
    make_artifact,
)
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.report import plan_report
from windpipe.services.planning.strategies import epoch_schedule
from windpipe.services.planning.streams import Streams
from windpipe.services.planning.working_set import ChunkTable, protocol_row_bytes

PROTOCOLS = ("cycling", "eis", "hppc")
ROW_BYTES = 8  # one input and one target column ("v"), float32 each


def cfg(budget: int | None, **kw: Any) -> LoaderConfig:
    protos = kw.pop("protocols", PROTOCOLS)
    base: dict[str, Any] = {
        "inputs": dict.fromkeys(protos, ("v",)), "targets": dict.fromkeys(protos, ("v",)),
        "default_window": WindowConfig(batch_size=3, seq_len=4),
        "strategy": "block_shuffled" if budget is not None else "shuffled",
        "shuffle_block_bytes": budget,
    }
    base.update(kw)
    return LoaderConfig(**base)


def chunk_layout(streams: Streams, rows_per_chunk: int) -> tuple[ChunkTable, list[list[int]]]:
    """Every piece cut into chunks of ``rows_per_chunk`` rows: the planner's table and, per
    stream, the plain list of its chunks' row counts (for the reference)."""
    rows: list[int] = []
    ptr = [0]
    per_stream: list[list[int]] = [[] for _ in range(streams.count)]
    for p, n in enumerate(streams.piece_rows.tolist()):
        cut = [rows_per_chunk] * (n // rows_per_chunk) + ([n % rows_per_chunk]
                                                         if n % rows_per_chunk else [])
        rows.extend(cut)
        ptr.append(len(rows))
        per_stream[int(streams.piece_stream[p])].extend(cut)
    table = ChunkTable.of(streams, chunk_ptr=np.asarray(ptr), chunk_rows=np.asarray(rows),
                          row_bytes=np.full(len(streams.protocols), ROW_BYTES))
    return table, per_stream


# -- the reference, plain loops --------------------------------------------------------


def ref_blocks(streams: Streams, config: LoaderConfig, chunks: list[list[int]], *,
               row_bytes: int = ROW_BYTES) -> list[list[tuple[int, int, int]]]:
    """Blocks as lists of chunks ``(stream, first row, rows)``, numbered by stream order
    (``row_bytes``: a decoded row of every protocol, ``(C_in + C_out) * 4``)."""
    budget = config.shuffle_block_bytes
    assert budget is not None
    blocks: list[tuple[tuple[int, int], list[tuple[int, int, int]]]] = []
    for code, protocol in enumerate(streams.protocols):
        t = config.window_for(protocol).seq_len
        mine: list[tuple[int, int, int, int]] = []  # (stream, r0, rows, reach index)
        for s in range(streams.count):
            n = int(streams.n_rows[s])
            if int(streams.protocol[s]) != code or n < 2:
                continue
            r0 = 0
            first = len(mine)
            spans = []
            for rows in chunks[s]:
                if rows:
                    spans.append((r0, rows))
                r0 += rows
            for r0, rows in spans:
                last = min(r0 + rows - 1 + t, n - 1)
                reach = next(first + i for i, (a, r) in enumerate(spans) if a <= last < a + r)
                mine.append((s, r0, rows, reach))
        a = 0
        while a < len(mine):
            b = a
            while b < len(mine) and sum(
                    c[2] for c in mine[a:mine[b][3] + 1]) * row_bytes <= budget:
                b += 1
            assert b > a, "the planner must have refused this budget"
            order_key = (mine[a][0], mine[a][1])
            blocks.append((order_key, [(s, r0, rows) for s, r0, rows, _ in mine[a:b]]))
            a = b
    return [members for _, members in sorted(blocks)]


def ref_schedule(streams: Streams, config: LoaderConfig, chunks: list[list[int]],
                 epoch: int, *, row_bytes: int = ROW_BYTES) -> list[RefBatch]:
    """Every batch of ``epoch`` in global order (SEMANTICS 3c, by the text)."""
    blocks = ref_blocks(streams, config, chunks, row_bytes=row_bytes)
    windows: list[tuple[int, int]] = []  # source order: stream, then offset
    for s in range(streams.count):
        n = int(streams.n_rows[s])
        if n < 2:
            continue
        protocol = streams.protocols[int(streams.protocol[s])]
        w = config.window_for(protocol)
        o = 0
        if config.phase_shift:
            o = hash64("phase", config.seed, list(streams.group_keys[s]), epoch) % min(
                w.seq_len, n - 1)
        while o <= n - 2:
            if not w.drop_incomplete or o + w.seq_len + 1 <= n:
                windows.append((s, o))
            o += w.seq_len
    u = rng_for("block-windows", config.seed, epoch).random(len(windows))

    def block_of(s: int, o: int) -> int:
        for k, members in enumerate(blocks):
            if any(cs == s and r0 <= o < r0 + rows for cs, r0, rows in members):
                return k
        raise AssertionError((s, o))

    where = [block_of(s, o) for s, o in windows]
    out: list[RefBatch] = []
    for k in rng_for("blocks", config.seed, epoch).permutation(len(blocks)).tolist():
        mine = sorted((i for i in range(len(windows)) if where[i] == k),
                      key=lambda i: (u[i], i))
        if not mine:
            continue
        protocol = streams.protocols[int(streams.protocol[windows[mine[0]][0]])]
        big_b = config.window_for(protocol).batch_size
        for lo in range(0, len(mine), big_b):
            lanes = [windows[i] for i in mine[lo:lo + big_b]]
            if config.drop_incomplete_batches and len(lanes) < big_b:
                continue
            out.append(RefBatch(
                lanes=tuple(lanes), lane_streams=tuple(s for s, _ in lanes),
                lane_protocols=tuple(protocol for _ in lanes),
                seq_len=config.window_for(protocol).seq_len, protocol=protocol, unit=len(out),
            ))
    return out


# -- the strategy against it ---------------------------------------------------------

NS = [0, 1, 2, 4, 12, 13, 5, 25, 40, 3, 61, 33, 90, 7, 48, 19]
PROTOS = ["cycling", "hppc", "cycling", "hppc", "eis", "cycling", "hppc", "cycling", "eis",
          "hppc", "cycling", "eis", "cycling", "hppc", "cycling", "eis"]


@pytest.fixture(scope="module")
def streams() -> Streams:
    return make_streams(NS, PROTOS, cells=5)


CASES: list[tuple[int, int, dict[str, Any]]] = [
    (5, 200, {}),
    (5, 600, {}),
    (8, 1000, {"drop_incomplete_batches": True}),
    (3, 320, {"default_window": WindowConfig(batch_size=2, seq_len=6, drop_incomplete=True)}),
    (16, 900, {"window_by_protocol": {"hppc": WindowConfig(batch_size=4, seq_len=3)},
               "protocol_order": ("hppc", "eis", "cycling")}),
    (7, 10_000, {"phase_shift": False, "seed": 5}),
]


@pytest.mark.parametrize(("rows_per_chunk", "budget", "kw"), CASES)
def test_matches_the_reference(streams: Streams, rows_per_chunk: int, budget: int,
                               kw: dict[str, Any]) -> None:
    config = cfg(budget, **kw)
    table, per_stream = chunk_layout(streams, rows_per_chunk)
    for epoch in (0, 1, 4):
        sched = epoch_schedule(streams, config, epoch, chunks=table)
        assert schedule_batches(sched, streams.protocols) == ref_schedule(
            streams, config, per_stream, epoch)


@pytest.mark.parametrize(("rows_per_chunk", "budget", "kw"), CASES)
def test_every_window_once_and_each_block_within_budget(
        streams: Streams, rows_per_chunk: int, budget: int, kw: dict[str, Any]) -> None:
    config = cfg(budget, **kw)
    table, per_stream = chunk_layout(streams, rows_per_chunk)
    blocks = ref_blocks(streams, config, per_stream)
    for epoch in (0, 3):
        sched = epoch_schedule(streams, config, epoch, chunks=table)
        # the same windows as a shuffled plan of the epoch (same phases), each once
        shuffled = epoch_schedule(streams, cfg(None, **kw), epoch)
        lanes = list(zip(sched.lane_stream.tolist(), sched.lane_offset.tolist(), strict=True))
        want = sorted(zip(shuffled.lane_stream.tolist(), shuffled.lane_offset.tolist(),
                          strict=True))
        assert len(set(lanes)) == len(lanes)
        if not config.drop_incomplete_batches:
            assert sorted(lanes) == want
        # each block's batches are consecutive and read only chunks within the budget
        assert sched.batch_block is not None
        runs = [k for i, k in enumerate(sched.batch_block.tolist())
                if i == 0 or k != sched.batch_block[i - 1]]
        assert len(runs) == len(set(runs))
        worst = 0
        for k in set(runs):
            read: dict[tuple[int, int], int] = {}  # (stream, first row) -> rows
            for i in np.flatnonzero(sched.batch_block == k).tolist():
                t = int(sched.batch_seq_len[i])
                for lane in range(int(sched.batch_lane_ptr[i]), int(sched.batch_lane_ptr[i + 1])):
                    s, o = int(sched.lane_stream[lane]), int(sched.lane_offset[lane])
                    assert any(cs == s and r0 <= o < r0 + rows for cs, r0, rows in blocks[k])
                    end = min(o + t + 1, int(streams.n_rows[s]))
                    r0 = 0
                    for rows in per_stream[s]:
                        if rows and r0 < end and o < r0 + rows:
                            read[(s, r0)] = rows
                        r0 += rows
            size = sum(read.values()) * ROW_BYTES
            assert size <= budget
            worst = max(worst, size)
        report = plan_report(streams, config, sched, chunks=table)
        assert report.shuffle_blocks is not None
        assert report.shuffle_blocks.budget_bytes == budget
        assert report.shuffle_blocks.blocks == len(set(runs))
        assert report.shuffle_blocks.working_set_bytes == worst <= budget


def test_deterministic_and_epochs_differ(streams: Streams) -> None:
    config = cfg(600)
    table, _ = chunk_layout(streams, 5)
    a = epoch_schedule(streams, config, 2, chunks=table)
    b = epoch_schedule(streams, config, 2, chunks=table)
    assert a.lane_offset.tolist() == b.lane_offset.tolist()
    assert a.lane_stream.tolist() == b.lane_stream.tolist()
    orders = {tuple(zip(s.lane_stream.tolist(), s.lane_offset.tolist(), strict=True))
              for s in (epoch_schedule(streams, config, e, chunks=table) for e in range(4))}
    assert len(orders) == 4
    other = epoch_schedule(streams, cfg(600, seed=70), 2, chunks=table)
    assert other.lane_stream.tolist() != a.lane_stream.tolist()


@pytest.mark.parametrize("trim", [True, False])
def test_ranks_cover_every_batch_once(streams: Streams, trim: bool) -> None:
    config = cfg(600, drop_incomplete_distributed=trim)
    table, _ = chunk_layout(streams, 5)
    sched = epoch_schedule(streams, config, 1, chunks=table)
    for world in (1, 2, 3, 5):
        taken = [rank_batches(sched, rank=r, world_size=world,
                              drop_incomplete_distributed=trim).tolist() for r in range(world)]
        flat = [g for mine in taken for g in mine]
        assert len(flat) == len(set(flat))
        if trim:
            assert len({len(m) for m in taken}) == 1
        else:
            assert sorted(flat) == list(range(sched.n_batches))


def _quality(config: LoaderConfig, streams: Streams, table: ChunkTable | None) -> float:
    values = []
    for epoch in range(3):
        sched = epoch_schedule(streams, config, epoch, chunks=table)
        q = plan_report(streams, config, sched, chunks=table).shuffle_quality
        assert q is not None
        assert 0.0 <= q <= 1.0
        values.append(q)
    return float(np.mean(values))


def test_shuffle_quality_orders_the_strategies() -> None:
    many = make_streams([150 + 37 * (i % 7) for i in range(60)], ["cycling"] * 60, cells=6)
    table, _ = chunk_layout(many, 16)
    one = ("cycling",)
    sequential = _quality(cfg(None, protocols=one, strategy="sequential"), many, table)
    shuffled = _quality(cfg(None, protocols=one), many, table)
    # blocks of more than sqrt(n) windows (~3,800 lanes here): below that, the jumps
    # between blocks dominate the mean gap (docs/semantics-notes.md, "Block shuffle")
    blocks = [_quality(cfg(b, protocols=one), many, table)
              for b in (2_000, 12_000, 40_000, 80_000, 1_000_000)]
    assert sequential < 0.05
    assert shuffled > 0.9
    assert all(sequential < q < shuffled + 0.05 for q in blocks)
    assert blocks == sorted(blocks)
    assert blocks[0] < 0.1
    assert blocks[-2] > 0.4
    assert blocks[-1] > 0.9  # one block: a global shuffle


def test_aligned_plans_report_no_quality(streams: Streams) -> None:
    config = cfg(None, align_by="alignment_key", strategy="sequential")
    sched = epoch_schedule(streams, config, 0)
    assert plan_report(streams, config, sched).shuffle_quality is None


def test_the_smallest_budget_is_named_and_works(streams: Streams) -> None:
    table, _ = chunk_layout(streams, 5)
    with pytest.raises(WindpipeError) as err:
        epoch_schedule(streams, cfg(1), 0, chunks=table)
    assert err.value.type is ErrorType.INVALID_CONFIG
    need = err.value.details["min_shuffle_block_bytes"]
    assert f"{need:,}" in str(err.value)
    epoch_schedule(streams, cfg(need), 0, chunks=table)
    with pytest.raises(WindpipeError, match="smallest workable"):
        epoch_schedule(streams, cfg(need - 1), 0, chunks=table)


@pytest.mark.parametrize(("kw", "match"), [
    ({"strategy": "block_shuffled"}, "needs shuffle_block_bytes"),
    ({"strategy": "shuffled", "shuffle_block_bytes": 100}, "does not use it"),
    ({"strategy": "block_shuffled", "shuffle_block_bytes": 0}, "greater than or equal to 1"),
    ({"strategy": "block_shuffled", "shuffle_block_bytes": 100, "stateful_n_windows": 2},
     "stateful_n_windows=0"),
    ({"strategy": "block_shuffled", "shuffle_block_bytes": 100, "align_by": "alignment_key"},
     "no align_by"),
])
def test_impossible_configs_are_refused(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(WindpipeError, match=match) as err:
        LoaderConfig(inputs={"cycling": ("v",)}, targets={"cycling": ("v",)}, **kw)
    assert err.value.type is ErrorType.INVALID_CONFIG


def test_plan_ids_of_other_plans_do_not_change() -> None:
    """An unset budget is not in the plan's JSON, so every earlier plan digests as before."""
    spec = PlanSpec(inputs={"cycling": ("v",)}, targets={"cycling": ("v",)},
                    strategy="shuffled")
    assert "shuffle_block_bytes" not in spec.planning_dict()
    blocked = PlanSpec(inputs={"cycling": ("v",)}, targets={"cycling": ("v",)},
                       strategy="block_shuffled", shuffle_block_bytes=4096)
    assert blocked.planning_dict()["shuffle_block_bytes"] == 4096
    assert PlanSpec.model_validate(blocked.planning_dict()) == blocked


def test_the_stored_plan_computes_its_epochs_with_its_chunks(streams: Streams) -> None:
    table, per_stream = chunk_layout(streams, 5)
    config = cfg(600)
    records = {}
    for p, path in enumerate(streams.piece_path):
        n = int(streams.piece_rows[p])
        records[path] = PieceRecord("parquet", f"fp{p}", [5] * (n // 5) + ([n % 5] if n % 5
                                                                          else []))
    made = make_artifact(plan_id="p-x", split_id="s-x", version_id="v-x", root_uri="file:///x",
                         spec=config, streams=streams,
                         pieces=PieceLayout.from_records(streams.piece_path, records))
    back = PlanArtifact.from_ipc(made.to_ipc())
    assert back.schedule is None
    assert back.strategy.name == "block_shuffled"
    assert back.spec.shuffle_block_bytes == 600
    row_bytes = protocol_row_bytes(back.spec, streams.protocols)
    assert row_bytes.tolist() == [ROW_BYTES] * len(streams.protocols)
    for epoch in (0, 2):
        got = schedule_batches(back.epoch_schedule(epoch), streams.protocols)
        assert got == ref_schedule(streams, config, per_stream, epoch)
        assert got == schedule_batches(epoch_schedule(streams, config, epoch, chunks=table),
                                       streams.protocols)
    report = back.report()
    assert report.strategy == "block_shuffled"
    assert report.epoch_dependent
    assert report.shuffle_blocks is not None
