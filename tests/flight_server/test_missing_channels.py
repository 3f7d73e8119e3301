"""Streams that lack a channel: every streamed batch equals the plain-loop reference
(values, mask, ``has_channel``, provenance), across strategies, ranks and resumption."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow.flight as fl
import pytest

from tests.flight_server.helpers import (
    Dataset,
    StreamSpec,
    assert_pass_equal,
    consume,
    expected_pass,
    start_server,
    write_dataset,
)
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.contract.wire import FlightCommand
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache

SPECS = [
    StreamSpec("cycling", "c1", 1, (37, 50)),
    StreamSpec("cycling", "c1", 2, (30,), lacks=("temperature_c",), float32=True),
    StreamSpec("cycling", "c2", 1, (64,), float32=True),
    StreamSpec("cycling", "c2", 2, (9, 30), lacks=("temperature_c",)),
    StreamSpec("cycling", "c3", 1, (41,), lacks=("voltage_v",)),
    StreamSpec("hppc", "c1", 1, (45,), lacks=("soc_pct",)),
    StreamSpec("hppc", "c2", 1, (20, 21)),
    StreamSpec("hppc", "c3", 1, (33,), float32=True),
]
INPUTS = {"cycling": ("current_a", "voltage_v", "temperature_c"),
          "hppc": ("current_a", "voltage_v")}
TARGETS = {"cycling": ("voltage_v",), "hppc": ("voltage_v", "soc_pct")}
SCALING = (
    ScalingSpec(column="current_a", input_min=-3, input_max=8),
    ScalingSpec(column="temperature_c", input_min=0.0, input_max=10.0, clip=True),
)
CONFIGS: dict[str, dict[str, Any]] = {
    "sequential": {"default_window": WindowConfig(batch_size=3, seq_len=5)},
    "shuffled": {"strategy": "shuffled", "seed": 5,
                 "default_window": WindowConfig(batch_size=3, seq_len=6)},
    "stateful": {"stateful_n_windows": 2, "default_window": WindowConfig(batch_size=2, seq_len=6)},
    "chain": {"stateful_n_windows": 2, "cross_protocol_state_carry": "chain",
              "protocol_order": ("hppc", "cycling"), "strategy": "shuffled",
              "alignment_key": ("set_id", "cell_id", "cidx"),
              "default_window": WindowConfig(batch_size=2, seq_len=5)},
}


def _config(name: str) -> LoaderConfig:
    return LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING, **CONFIGS[name])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("missing-ds"), SPECS, fmt="mixed",
                         chunk_rows=16, seed=4)


@pytest.fixture(scope="module")
def server(dataset: Dataset) -> Any:
    running = start_server({name: dataset.plan(_config(name), plan_id=name) for name in CONFIGS})
    yield running
    running.stop(grace_s=5)


def test_the_dataset_lacks_what_it_says(dataset: Dataset) -> None:
    assert [sorted(d) for d in dataset.data][1] == ["current_a", "voltage_v"]
    plan = dataset.plan(_config("sequential"))
    assert len(plan.variants) > len(plan.specs)  # streams lacking columns read fewer


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize(("epoch", "world_size"), [(0, 1), (1, 2)])
def test_every_batch_equals_reference(dataset: Dataset, server: Any, name: str, epoch: int,
                                      world_size: int) -> None:
    config = _config(name)
    absent = 0
    for rank in range(world_size):
        got = consume(server.location, FlightCommand(name, epoch=epoch, rank=rank,
                                                     world_size=world_size))
        want = expected_pass(dataset, config, epoch=epoch, rank=rank, world_size=world_size)
        assert_pass_equal(got, want, dataset, config)
        absent += sum(int((~r.has_channel).sum()) for r in got)
    assert absent > 0


@pytest.mark.parametrize("name", ["shuffled", "stateful"])
def test_resumption_yields_the_tail_byte_for_byte(server: Any, name: str) -> None:
    full = consume(server.location, FlightCommand(name, epoch=1, rank=1, world_size=2))
    start = len(full) // 2
    tail = consume(server.location, FlightCommand(name, epoch=1, rank=1, world_size=2,
                                                  start_batch=start))
    assert len(tail) == len(full) - start > 0
    for a, b in zip(full[start:], tail, strict=True):
        assert a.meta.batch_idx == b.meta.batch_idx
        for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask),
                     (a.has_channel, b.has_channel)):
            assert x.tobytes() == y.tobytes()


def test_block_path_equals_chunk_path(dataset: Dataset, server: Any) -> None:
    """A batch gathered from blocks (the same-host path) and one copied from chunks are the
    same bytes, has_channel and mask included."""
    flight = server.server
    plan = flight.plans.get("shuffled")
    schedule, batches = flight._rank_pass(plan, 1, 0, 1)
    storage = flight.storage_for(plan.root_uri)
    by_blocks = BatchBuilder(plan, storage, ChunkCache(64 << 20), flight._schema(plan),
                             blocks="always")
    chunks = ChunkCache(64 << 20)
    by_chunks = BatchBuilder(plan, storage, chunks, flight._schema(plan), blocks="cached")
    for i, g in enumerate(np.asarray(batches).tolist()):
        a = by_blocks.build_arrays(schedule, g, batch_idx=i)
        assert by_chunks.block_requests(by_chunks.lane_plan(schedule, g)) is None
        b = by_chunks.build_arrays(schedule, g, batch_idx=i)
        for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask),
                     (a.has_channel, b.has_channel)):
            assert x.tobytes() == y.tobytes()


def test_a_raw_pyarrow_client_decodes_has_channel_from_the_wire_doc(server: Any) -> None:
    """docs/wire.md section 7's decoding without windpipe's package, on raw Flight."""
    client = fl.connect(server.location)
    cmd = json.dumps({"plan_id": "sequential", "epoch": 0}).encode()
    info = client.get_flight_info(fl.FlightDescriptor.for_command(cmd))
    want = consume(server.location, FlightCommand("sequential"))
    got = []
    for ep in info.endpoints:
        for chunk in client.do_get(ep.ticket):
            meta = json.loads(chunk.app_metadata.to_pybytes())
            b, t = chunk.data.num_rows, meta["seq_len"]

            def flat(name: str, dtype: Any, chunk: Any = chunk) -> np.ndarray:
                return np.asarray(chunk.data.column(name).values.to_numpy(
                    zero_copy_only=False), dtype=dtype)

            got.append((
                flat("inputs", np.float32).reshape(b, t, meta["c_in"]),
                flat("mask", np.uint8).astype(bool).reshape(b, t),
                flat("has_channel", np.uint8).astype(bool).reshape(b, len(meta["channels"])),
            ))
    client.close()
    assert len(got) == len(want) > 0
    for (inputs, mask, has), r in zip(got, want, strict=True):
        assert inputs.tobytes() == r.inputs.tobytes()
        np.testing.assert_array_equal(mask, r.mask)
        np.testing.assert_array_equal(has, r.has_channel)
    assert any(not h.all() for _, _, h in got)
