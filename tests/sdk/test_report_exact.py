"""The report a catalog stores is exact on ``windpipe synth --missing-channel voltage_v
--missing-cells 1`` data: for every plan shape, ``real_tokens``
is the true count of the streamed epoch's mask (the missing cell's lanes are all masked:
voltage is a target), and ``cache_working_set_bytes`` the most chunk bytes the Flight
server pinned for one batch. Real catalog and Flight server (chunk path only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sdk.deployment import deployment
from windpipe.sdk import AlignedBatch, Batch, Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.synth import write_synthetic_dataset

_IO: dict[str, Any] = {
    "inputs": {"cycling": ("current_a", "voltage_v", "temperature_c"),
               "hppc": ("current_a", "voltage_v")},
    "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v", "soc_pct")},
}
PLANS: dict[str, LoaderConfig] = {
    "plain": LoaderConfig(default_window=WindowConfig(batch_size=4, seq_len=24), **_IO),
    "shuffled": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=20),
                             strategy="shuffled", seed=2, **_IO),
    "stateful": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=16),
                             stateful_n_windows=3, drop_incomplete_batches=True, **_IO),
    "chain": LoaderConfig(default_window=WindowConfig(batch_size=2, seq_len=16),
                          strategy="shuffled", stateful_n_windows=-1,
                          cross_protocol_state_carry="chain", protocol_order=("hppc", "cycling"),
                          **_IO),
    "aligned": LoaderConfig(default_window=WindowConfig(batch_size=3, seq_len=20),
                            align_by="alignment_key", **_IO),
}


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("report-exact")
    data = write_synthetic_dataset(tmp / "synth", cells=3, cycles=4, rows_per_cycle=120,
                                   row_group_rows=32, seed=3, missing_channel="voltage_v",
                                   missing_cells=1, hppc_every=2)
    with deployment(f"sqlite:///{tmp / 'catalog.db'}", tmp / "state",
                    auto_blocks=False, readahead_batches=0) as d:
        cache = d.flights[0].server.cache
        acquire = cache.acquire
        pinned: list[int] = []

        def recording(requests: Any) -> Any:
            pinned.append(sum({r.key: r.nbytes for r in requests}.values()))
            return acquire(requests)

        cache.acquire = recording  # type: ignore[method-assign]
        cat = Catalog(d.url)
        split = cat.register("synth", root=Path(data.path).resolve().as_uri(),
                             manifest="manifest.parquet").split(
            ValidationConfig.sample(fraction=0.0))
        d.extra.update(plans={name: split.plan(cfg) for name, cfg in PLANS.items()},
                       pinned=pinned)
        yield d
        cat.close()


def _parts(batch: Batch | AlignedBatch) -> list[tuple[str | None, Batch]]:
    if isinstance(batch, AlignedBatch):
        return list(batch.parts.items())
    return [(None, batch)]


@pytest.mark.parametrize("name", list(PLANS))
def test_the_stored_report_is_the_streamed_epoch(dep: Any, name: str) -> None:
    plan = dep.extra["plans"][name]
    report = plan.report()
    pinned: list[int] = dep.extra["pinned"]
    pinned.clear()
    batches = list(plan.batches(epoch=0, transport="flight"))
    assert len(batches) == report.batches > 0
    real = 0
    per_protocol: dict[str, int] = dict.fromkeys(report.protocols, 0)
    masked_lane = False
    for batch in batches:
        for part, b in _parts(batch):
            mask = b.mask.numpy()
            real += int(mask.sum())
            lanes = [part] * mask.shape[0] if part else list(b.state.protocols)
            for protocol, row in zip(lanes, mask, strict=True):
                per_protocol[protocol] += int(row.sum())
            offsets = b.state.window_offsets
            masked_lane |= any(o >= 0 and not row.any()
                               for o, row in zip(offsets, mask, strict=True))
    assert masked_lane  # the cell without voltage streams lanes, all masked out
    assert report.real_tokens == real
    assert {p: r.real_tokens for p, r in report.protocols.items()} == per_protocol
    assert report.cache_working_set_bytes == max(pinned)
