"""The plan report is exact, on every plan shape, against what a
real Flight server streams and pins:

* ``real_tokens`` is the number of mask-true positions of the streamed epoch, also where a
  lane's stream lacks a target column (its mask is all False, SEMANTICS 5a);
* ``cache_working_set_bytes`` is the most chunk bytes one batch pins: the distinct chunks
  its lanes read (computed here from the batches' provenance and the segments' chunk
  sizes, read straight from the files) times the bytes of a cached row, and the server's
  own pins (every ``acquire`` of its cache) agree;
* an aligned plan's ``dropped`` counts only what ``drop_incomplete_batches`` left out, not
  groups whose keys have no window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

from tests.flight_server.helpers import (
    Dataset,
    Received,
    StreamSpec,
    assert_pass_equal,
    consume,
    expected_pass,
    start_server,
    write_dataset,
)
from tests.reference.aligned_ref import reference_aligned
from tests.reference.schedule_ref import ref_streams
from windpipe.services.contract.configs import LoaderConfig, ScalingSpec, WindowConfig
from windpipe.services.contract.identity import rng_for
from windpipe.services.contract.wire import FlightCommand

# keys in this order: (c1, 1), (c1, 2), (c2, 1), (c2, 2), (c3, 1), (c4, 1), (c5, 1), (c6, 1),
# (c7, 1)
SPECS = [
    StreamSpec("cycling", "c1", 1, (37, 50)),
    StreamSpec("hppc", "c1", 1, (45,), lacks=("soc_pct",)),  # lacks a target: mask False
    StreamSpec("cycling", "c1", 2, (30,), lacks=("temperature_c",), float32=True),  # an input
    StreamSpec("cycling", "c2", 1, (64,), float32=True),
    StreamSpec("hppc", "c2", 1, (20, 21)),
    StreamSpec("cycling", "c2", 2, (9, 30), lacks=("temperature_c",)),
    StreamSpec("cycling", "c3", 1, (41,), lacks=("voltage_v",)),  # lacks its only target
    StreamSpec("hppc", "c3", 1, (33,), float32=True),
    StreamSpec("cycling", "c4", 1, (26,)),
    StreamSpec("cycling", "c5", 1, (1,)),  # too short for any window: keys c5 and c6 form
    StreamSpec("hppc", "c6", 1, (1,)),  # an aligned group of B=2 keys without a window
    StreamSpec("hppc", "c7", 1, (18,)),  # the ninth key: a group of one
]
INPUTS = {"cycling": ("current_a", "voltage_v", "temperature_c"),
          "hppc": ("current_a", "voltage_v")}
TARGETS = {"cycling": ("voltage_v",), "hppc": ("voltage_v", "soc_pct")}
SCALING = (ScalingSpec(column="current_a", input_min=-3, input_max=8),)
ALIGNED = {"align_by": "alignment_key",
           "window_by_protocol": {"hppc": WindowConfig(batch_size=2, seq_len=4)}}
CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"default_window": WindowConfig(batch_size=3, seq_len=5)},
    "plain_step": {"default_window": WindowConfig(batch_size=2, seq_len=4, step_rows=11,
                                                  drop_incomplete=True),
                   "drop_incomplete_batches": True},
    "shuffled": {"strategy": "shuffled", "seed": 5,
                 "default_window": WindowConfig(batch_size=3, seq_len=6)},
    "stateful": {"stateful_n_windows": 2, "default_window": WindowConfig(batch_size=2, seq_len=6)},
    "whole_streams": {"stateful_n_windows": -1, "strategy": "shuffled",
                      "default_window": WindowConfig(batch_size=2, seq_len=7,
                                                     drop_incomplete=True)},
    "chain": {"stateful_n_windows": 2, "cross_protocol_state_carry": "chain",
              "protocol_order": ("hppc", "cycling"), "strategy": "shuffled",
              "default_window": WindowConfig(batch_size=2, seq_len=5)},
    "aligned": {**ALIGNED, "default_window": WindowConfig(batch_size=2, seq_len=6)},
    "aligned_shuffled": {**ALIGNED, "strategy": "shuffled", "seed": 3,
                         "drop_incomplete_batches": True,
                         "default_window": WindowConfig(batch_size=2, seq_len=5,
                                                        drop_incomplete=True)},
}
EPOCHS = (0, 1)


def _config(name: str) -> LoaderConfig:
    return LoaderConfig(inputs=INPUTS, targets=TARGETS, scaling=SCALING, **CONFIGS[name])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    # chunks of 5 rows, pieces of several chunks: lanes straddle chunks and pieces
    return write_dataset(tmp_path_factory.mktemp("report-exact"), SPECS, fmt="mixed",
                         chunk_rows=5, seed=11)


@pytest.fixture(scope="module")
def served(dataset: Dataset) -> dict[str, Any]:
    """One server (chunk path only: no blocks) streaming every plan; every ``acquire`` of
    its cache is recorded with the bytes it pins."""
    plans = {name: dataset.plan(_config(name), plan_id=name) for name in CONFIGS}
    running = start_server(plans, auto_blocks=False, readahead_batches=0)
    cache = running.server.cache
    pinned: list[int] = []
    acquire = cache.acquire

    def recording(requests: Any) -> Any:
        pinned.append(sum({r.key: r.nbytes for r in requests}.values()))
        return acquire(requests)

    cache.acquire = recording  # type: ignore[method-assign]
    passes: dict[tuple[str, int], tuple[list[Received], list[int]]] = {}
    try:
        for name in CONFIGS:
            for epoch in EPOCHS:
                pinned.clear()
                got = consume(running.location, FlightCommand(name, epoch=epoch))
                passes[(name, epoch)] = (got, list(pinned))
    finally:
        running.stop(grace_s=5)
    return {"plans": plans, "passes": passes}


def _chunk_rows(root: Path, rel: str) -> list[int]:
    """The rows of each chunk of a segment, read from the file itself."""
    path = root / rel
    if path.suffix == ".zarr":
        arrays = list(zarr.open_group(str(path), mode="r").arrays())
        n, r = int(arrays[0][1].shape[0]), int(arrays[0][1].chunks[0])
        return [min(r, n - k) for k in range(0, n, r)]
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def _pinned_bytes(r: Received, chunks: dict[str, list[int]]) -> int:
    """The distinct chunk bytes one received batch read: every chunk any lane's segment
    range overlaps, once, times the bytes of a cached row ((C_in + C_out) float32)."""
    read: set[tuple[str, int]] = set()
    columns = {n: r.batch.column(n).to_pylist()
               for n in ("seg_path", "seg_row_start", "seg_row_count")}
    for paths, starts, counts in zip(columns["seg_path"], columns["seg_row_start"],
                                     columns["seg_row_count"], strict=True):
        for path, lo, n in zip(paths, starts, counts, strict=True):
            edge = 0
            for k, rows in enumerate(chunks[path]):
                if edge < lo + n and lo < edge + rows:
                    read.add((path, k))
                edge += rows
    return sum(chunks[p][k] for p, k in read) * (r.meta.c_in + r.meta.c_out) * 4


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("epoch", EPOCHS)
def test_real_tokens_are_the_streamed_mask(served: dict[str, Any], name: str,
                                           epoch: int) -> None:
    artifact = served["plans"][name].artifact
    report = artifact.report(schedule=artifact.epoch_schedule(epoch))
    got, _ = served["passes"][(name, epoch)]
    assert len(got) == report.batches * (len(INPUTS) if "aligned" in name else 1) > 0
    assert report.real_tokens == sum(int(r.mask.sum()) for r in got)
    for protocol, numbers in report.protocols.items():
        mine = sum(int(r.mask[np.asarray(r.batch.column("protocol").to_pylist())
                              == protocol].sum()) for r in got)
        assert numbers.real_tokens == mine, protocol
    # real lanes of the streams lacking a target column are streamed, all masked out
    assert any(((np.asarray(r.batch.column("window_offset").to_pylist()) >= 0)
                & ~r.mask.any(axis=1)).any() for r in got)


@pytest.mark.parametrize("name", [n for n in CONFIGS if "aligned" not in n])
def test_the_streamed_batches_equal_the_reference(dataset: Dataset, served: dict[str, Any],
                                                  name: str) -> None:
    """The batches the report is checked against are the contract's (SEMANTICS 3 to 5a)."""
    for epoch in EPOCHS:
        got, _ = served["passes"][(name, epoch)]
        want = expected_pass(dataset, _config(name), epoch=epoch, rank=0, world_size=1)
        assert_pass_equal(got, want, dataset, _config(name))


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("epoch", EPOCHS)
def test_working_set_is_the_worst_batch_the_server_pins(dataset: Dataset, served: dict[str, Any],
                                                        name: str, epoch: int) -> None:
    artifact = served["plans"][name].artifact
    report = artifact.report(schedule=artifact.epoch_schedule(epoch))
    got, pinned = served["passes"][(name, epoch)]
    chunks = {path: _chunk_rows(dataset.root, path) for path in dataset.segments}
    per_batch = [_pinned_bytes(r, chunks) for r in got]
    assert report.cache_working_set_bytes == max(per_batch) > 0
    assert pinned == per_batch  # what the server pinned, batch by batch (part by part)


