"""JAX batches (``windpipe.jax``) against a real deployment: a catalog and a Flight server
sharing a host tier, over real files. Every batch equals, byte for byte, the numpy pass it
is made from and the torch batch of the same plan, rank and resume point, over both
transports and every plan shape (sequential, shuffled, block-shuffled, stateful,
aligned); plain plans also equal the plain-loop reference read straight from the files.
On the CPU the arrays are the numpy buffers themselves where the loader says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import windpipe.jax as wj
from tests.flight_server.helpers import Dataset, read_back
from tests.reference.schedule_ref import ref_streams, reference_rank, reference_values
from tests.sdk.deployment import deployment
from windpipe.sdk import (
    Catalog,
    InvalidConfig,
    LoaderConfig,
    ScalingSpec,
    ValidationConfig,
    WindowConfig,
)
from windpipe.sdk import _arrays as arrays_module
from windpipe.sdk._arrays import (
    ALIGNMENT,
    INLINE_COPY_BYTES,
    AlignedArrays,
    ArrayBatch,
    aligned_empty,
)
from windpipe.sdk._jax import JAX_HINT, JaxAlignedBatch, JaxBatch, JaxMissing, require_jax
from windpipe.sdk._jax_batch import _direct_put, place_array
from windpipe.services.planning.artifact import PlanArtifact

ROOT = Path(__file__).resolve().parents[2]
_IO: dict[str, Any] = {
    "inputs": {"cycling": ("current_a", "voltage_v", "temperature_c"), "hppc": ("voltage_v",)},
    "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
    "scaling": (ScalingSpec(column="current_a", input_min=-5.0, input_max=5.0, clip=True),
                ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.3)),
}
PLANS: dict[str, LoaderConfig] = {
    "sequential": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=32), **_IO),
    "shuffled": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=20),
                             strategy="shuffled", seed=7, **_IO),
    "block_shuffled": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=24),
                                   strategy="block_shuffled", shuffle_block_bytes=1 << 20,
                                   seed=11, **_IO),
    "stateful": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=24),
                             stateful_n_windows=2, **_IO),
    "aligned": LoaderConfig(
        align_by="alignment_key", default_window=WindowConfig(batch_size=2, seq_len=16),
        inputs={"cycling": ("current_a", "voltage_v"), "hppc": ("current_a",)},
        targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)}, scaling=_IO["scaling"]),
    "sharded": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=16),
                            strategy="shuffled", seed=3, drop_incomplete_batches=True, **_IO),
}
PASSES = ((0, 0, 1, 0), (1, 1, 2, 0), (1, 0, 2, 2))  # epoch, rank, world size, start batch


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-jax")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state",
                    tier_bytes=256 << 20) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.3, seed=1))
        d.extra.update(cat=cat, root=synth_dataset.path,
                       plans={name: split.plan(cfg) for name, cfg in PLANS.items()})
        yield d
        cat.close()


def _np(array: Any) -> np.ndarray:
    return np.asarray(array)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def _assert_plain(got: JaxBatch, host: ArrayBatch, torch_batch: Any) -> None:
    """One JAX batch equals its numpy batch and the torch batch, field by field."""
    assert got.batch_idx == host.batch_idx == torch_batch.batch_idx
    fields = {"inputs": torch_batch.inputs, "targets": torch_batch.targets,
              "mask": torch_batch.mask, "has_channel": torch_batch.has_channel,
              "target_valid": torch_batch.target_valid}
    for name, tensor in fields.items():
        _same(_np(getattr(got, name)), tensor.numpy())
        _same(np.ascontiguousarray(getattr(host, name)), tensor.numpy())
    assert got.channels == host.channels == torch_batch.channels
    assert got.state == host.state == torch_batch.state


def _assert_same(got: Any, host: Any, torch_batch: Any) -> None:
    if isinstance(got, JaxAlignedBatch):
        assert isinstance(host, AlignedArrays)
        assert got.protocols == tuple(host.parts) == torch_batch.protocols
        for p in got.protocols:
            _same(_np(got.has_data[p]), torch_batch.has_data[p].numpy())
            _assert_plain(got[p], host.parts[p], torch_batch[p])
        return
    assert isinstance(got, JaxBatch)
    assert isinstance(host, ArrayBatch)
    _assert_plain(got, host, torch_batch)


@pytest.mark.parametrize("transport", ["local", "flight"])
@pytest.mark.parametrize("name", [n for n in PLANS if n != "sharded"])
def test_jax_batches_equal_the_numpy_and_torch_ones(dep: Any, name: str,
                                                    transport: str) -> None:
    plan = dep.extra["plans"][name]
    compared = 0
    for epoch, rank, world, start in PASSES:
        loader = wj.loader(plan, epoch, rank=rank, world_size=world, transport=transport)
        loader.load_state({"plan_id": plan.id, "epoch": epoch, "batch": start})
        assert len(loader) == plan.pass_length(epoch, rank=rank, world_size=world,
                                               start_batch=start)
        hosts = list(loader.host_batches())
        loader.load_state({"plan_id": plan.id, "epoch": epoch, "batch": start})
        got = list(loader)
        want = list(plan.batches(epoch, rank, world, start, transport=transport))
        assert len(got) == len(hosts) == len(want) > 0, (name, epoch, rank, world, start)
        for g, h, w in zip(got, hosts, want, strict=True):
            _assert_same(g, h, w)
        assert loader.state() == {"plan_id": plan.id, "epoch": epoch,
                                  "batch": got[-1].batch_idx + 1}
        compared += len(got)
    assert compared > 0


@pytest.mark.parametrize("name", ["sequential", "shuffled", "stateful"])
def test_jax_batches_equal_the_reference_from_the_files(dep: Any, name: str) -> None:
    plan = dep.extra["plans"][name]
    streams = PlanArtifact.from_ipc(plan._state.artifact_bytes(plan.id)).streams
    values = read_back(Dataset(root=dep.extra["root"], streams=streams, segments={}))
    refs = ref_streams(streams)
    for epoch, rank, world in ((0, 0, 1), (1, 1, 2)):
        want = reference_rank(refs, PLANS[name], epoch, rank=rank, world_size=world)
        got = list(wj.loader(plan, epoch, rank=rank, world_size=world))
        assert len(got) == len(want) > 0
        for batch, ref in zip(got, want, strict=True):
            inputs, targets, mask = reference_values(ref, refs, values, PLANS[name])
            np.testing.assert_array_equal(_np(batch.mask), mask)
            np.testing.assert_allclose(_np(batch.inputs), inputs, rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(_np(batch.targets), targets, rtol=2e-6, atol=1e-6)
            assert list(batch.state.window_offsets) == [lane[1] for lane in ref.lanes]


def _pointer(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


@pytest.mark.parametrize("transport", ["local", "flight"])
def test_on_the_cpu_an_aligned_array_is_the_numpy_buffer(dep: Any, transport: str) -> None:
    """A CPU jax.Array is the numpy memory itself when it starts on a 64-byte boundary:
    always ``inputs``, ``targets`` and ``target_valid`` (the loader makes them so), and
    the same-host path's mask and ``has_channel`` (built into aligned memory). A streamed
    batch's mask sits in gRPC's buffer, unaligned: XLA copies it, once."""
    cpu = jax.devices("cpu")[0]
    plan = dep.extra["plans"]["shuffled"]
    shared: dict[str, int] = {}
    batches = 0
    for host in wj.loader(plan, transport=transport).host_batches():
        assert isinstance(host, ArrayBatch)
        batches += 1
        for name, array in host.dense().items():
            placed = place_array(array, cpu)
            aligned = _pointer(array) % ALIGNMENT == 0
            assert (placed.unsafe_buffer_pointer() == _pointer(array)) == aligned, name
            shared[name] = shared.get(name, 0) + aligned
            _same(_np(placed), array)
    assert batches > 0
    for name in ("inputs", "targets", "target_valid"):
        assert shared[name] == batches, name
    if transport == "local":
        assert shared["mask"] > batches // 2  # full windows, built aligned
    unaligned = np.arange(1, 66, dtype=np.float32)[1:]  # 4 bytes past an aligned start
    copy = place_array(unaligned, cpu)
    assert copy.unsafe_buffer_pointer() != _pointer(unaligned)
    _same(_np(copy), unaligned)
    read_only = np.frombuffer(bytes(range(64)), dtype=np.uint8)  # DLPack refuses it
    _same(_np(place_array(read_only, cpu)), read_only)


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.uint8])
def test_the_direct_placement_is_what_device_put_gives(dtype: Any) -> None:
    """The loader's placement skips ``jax.device_put``'s Python, not its semantics: the
    same values, device, sharding and commitment, and on the CPU the same memory
    (the numpy buffer itself when aligned, a copy when not or when read-only)."""
    cpu = jax.devices("cpu")[0]
    direct = _direct_put(cpu)
    assert direct is not None  # this jax has the runtime call: the fast path is tested
    base = aligned_empty((256,), np.uint8)
    base[...] = np.arange(256, dtype=np.uint8) % 7
    cases = {"aligned": base[:128].view(dtype).reshape(4, -1),
             "unaligned": base[4:132].view(dtype).reshape(4, -1),
             "read-only": np.frombuffer(base.tobytes(), dtype=dtype)}
    for what, array in cases.items():
        got, want = direct(array), jax.device_put(array, cpu)
        _same(_np(got), _np(want))
        assert got.sharding == want.sharding == jax.sharding.SingleDeviceSharding(cpu)
        assert got.committed
        assert want.committed
        aliased = got.unsafe_buffer_pointer() == _pointer(array)
        assert aliased == (want.unsafe_buffer_pointer() == _pointer(array)), what
        if what == "aligned":
            assert aliased
        if what == "unaligned":
            assert not aliased


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 9])
def test_dense_copies_equal_the_window_views(channels: int) -> None:
    """``dense()`` copies a step's channels as one item, one channel at a time or in one
    call, by their count: each gives the views' bytes (a NaN's payload bits included), in
    aligned memory, and the same ``target_valid`` as the property."""
    rng = np.random.default_rng(channels)
    windows = rng.standard_normal((5, 13, channels + 2)).astype(np.float32)
    windows[1, 4, -1] = np.nan
    windows.view(np.uint32)[3, 2:9:3, :channels] = 0x7FC0_BEEF  # a quiet NaN, payload set
    mask = np.ones((5, 12), dtype=np.bool_)
    mask[0, 7:] = False
    batch = ArrayBatch(inputs=windows[:, :-1, :channels], targets=windows[:, 1:, channels:],
                       mask=mask, has_channel=np.ones((5, channels + 2), dtype=np.bool_),
                       channels=tuple(f"c{i}" for i in range(channels + 2)), batch_idx=0,
                       windows=windows)
    dense = batch.dense()
    for name in ("inputs", "targets"):
        assert dense[name].flags.c_contiguous
        assert _pointer(dense[name]) % ALIGNMENT == 0
        _same(dense[name], np.ascontiguousarray(getattr(batch, name)))
    _same(dense["target_valid"], batch.target_valid)
    assert not dense["target_valid"][1, 3]
    assert not dense["target_valid"][0, 7]
    assert dense["target_valid"].sum() == 5 * 12 - 5 - 1


@pytest.mark.parametrize("wider", [True, False])
@pytest.mark.parametrize("lanes_per_group", [1, 2, 3, 64])
def test_dense_copies_a_group_of_lanes_at_a_time_the_same(
    monkeypatch: pytest.MonkeyPatch, lanes_per_group: int, *, wider: bool,
) -> None:
    """A large batch is copied a group of lanes at a time (its window rows stay in cache
    for inputs and targets), its 3 input channels as 16-byte items that overlap the next
    step (``wider``) or one channel at a time: any group size, an uneven last group
    included, gives the views' bytes, NaN payloads too, and leaves ``targets`` (carved
    after ``inputs``) whole."""
    rng = np.random.default_rng(lanes_per_group)
    windows = rng.standard_normal((7, 11, 5)).astype(np.float32)
    windows.view(np.uint32)[2, 1:8:2, :] = 0x7FC0_BEEF
    monkeypatch.setattr(arrays_module, "_LANE_GROUP_BYTES", windows.strides[0] * lanes_per_group)
    monkeypatch.setattr(arrays_module, "_WIDER_MIN_STEPS", 1 if wider else 1 << 40)
    batch = ArrayBatch(inputs=windows[:, :-1, :3], targets=windows[:, 1:, 3:],
                       mask=np.ones((7, 10), dtype=np.bool_),
                       has_channel=np.ones((7, 5), dtype=np.bool_),
                       channels=tuple(f"c{i}" for i in range(5)), batch_idx=0, windows=windows)
    dense = batch.dense()
    for name in ("inputs", "targets"):
        _same(dense[name], np.ascontiguousarray(getattr(batch, name)))
    _same(dense["target_valid"], batch.target_valid)


def test_a_run_is_copied_by_wider_items_only_where_its_row_has_room() -> None:
    """Three float32 channels (12 bytes) are copied as 16-byte items only where 16 bytes
    from each step stay in its row: not for three channels at a row's end."""
    windows = np.zeros((2, 9, 4), dtype=np.float32)
    first, last = windows[:, :-1, :3], windows[:, 1:, 1:]
    assert arrays_module._room(first, windows) == 0  # 16 steps: too few to pay
    assert arrays_module._wider_item(first, 16) == np.dtype((np.void, 16))
    assert arrays_module._wider_item(last, 12) is None
    assert arrays_module._wider_item(windows[:, :-1, :2], 16) is None  # 8 bytes: one move
    big = np.zeros((64, 513, 5), dtype=np.float32)  # 32,768 steps: the wide path's size
    assert arrays_module._room(big[:, :-1, :3], big) == 20
    assert arrays_module._room(big[:, 1:, 3:], big) == 8
    assert arrays_module._room(big[:, 1:, 3:], None) == 0


