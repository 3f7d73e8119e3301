"""The aligned benchmark end to end on a tiny dataset: the three contenders read the same
batches (the user's memmap loader agrees with windpipe value for value) and the record
has positive, consistent numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import windpipe.sdk as sdk
from bench.aligned import (
    ALIGNED_CONTENDERS,
    aligned_config,
    memmap_batches,
    prepare_memmaps,
    run,
)
from tests.sdk.deployment import deployment
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.synth import write_synthetic_dataset


@pytest.mark.slow
def test_every_contender_reads_the_same_aligned_batches(tmp_path: Path) -> None:
    record = run(cells=3, cycles=6, rows_per_cycle=600, batch_size=4, seq_len=32, epochs=2,
                 work_dir=tmp_path)
    results = record["contenders"]
    assert set(results) == set(ALIGNED_CONTENDERS)
    first = results["numpy_memmap_aligned"]
    assert first["batches"] > 2
    for r in results.values():
        assert (r["batches"], r["tokens"]) == (first["batches"], first["tokens"])
        assert r["checksum"] == pytest.approx(first["checksum"], rel=1e-6)
        assert r["tokens_per_s"] > 0
        assert r["peak_rss_bytes"] > 10 << 20
    assert first["ratio_to_numpy"] == 1.0


@pytest.mark.slow
def test_the_memmap_loader_equals_windpipe_value_for_value(tmp_path: Path) -> None:
    """The baseline is only a baseline if it computes the same batches: every tensor of
    every protocol of every batch equals the SDK's."""
    data = write_synthetic_dataset(tmp_path / "data", cells=3, cycles=6, rows_per_cycle=400,
                                   seed=2, zarr_fraction=0.0, hppc_every=2, eis_every=3,
                                   missed_tests=0.3)
    with deployment(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "state") as dep, \
            sdk.Catalog(dep.url) as cat:
        ver = cat.register("b", root=data.path.resolve().as_uri(), manifest="manifest.parquet")
        plan = ver.split(sdk.ValidationConfig.sample(fraction=0.2, seed=1)).plan(
            aligned_config(4, 32))
        artifact = PlanArtifact.from_ipc(plan._state.artifact_bytes(plan.id))
        npy = prepare_memmaps(artifact, data.path, tmp_path)
        theirs = list(memmap_batches(artifact, npy, 2))
        ours = [b for e in range(2) for b in plan.batches(epoch=e, transport="flight")]
    assert len(theirs) == len(ours) > 0
    for mine, user in zip(ours, theirs, strict=True):
        assert tuple(user) == mine.protocols
        for p, (x, y, mask, has) in user.items():
            np.testing.assert_array_equal(mine.inputs[p].numpy(), x.numpy())
            np.testing.assert_array_equal(mine.targets[p].numpy(), y.numpy())
            np.testing.assert_array_equal(mine.mask[p].numpy(), mask.numpy())
            np.testing.assert_array_equal(mine.has_data[p].numpy(), has.numpy())
