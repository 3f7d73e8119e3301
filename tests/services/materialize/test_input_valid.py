"""``input_valid`` (SEMANTICS 5b) from the materializer: on every read path it equals the
reference computed straight from the files (nulls, NaNs, infinities, values float32
cannot hold, a missing sensor and padding False; a real ``-2.0`` True), and every other
byte of a batch is the plain read's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.fixtures.data import write_parquet_segment, write_zarr_segment
from tests.flight_server.helpers import COLUMNS, Dataset, StreamSpec, read_back
from tests.flight_server.test_batches import CONFIGS
from tests.reference.input_valid_ref import reference_input_valid, scaled_input
from tests.reference.schedule_ref import ref_streams, reference_rank, schedule_batches
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.contract.identity import manifest_row_id
from windpipe.services.contract.wire import INPUT_PAD, batch_schema
from windpipe.services.materialize.blocks import block_layouts
from windpipe.services.materialize.builder import BatchBuilder, BlockUse, BuiltBatch
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier
from windpipe.services.planning.ranks import rank_batches
from windpipe.services.planning.streams import Streams
from windpipe.services.storage.segments import inspect_segment
from windpipe.services.storage.store import Storage

SPECS = [
    StreamSpec("cycling", "c1", 1, (37, 50)),
    StreamSpec("cycling", "c1", 2, (1,)),
    StreamSpec("cycling", "c2", 1, (64,), lacks=("temperature_c",)),  # no temperature sensor
    StreamSpec("cycling", "c2", 2, (9, 30)),
    StreamSpec("hppc", "c1", 1, (45,)),
    StreamSpec("hppc", "c2", 1, (20, 21)),
    StreamSpec("hppc", "c2", 2, (2,)),
]
INPUTS = {"cycling": ("current_a", "voltage_v", "temperature_c"), "hppc": ("current_a", "soc_pct")}
TARGETS = {"cycling": ("voltage_v",), "hppc": ("voltage_v", "soc_pct")}
SCALING = (  # current_a unscaled: its -2.0 A are real inputs of -2.0
    ScalingSpec(column="voltage_v", input_min=0.0, input_max=6.0),  # 1e300 overflows float32
    ScalingSpec(column="soc_pct", input_min=0.0, input_max=60.0, transform="log1p"),
    ScalingSpec(column="temperature_c", transform="standard", mean=25.0, std=2.5),  # 20 C: -2.0
)
SHAPES: dict[str, dict[str, Any]] = {
    **CONFIGS,
    "aligned": {"align_by": "alignment_key",
                "default_window": WindowConfig(batch_size=2, seq_len=6)},
}


def config_of(name: str) -> LoaderConfig:
    """The plan config ``name`` over this module's dataset."""
    return LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING, **SHAPES[name])