def _off_boundary(shape: tuple[int, ...], fill: np.ndarray) -> np.ndarray:
    """A bool array of ``shape`` holding ``fill``, starting 16 bytes past an aligned one."""
    base = aligned_empty((int(np.prod(shape)) + ALIGNMENT,), np.bool_)
    out = base[16:16 + int(np.prod(shape))].reshape(shape)
    out[...] = fill
    return out


@pytest.mark.parametrize("lanes", [8, 256])
def test_dense_aligns_a_large_unaligned_mask_and_input_valid(lanes: int) -> None:
    """A mask or ``input_valid`` of ``INLINE_COPY_BYTES`` or more that does not start on
    the boundary (the general builder's, a streamed batch's) comes out of ``dense()``
    copied into aligned memory, the same bytes (XLA would copy it through its transfer
    thread); a smaller one stays the batch's own array (XLA copies it in the call), and
    an aligned one is never copied. Placed, each is the same values."""
    t, c_in = 512, 3
    rng = np.random.default_rng(lanes)
    windows = rng.standard_normal((lanes, t + 1, c_in + 1)).astype(np.float32)
    windows[1, 9, -1] = np.nan
    mask = _off_boundary((lanes, t), rng.random((lanes, t)) < 0.9)
    valid_in = _off_boundary((lanes, t, c_in), rng.random((lanes, t, c_in)) < 0.5)
    batch = ArrayBatch(inputs=windows[:, :-1, :c_in], targets=windows[:, 1:, c_in:],
                       mask=mask, has_channel=np.ones((lanes, c_in + 1), dtype=np.bool_),
                       channels=tuple(f"c{i}" for i in range(c_in + 1)), batch_idx=0,
                       windows=windows, input_valid=valid_in)
    dense = batch.dense()
    large = mask.nbytes >= INLINE_COPY_BYTES
    assert large == (lanes == 256)
    for name, given in (("mask", mask), ("input_valid", valid_in)):
        _same(dense[name], given)
        copied = dense[name] is not given
        assert copied == (given.nbytes >= INLINE_COPY_BYTES), name
        if copied:
            assert _pointer(dense[name]) % ALIGNMENT == 0
            assert not np.shares_memory(dense[name], given)
    _same(dense["target_valid"], batch.target_valid)
    assert not dense["target_valid"][1, 8]
    aligned = aligned_empty(mask.shape, np.bool_)
    aligned[...] = mask
    batch.mask = aligned
    assert batch.dense()["mask"] is aligned
    cpu = jax.devices("cpu")[0]
    for name, array in dense.items():
        placed = place_array(array, cpu)
        _same(_np(placed), array)
        if _pointer(array) % ALIGNMENT == 0:
            assert placed.unsafe_buffer_pointer() == _pointer(array), name