@pytest.mark.parametrize("name", ["aligned", "aligned_shuffled"])
def test_aligned_dropped_counts_only_what_drop_rules_drop(dataset: Dataset,
                                                          served: dict[str, Any],
                                                          name: str) -> None:
    config = _config(name)
    b = config.default_window.batch_size
    for epoch in EPOCHS:
        artifact = served["plans"][name].artifact
        report = artifact.report(schedule=artifact.epoch_schedule(epoch))
        streams = ref_streams(dataset.streams)
        want = reference_aligned(streams, config, epoch)
        assert report.batches == len(want) == len(
            {r.meta.batch_idx for r in served["passes"][(name, epoch)][0]})
        # groups of B keys in the epoch's key order; a group whose keys have no window
        # yields nothing and is not a drop (the sequential order has one: keys c5, c6)
        keys = list(dict.fromkeys(s.alignment_key for s in streams))
        order = list(range(len(keys)))
        if config.strategy == "shuffled":
            order = _key_order(name, epoch, len(keys))
        windows = {k: _has_window(streams, keys[k], config) for k in order}
        groups = [order[i:i + b] for i in range(0, len(order), b)]
        assert config.strategy == "shuffled" or any(
            not any(windows[k] for k in g) for g in groups)
        dropped = [g for g in groups if any(windows[k] for k in g)
                   and config.drop_incomplete_batches and len(g) < b]
        assert report.dropped.incomplete_groups == len(dropped)


def _key_order(name: str, epoch: int, n: int) -> list[int]:
    """SEMANTICS 9: the shuffled key order is this permutation (shared by definition)."""
    return [int(i) for i in rng_for("aligned-keys", _config(name).seed, epoch).permutation(n)]


def _has_window(streams: list[Any], key: tuple[Any, ...], config: LoaderConfig) -> bool:
    """Whether some stream of ``key`` has a lane window (SEMANTICS 9, phase 0)."""
    for s in streams:
        if s.alignment_key != key:
            continue
        w = config.window_for(s.protocol)
        complete = (s.n_rows - 1) // w.seq_len >= 1
        if complete or (not w.drop_incomplete and s.n_rows >= 2):
            return True
    return False