def _column(rng: np.random.Generator, name: str, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and a null mask, with the cases of SEMANTICS 5b at random rows."""
    if name == "temperature_c":
        v = rng.choice([20.0, 22.5, 25.0, 27.5, 30.0], size=n)
    else:
        v = rng.normal(loc=2.0 + k, scale=1.5, size=n)
    if name in ("freq_hz", "soc_pct"):
        v = np.abs(v) * 10.0
    u = rng.random(n)
    if name == "current_a":
        v[u < 0.15] = -2.0
    if name == "soc_pct":
        v[u < 0.05] = -1.5  # log1p of x <= -1: null
    if name == "voltage_v":
        v[u < 0.03] = 1e300
    w = rng.random(n)
    v[(w > 0.90) & (w < 0.93)] = np.nan
    v[(w > 0.93) & (w < 0.95)] = np.inf
    v[(w > 0.95) & (w < 0.97)] = -np.inf
    return v, w >= 0.97


def write_special_dataset(root: Path, specs: Sequence[StreamSpec], *, seed: int = 0,
                          chunk_rows: int = 16) -> Dataset:
    """Parquet and zarr segments (alternating) holding exact -2.0s, nulls (NaN in zarr),
    NaNs, infinities and 1e300s; the reference data read back from the files."""
    rng = np.random.default_rng(seed)
    storage = Storage.from_uri(root.resolve().as_uri())
    pieces: list[list[tuple[str, int, int]]] = []
    infos: dict[str, Any] = {}
    k = 0
    for spec in specs:
        mine = []
        for j, rows in enumerate(spec.pieces):
            cols = {c: _column(rng, c, i, rows) for i, c in enumerate(COLUMNS[spec.protocol])
                    if c not in spec.lacks}
            cidx = spec.cidx * 100 + j
            rel = f"{spec.protocol}/{spec.set_id}_{spec.cell}_{cidx}"
            if k % 2:
                rel += ".zarr"
                write_zarr_segment(root, rel, {c: np.where(null, np.nan, v)
                                               for c, (v, null) in cols.items()},
                                   chunk_rows=chunk_rows)
            else:
                rel += ".parquet"
                write_parquet_segment(root, rel, {c: pa.array(v, mask=null)
                                                  for c, (v, null) in cols.items()},
                                      row_group_rows=chunk_rows)
            k += 1
            infos[rel] = inspect_segment(storage, rel)
            mine.append((rel, manifest_row_id(spec.set_id, spec.cell, cidx, spec.protocol),
                         rows))
        pieces.append(mine)
    streams = Streams.from_pieces(
        protocols=tuple(sorted({s.protocol for s in specs})),
        stream_protocols=[s.protocol for s in specs],
        group_keys=[(s.set_id, s.cell, s.cidx, s.protocol) for s in specs],
        alignment_keys=[(s.set_id, s.cell, s.cidx) for s in specs],
        pieces=pieces,
    )
    ds = Dataset(root=root, streams=streams, segments=infos)
    ds.data = read_back(ds)
    return ds


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_special_dataset(tmp_path_factory.mktemp("input-valid-ds"), SPECS, seed=5)


def _builder(plan: PlanContext, *, blocks: BlockUse, tier: Tier | None = None) -> BatchBuilder:
    return BatchBuilder(plan, Storage.from_uri(plan.root_uri), ChunkCache(64 << 20),
                        batch_schema(plan_id=plan.plan_id, input_valid=plan.input_valid),
                        tier=tier, blocks=blocks, lazy_provenance=True)


def reference_for(ds: Dataset, config: LoaderConfig, plan: PlanContext, *, epoch: int,
                  rank: int, world_size: int) -> list[np.ndarray]:
    """The reference ``input_valid`` of each record batch of one rank's pass: lanes from the
    independent schedule reference (an aligned plan's parts: from the plan's schedule),
    values from the files."""
    refs = ref_streams(ds.streams)
    if config.align_by is None:
        batches = reference_rank(refs, config, epoch, rank=rank, world_size=world_size)
    else:
        schedule = plan.schedule(epoch)
        gs = rank_batches(schedule, rank=rank, world_size=world_size,
                          drop_incomplete_distributed=config.drop_incomplete_distributed)
        batches = schedule_batches(schedule, ds.streams.protocols, gs.tolist())
    return [reference_input_valid(b, refs, ds.data, config) for b in batches]


def _check(built: BuiltBatch, plain: BuiltBatch, want: np.ndarray, config: LoaderConfig,
           counts: dict[str, int], where: str) -> None:
    assert plain.input_valid is None, where
    assert built.input_valid is not None, where
    got = built.input_valid.view(np.bool_)
    np.testing.assert_array_equal(got, want, err_msg=where)
    for name in ("windows", "mask", "has_channel"):  # row T's inputs and row 0's targets too
        assert getattr(built, name).tobytes() == getattr(plain, name).tobytes(), (where, name)
    assert built.meta.encode() == plain.meta.encode(), where
    inputs = built.inputs
    assert (inputs[~got] == INPUT_PAD).all(), where
    counts["real -2.0"] += int(((inputs == INPUT_PAD) & got).sum())
    counts["filled"] += int((~got).sum())


def _pass(plan: PlanContext, epoch: int, rank: int, world_size: int) -> tuple[Any, np.ndarray]:
    schedule = plan.schedule(epoch)
    return schedule, rank_batches(schedule, rank=rank, world_size=world_size,
                                  drop_incomplete_distributed=plan.spec.drop_incomplete_distributed)


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("blocks", ["always", "cached"])
def test_general_builder_gives_the_reference(dataset: Dataset, name: str,
                                             blocks: BlockUse) -> None:
    """Blocks (``"always"``) and chunks (``"cached"``, nothing warmed): each part of a pass."""
    config = config_of(name)
    plain_plan = dataset.plan(config, plan_id=name)
    plan = plain_plan.with_input_valid()
    plain, valid = _builder(plain_plan, blocks=blocks), _builder(plan, blocks=blocks)
    counts = {"real -2.0": 0, "filled": 0}
    for epoch, rank, world in ((0, 0, 1), (1, 1, 2)):
        schedule, batches = _pass(plan, epoch, rank, world)
        want = reference_for(dataset, config, plan, epoch=epoch, rank=rank, world_size=world)
        assert len(want) == batches.shape[0] > 0
        for i, g in enumerate(batches.tolist()):
            _check(valid.build_arrays(schedule, g, batch_idx=i),
                   plain.build_arrays(schedule, g, batch_idx=i), want[i], config, counts,
                   f"{name} {blocks} epoch {epoch} batch {i}")
    assert counts["real -2.0"] > 0, counts
    assert counts["filled"] > 0, counts


class _Memory:
    """A consumer's batch memory (what a GPU feed's page-locked buffer is), in numpy."""

    short_lanes = False

    def gather(self, windows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return windows[rows]

    def empty(self, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        return np.empty(shape, dtype=dtype)


class _ShortLanesMemory(_Memory):
    """A consumer's memory that takes a batch whose lanes end early as new arrays (what
    ``windpipe.sdk._arrays.AlignedMemory`` says)."""

    short_lanes = True


@pytest.mark.parametrize("name", ["sequential", "shuffled", "stateful-k2", "no-dist-drop"])
@pytest.mark.parametrize("with_tier", [False, True])
def test_window_path_gives_the_reference(dataset: Dataset, tmp_path: Path, name: str,
                                         with_tier: bool) -> None:
    """Full windows and lanes that end early, into new arrays or a consumer's memory."""
    config = config_of(name)
    tier = Tier(tmp_path / "tier", budget_bytes=64 << 20) if with_tier else None
    plain_plan = dataset.plan(config, plan_id=name)
    plan = plain_plan.with_input_valid()
    plain = _builder(plain_plan, blocks="always", tier=tier)
    valid = _builder(plan, blocks="always", tier=tier)
    schedule, batches = _pass(plan, 0, 0, 1)
    want = reference_for(dataset, config, plan, epoch=0, rank=0, world_size=1)
    end = int(batches.shape[0])
    counts = {"real -2.0": 0, "filled": 0}
    fast: dict[str, set[int]] = {}
    for memory in (None, _Memory(), _ShortLanesMemory()):
        ours = valid.window_pass(schedule, batches, start=0, end=end)
        theirs = plain.window_pass(schedule, batches, start=0, end=end)
        built_here = fast.setdefault(type(memory).__name__, set())
        for i in range(end):
            built = ours.build(i, memory=memory)
            other = theirs.build(i, memory=memory)
            assert (built is None) == (other is None)
            if built is None or other is None:
                continue
            built_here.add(i)
            _check(built, other, want[i], config, counts, f"{name} window path batch {i}")
    assert fast["NoneType"]
    # a GPU feed's buffer takes full windows only; the short-lanes memory all that new
    # arrays take
    assert fast["_Memory"] < fast["_ShortLanesMemory"] == fast["NoneType"]
    assert counts["real -2.0"] > 0, counts
    assert counts["filled"] > 0, counts