def test_resume_is_the_uninterrupted_tail_and_shares_the_torch_state(dep: Any) -> None:
    plan = dep.extra["plans"]["stateful"]
    full = [b.batch_idx for b in wj.loader(plan, 1)]
    first = wj.loader(plan, 1)
    seen = []
    for batch in first:
        seen.append(batch.batch_idx)
        if len(seen) == 3:
            break
    state = first.state()
    assert state == {"plan_id": plan.id, "epoch": 1, "batch": 3}
    again = wj.loader(plan)
    again.load_state(state)
    assert again.epoch == 1
    assert len(again) == len(full) - 3
    assert seen + [b.batch_idx for b in again] == full
    assert [b.batch_idx for b in again] == full  # the next pass starts the epoch over
    # the torch dataset's state resumes a JAX loader, and the other way around
    dataset = plan.torch_dataset(1)
    dataset.load_state_dict(state)
    assert [b.batch_idx for b in dataset] == full[3:]
    with pytest.raises(InvalidConfig, match="belongs to plan"):
        again.load_state({**state, "plan_id": "p-other"})


def _readers() -> int:
    return sum(t.name == "windpipe-jax-loader" for t in threading.enumerate())


def test_on_the_cpu_batches_are_made_inline_unless_prefetch_asks(dep: Any) -> None:
    """On the CPU the default is no read-ahead thread; ``prefetch=2`` starts one, and both
    give the same batches and the same resume cursor."""
    plan = dep.extra["plans"]["shuffled"]
    before = _readers()
    inline = wj.loader(plan, 1)
    assert inline.prefetch == 0
    batches = iter(inline)
    got = [next(batches)]
    assert _readers() == before
    got += list(batches)
    ahead = wj.loader(plan, 1, prefetch=2)
    batches = iter(ahead)
    want = [next(batches)]
    assert _readers() == before + 1
    want += list(batches)
    assert len(got) == len(want) > 1
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, JaxBatch)
        assert isinstance(w, JaxBatch)
        assert g.batch_idx == w.batch_idx
        for name, array in g.arrays().items():
            _same(_np(array), _np(w.arrays()[name]))
    assert inline.state() == ahead.state()
    with pytest.raises(InvalidConfig, match="prefetch"):
        wj.loader(plan, prefetch=-1)


