"""The same-host path: batches built in the training process from the host's tier equal the
streamed ones byte for byte, for every plan shape, rank and resume point; several
processes share one decode; ``auto`` falls back to Flight when there is no usable tier."""

from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing as mp
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.flight_server.helpers import cache_stats, flight_actions
from tests.sdk.deployment import deployment
from windpipe.sdk import (
    Batch,
    Catalog,
    LoaderConfig,
    ResourceExhausted,
    ScalingSpec,
    Unavailable,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.contract.wire import ACTION_HEALTH

_IO: dict[str, Any] = {
    "inputs": {"cycling": ("current_a", "voltage_v", "temperature_c"), "hppc": ("voltage_v",)},
    "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
    "scaling": (ScalingSpec(column="current_a", input_min=-5.0, input_max=5.0, clip=True),
                ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.3)),
}
PLANS: dict[str, LoaderConfig] = {
    "plain": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=32), **_IO),
    "plain-step": LoaderConfig(
        default_window=WindowConfig(batch_size=3, seq_len=16, step_rows=70,
                                    drop_incomplete=True), **_IO),
    "stateful": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=24),
                             stateful_n_windows=2, **_IO),
    "shuffled": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=20),
                             strategy="shuffled", seed=7, **_IO),
    "chain": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=16),
                          strategy="shuffled", stateful_n_windows=-1,
                          cross_protocol_state_carry="chain", protocol_order=("hppc", "cycling"),
                          **_IO),
}
TIER = 256 << 20


def _streams(location: str) -> int:
    return int(flight_actions(location, ACTION_HEALTH)[0]["streams"])


def _bytes(batch: Batch) -> tuple[Any, ...]:
    return (batch.inputs.numpy().tobytes(), batch.targets.numpy().tobytes(),
            batch.mask.numpy().tobytes(), batch.state)


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory, synth_dataset: Any) -> Any:
    tmp = tmp_path_factory.mktemp("sdk-local")
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state", n_flight=2,
                    tier_bytes=TIER) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.3, seed=1))
        d.extra.update(cat=cat, plans={name: split.plan(cfg) for name, cfg in PLANS.items()})
        yield d
        cat.close()


@pytest.mark.parametrize("name", list(PLANS))
def test_local_batches_equal_streamed_ones(dep: Any, name: str) -> None:
    plan = dep.extra["plans"][name]
    assert plan.transport() == "local"  # auto: a server shares its tier with this host
    compared = 0
    for epoch in (0, 1):
        for rank, world, start in ((0, 1, 0), (1, 2, 0), (0, 2, 3)):
            args = {"epoch": epoch, "rank": rank, "world_size": world, "start_batch": start}
            local = [_bytes(b) for b in plan.batches(**args, transport="local")]
            streamed = [_bytes(b) for b in plan.batches(**args, transport="flight")]
            assert local == streamed, (name, args)
            compared += len(local)
    assert compared > 0


def test_loader_and_dataset_read_locally(dep: Any) -> None:
    plan = dep.extra["plans"]["shuffled"]
    want = [_bytes(b) for b in plan.batches(epoch=2, transport="flight")]
    served = sum(_streams(loc) for loc in dep.locations)
    assert served > 0
    assert [_bytes(b) for b in plan.loader(device="cpu", epoch=2)] == want
    dataset = plan.torch_dataset(epoch=2)
    assert [_bytes(b) for b in torch.utils.data.DataLoader(dataset, batch_size=None)] == want
    # neither local pass opened a Flight stream
    assert sum(_streams(loc) for loc in dep.locations) == served


def _read_locally(url: str, plan_id: str, out: Any) -> None:
    torch.set_num_threads(1)
    cat = Catalog(url)
    batches = [_bytes(b)[:3] for b in cat.plan(plan_id).batches(epoch=0, transport="local")]
    out.put(batches)
    cat.close()


@pytest.mark.slow
def test_processes_on_one_host_share_one_decode(tmp_path: Path, synth_dataset: Any) -> None:
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state",
                    tier_bytes=TIER) as d:
        cat = Catalog(d.url)
        ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                           manifest="manifest.parquet")
        plan = ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(PLANS["plain"])
        want = [_bytes(b)[:3] for b in plan.batches(epoch=0, transport="flight")]
        tier = d.flights[0].server.tier
        assert tier is not None
        # the stream held the split whole (auto blocks), decoded once into the tier
        assert tier.builds == 2  # one block per protocol
        streamed = cache_stats(d.locations[0])["bytes_read"]
        assert streamed > 0
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=_read_locally, args=(d.url, plan.id, out))
                 for _ in range(3)]
        for p in procs:
            p.start()
        got = [out.get(timeout=180) for _ in procs]
        for p in procs:
            p.join(30)
        assert got == [want] * 3
        # three more processes read it, and nothing more was decoded or read from storage
        assert tier.builds == 2
        assert cache_stats(d.locations[0])["bytes_read"] == streamed
        assert len(list((tmp_path / "state" / "tier").glob("*.wpb"))) == 2
        cat.close()


