"""A ``block_shuffled`` plan (SEMANTICS 3c) end to end: made by the real catalog (embedded,
no server), streamed through the SDK, and every batch equal to a reference computed from
the files: the chunk layout read from the parquet row groups and zarr chunks, the order
by the plain-loop reference of ``tests/services/planning/test_block_shuffled.py``, the
values by ``tests.reference.schedule_ref.reference_values``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

import windpipe
from tests.flight_server.helpers import Dataset, read_back
from tests.reference.schedule_ref import ref_streams, reference_values
from tests.services.planning.test_block_shuffled import ref_schedule
from windpipe.sdk import InvalidConfig, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.planning.streams import Streams
from windpipe.services.synth import write_synthetic_dataset

ROW_GROUP = 48
ROW_BYTES = 3 * 4  # two inputs and one target, float32


def _config(budget: int | None) -> LoaderConfig:
    return LoaderConfig(
        split="train", strategy="block_shuffled", shuffle_block_bytes=budget, seed=11,
        default_window=WindowConfig(batch_size=4, seq_len=24),
        inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    )


def _file_chunks(root: Path, streams: Streams) -> list[list[int]]:
    """Each stream's chunk row counts, read from the segment files themselves."""
    out: list[list[int]] = [[] for _ in range(streams.count)]
    for p, rel in enumerate(streams.piece_path):
        path = root / rel
        if path.suffix == ".zarr":
            group = zarr.open_group(str(path), mode="r")
            arr = next(a for _, a in group.arrays())
            n, c = int(arr.shape[0]), int(arr.chunks[0])
            rows = [c] * (n // c) + ([n % c] if n % c else [])
        else:
            meta = pq.ParquetFile(path).metadata
            rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        out[int(streams.piece_stream[p])].extend(rows)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("block-data") / "data"
    write_synthetic_dataset(out, cells=3, cycles=3, rows_per_cycle=300, row_group_rows=ROW_GROUP,
                            hppc_every=3, eis_every=3)
    return out


def test_a_block_shuffled_plan_streams_the_reference_batches(tmp_path: Path,
                                                             data: Path) -> None:
    with windpipe.embedded(tmp_path / "state") as cat:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ver = cat.register("blocks", root=data.resolve().as_uri(),
                               manifest="manifest.parquet")
        split = ver.split(ValidationConfig.sample(fraction=0.25, seed=3))
        with pytest.raises(InvalidConfig, match="smallest workable") as err:
            split.plan(_config(1))  # a 422 naming the budget that works
        need = int(err.value.details["min_shuffle_block_bytes"])
        config = _config(4 * need)
        plan = split.plan(config)
        artifact = PlanArtifact.from_ipc(plan._state.artifact_bytes(plan.id))
        streams = artifact.streams
        chunks = _file_chunks(data, streams)
        values = read_back(Dataset(root=data, streams=streams, segments={}))
        refs = ref_streams(streams)
        report = plan.report()
        assert report["strategy"] == "block_shuffled"
        assert report["shuffle_blocks"]["budget_bytes"] == 4 * need
        assert 0 < report["shuffle_blocks"]["working_set_bytes"] <= 4 * need
        assert 0.0 < report["shuffle_quality"] < 1.0
        for epoch in (0, 1):
            want = ref_schedule(streams, config, chunks, epoch, row_bytes=ROW_BYTES)
            assert len(want) > 8
            for world, rank, start in ((1, 0, 0), (2, 1, 0), (1, 0, 5)):
                mine = [b for b in want if b.unit % world == rank]
                mine = mine[:min(len([b for b in want if b.unit % world == r])
                                 for r in range(world))][start:]
                got = list(plan.batches(epoch=epoch, rank=rank, world_size=world,
                                        start_batch=start, progress=False))
                assert len(got) == len(mine), (epoch, world, rank, start)
                for batch, ref in zip(got, mine, strict=True):
                    _assert_batch(batch, ref, refs, values, config, streams)


def _assert_batch(batch: Any, ref: Any, refs: Any, values: Any, config: LoaderConfig,
                  streams: Streams) -> None:
    inputs, targets, mask = reference_values(ref, refs, values, config)
    assert list(batch.state.window_offsets) == [lane[1] for lane in ref.lanes]
    assert [tuple(k) for k in batch.state.group_keys] == [
        tuple(streams.group_keys[s]) for s in ref.lane_streams]
    np.testing.assert_array_equal(batch.mask.numpy(), mask)
    np.testing.assert_allclose(batch.inputs.numpy(), inputs, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(batch.targets.numpy(), targets, rtol=2e-6, atol=1e-6)