def test_ranks_come_from_jax_unless_given(dep: Any) -> None:
    plan = dep.extra["plans"]["sequential"]
    loader = wj.loader(plan)
    assert (loader.rank, loader.world_size) == (jax.process_index(), jax.process_count())
    with pytest.raises(InvalidConfig, match="rank 2"):
        list(wj.loader(plan, rank=2, world_size=2))
    with pytest.raises(InvalidConfig, match="does not use the option"):
        wj.loader(plan, num_workers=2)
    with pytest.raises(InvalidConfig, match="not both"):
        wj.loader(plan, device=jax.devices()[0],
                  sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))


_SHARDED = """
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import windpipe.jax as wj
from windpipe.sdk import Catalog
assert len(jax.devices()) == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("data",))
cat = Catalog(sys.argv[1])
plan = cat.plan(sys.argv[2])
out = []
for batch in wj.loader(plan, 1, sharding=NamedSharding(mesh, PartitionSpec("data"))):
    arrays = batch.arrays()
    shards = {k: sorted(s.device.id for s in a.addressable_shards) for k, a in arrays.items()}
    assert all(v == [0, 1, 2, 3] for v in shards.values()), shards
    assert all(a.addressable_shards[0].data.shape[0] == 1 for a in arrays.values())
    out.append({k: np.asarray(a).tobytes().hex() for k, a in arrays.items()})
cat.close()
print(json.dumps(out))
"""