def test_auto_streams_without_a_usable_tier(tmp_path: Path, synth_dataset: Any) -> None:
    for tier_bytes, error in ((0, Unavailable), (4096, ResourceExhausted)):
        with deployment(f"sqlite:///{tmp_path / f'c{tier_bytes}.db'}",
                        tmp_path / f"state{tier_bytes}", tier_bytes=tier_bytes) as d:
            cat = Catalog(d.url)
            ver = cat.register("synth", root=synth_dataset.path.resolve().as_uri(),
                               manifest="manifest.parquet")
            plan = ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(
                PLANS["plain"])
            assert plan.transport() == "flight"
            assert len(list(plan.batches(epoch=0))) == plan.n_batches
            with pytest.raises(error) as info:
                plan.batches(epoch=0, transport="local")
            assert ("tier" in info.value.message) or ("--tier-bytes" in info.value.message)
            cat.close()


def test_local_batches_pickle_with_their_provenance(dep: Any) -> None:
    plan = dep.extra["plans"]["shuffled"]
    local = list(plan.batches(epoch=0, transport="local"))
    assert local
    assert local[0]._state is None  # provenance still lazy before pickling
    copies = [pickle.loads(pickle.dumps(b)) for b in local]
    assert [_bytes(c) for c in copies] == [_bytes(b) for b in local]
    assert [c.has_channel.tolist() for c in copies] == [b.has_channel.tolist() for b in local]


def test_a_kept_pass_hands_out_fresh_tensors(dep: Any) -> None:
    """A reader keeps a pass's tables for the next pass of the same epoch, yet
    every batch owns its tensors: no two batches share memory, and writing into every
    tensor of one pass changes nothing of the next."""
    plan = dep.extra["plans"]["shuffled"]
    want = [(*_bytes(b), b.has_channel.numpy().tobytes())
            for b in plan.batches(epoch=0, transport="flight", progress=False)]
    first = list(plan.batches(epoch=0, transport="local", progress=False))
    assert len(first) == len(want)
    for name in ("inputs", "targets", "mask", "has_channel"):
        spans = sorted((t.data_ptr(), t.numel() * t.element_size())
                       for t in (getattr(b, name) for b in first))
        for (lo, size), (nxt, _) in itertools.pairwise(spans):
            assert lo + size <= nxt, name  # disjoint memory
    for b in first:
        assert b.mask.dtype == b.has_channel.dtype == torch.bool
        b.inputs.fill_(-7.0)
        b.targets.fill_(-7.0)
        b.mask.fill_(False)
        b.has_channel.fill_(False)
    again = [(*_bytes(b), b.has_channel.numpy().tobytes())
             for b in plan.batches(epoch=0, transport="local", progress=False)]
    assert again == want


def _tier_files_open() -> int:
    """Descriptors of this process on tier block files (each mapping of a block holds one)."""
    fds = Path("/proc/self/fd")
    found = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):  # closed since listed
            found += str(fd.readlink()).endswith(".wpb")
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads Linux's /proc")
def test_closing_a_catalog_lets_go_of_its_mapped_blocks(dep: Any) -> None:
    """A training process that makes a new ``Catalog`` after an error (a renewed token)
    keeps no mapping of the old one's: ``close()`` drops the readers' mapped blocks then,
    not whenever the collector finds their cycles (disabled here), so neither open files
    nor RSS grow with every reconnection."""
    plan_id = dep.extra["plans"]["shuffled"].id

    def one_round() -> int:
        cat = Catalog(dep.url)
        n = sum(1 for _ in cat.plan(plan_id).batches(epoch=0, transport="local",
                                                      progress=False))
        assert n > 0
        during = _tier_files_open()
        cat.close()
        return during

    one_round()  # the in-process Flight server maps the blocks it warmed: its own, kept
    gc.collect()
    before = _tier_files_open()
    gc.disable()
    try:
        for _ in range(3):
            assert one_round() > before  # the pass mapped the plan's blocks
            assert _tier_files_open() == before
    finally:
        gc.enable()