def test_valid_inputs_hold_the_scaled_file_values(dataset: Dataset) -> None:
    """Where ``input_valid`` is True the input is the file's value, scaled (so a True
    ``-2.0`` is a value of the data, here 20 C under standard scaling or -2 A)."""
    config = config_of("sequential")
    plan = dataset.plan(config).with_input_valid()
    builder = _builder(plan, blocks="always")
    refs = ref_streams(dataset.streams)
    schedule, batches = _pass(plan, 0, 0, 1)
    seen = 0
    for i, (g, ref) in enumerate(zip(batches.tolist(), reference_rank(refs, config, 0, rank=0,
                                                                      world_size=1),
                                     strict=True)):
        built = builder.build_arrays(schedule, g, batch_idx=i)
        assert built.input_valid is not None
        cols = config.input_columns(ref.protocol)
        for b, t, c in zip(*np.nonzero(built.input_valid), strict=True):
            s, o = ref.lanes[b]
            x = float(dataset.data[s][cols[c]][o + t])
            want = np.float32(scaled_input(x, config.scaling_for(cols[c])))
            assert built.inputs[b, t, c] == want, (i, b, t, c)
            seen += 1
    assert seen > 0


def test_a_plan_read_with_input_valid_keeps_its_identity(dataset: Dataset) -> None:
    """Same plan id, the same schedules (one object), other chunk and block keys only for
    the read with ``input_valid``; the plain plan's keys are what they were."""
    plain = dataset.plan(config_of("shuffled"), plan_id="p-keys")
    valid = plain.with_input_valid()
    assert valid is plain.with_input_valid()
    assert valid.with_input_valid() is valid
    assert valid.plan_id == plain.plan_id
    assert valid.spec == plain.spec
    assert not plain.input_valid
    assert valid.input_valid
    assert valid.schedule(0) is plain.schedule(0)
    again = dataset.plan(config_of("shuffled"), plan_id="p-keys")
    assert [x.key for x in block_layouts(again)] == [x.key for x in block_layouts(plain)]
    assert again.chunk_keys == plain.chunk_keys
    assert not {x.key for x in block_layouts(valid)} & {x.key for x in block_layouts(plain)}
    assert not set(valid.chunk_keys) & set(plain.chunk_keys)