def test_a_sharding_spreads_each_batch_over_the_devices(dep: Any) -> None:
    """Four CPU devices (a fresh process: XLA reads the device count at start-up)."""
    plan = dep.extra["plans"]["sharded"]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", _SHARDED, dep.url, plan.id], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = list(plan.batches(1))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        for name in ("inputs", "targets", "mask", "target_valid", "has_channel"):
            assert bytes.fromhex(g[name]) == getattr(w, name).numpy().tobytes(), name


_MULTI_PROCESS = """
import json, sys
import jax, numpy as np
port, pid = sys.argv[3], int(sys.argv[4])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid)
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import windpipe.jax as wj
from windpipe.sdk import Catalog
mesh = Mesh(np.array(jax.devices()), ("data",))  # 2 processes x 2 CPU devices
cat = Catalog(sys.argv[1])
loader = wj.loader(cat.plan(sys.argv[2]), 1, sharding=NamedSharding(mesh, PartitionSpec("data")))
out = {"rank": loader.rank, "world": loader.world_size, "batches": []}
for batch in loader:
    arrays = batch.arrays()
    got = {}
    for k, a in arrays.items():
        shards = sorted(a.addressable_shards, key=lambda s: s.index[0].start)
        assert a.shape[0] == 2 * shards[0].data.shape[0] * len(shards), (k, a.shape)
        got[k] = np.concatenate([np.asarray(s.data) for s in shards]).tobytes().hex()
    out["batches"].append(got)
cat.close()
jax.distributed.shutdown()
print(json.dumps(out))
"""


def test_processes_take_their_ranks_from_jax_distributed(dep: Any) -> None:
    """Two processes joined by ``jax.distributed`` (two CPU devices each): each loader's
    rank is its ``jax.process_index()``, each batch one global array over the four
    devices, and each process's own shards hold exactly the lanes torch gives that rank."""
    from tests.fixtures.servers import free_port  # noqa: PLC0415

    plan = dep.extra["plans"]["sharded"]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"}
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", _MULTI_PROCESS, dep.url, plan.id, port,
                               str(i)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    for i, (stdout, _) in enumerate(outs):
        got = json.loads(stdout.strip().splitlines()[-1])
        assert (got["rank"], got["world"]) == (i, 2)
        want = list(plan.batches(1, rank=i, world_size=2))
        assert len(got["batches"]) == len(want) > 0
        for g, w in zip(got["batches"], want, strict=True):
            for name in ("inputs", "targets", "mask", "target_valid", "has_channel"):
                assert bytes.fromhex(g[name]) == getattr(w, name).numpy().tobytes(), name


def test_without_jax_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(JaxMissing, match=r"pip install -e '\.\[jax\]'") as err:
        require_jax()
    assert JAX_HINT in str(err.value)


def test_importing_windpipe_jax_imports_neither_torch_nor_jax() -> None:
    code = ("import sys, windpipe.jax; "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules, "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jax'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
