"""``windpipe demo``: the whole path on the embedded defaults, in about a minute.

Synthesizes a battery dataset (one cell without a temperature sensor; HPPC and EIS
on only some cycles), starts the catalog and a Flight server in this process
(SQLite, local storage, free ports), registers, splits, plans, streams one epoch
into the local device, prints the plan report and the throughput, streams an
aligned cycling + HPPC plan (SEMANTICS 9), and shuts everything down, also when
something fails.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from windpipe._serving import serve_flight
from windpipe.catalog.api.server import start_catalog_server
from windpipe.sdk import (
    AlignedBatch,
    Batch,
    Catalog,
    LoaderConfig,
    ScalingSpec,
    Split,
    ValidationConfig,
    WindowConfig,
)
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

__all__ = ["DemoResult", "run_demo"]


@dataclass(frozen=True)
class DemoResult:
    """What the demo streamed."""

    batches: int
    tokens: int
    seconds: float
    tokens_per_s: float
    device: str
    valid_tokens: int = 0


def run_demo(
    *, data_dir: Path | None = None, rows_per_cycle: int = 20000, device: str = "auto",
    cells: int = 4, cycles: int = 8,
) -> DemoResult:
    """Run the demo; ``data_dir`` keeps its state (default: a temporary directory)."""
    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="windpipe-")))
        data_dir = data_dir.resolve()
        t0 = time.perf_counter()
        synth = write_synthetic_dataset(
            data_dir / "dataset", cells=cells, cycles=cycles, rows_per_cycle=rows_per_cycle,
            seed=0, missing_channel="temperature_c", missing_cells=1 if cells > 1 else 0,
        )
        print(f"[1/7] synthesized {synth.n_rows:,} rows in {synth.n_segments} segments "
              f"({time.perf_counter() - t0:.1f} s)")

        settings = Settings(data_dir=data_dir / "state", port=0, flight_port=0,
                            cache_bytes=512 << 20, log_level="WARNING",
                            allowed_roots=(str(synth.path),))
        flight = serve_flight(settings)
        stack.callback(flight.stop, grace_s=5.0)
        settings = settings.model_copy(update={"flight_locations": (flight.location,)})
        catalog = start_catalog_server(settings, port=0)
        stack.callback(catalog.stop, grace_s=5.0)
        print(f"[2/7] catalog at {catalog.url}, flight at {flight.location}")

        cat = Catalog(catalog.url)
        version = cat.register("demo", root=synth.path.as_uri(), manifest="manifest.parquet")
        print(f"[3/7] registered {version!r}")
        # whole cells held out: no cell's cycles on both sides
        split = version.split(ValidationConfig.sample(fraction=0.2, seed=69,
                                                      group_by=("set_id", "cell_id")))
        print(f"[4/7] split {split!r}")
        plan = split.plan(LoaderConfig(
            split="train", default_window=WindowConfig(batch_size=32, seq_len=256),
            inputs={"cycling": ("current_a", "temperature_c", "soc_pct")},
            targets={"cycling": ("voltage_v",)},
            scaling=(
                ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),
                ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0),
                ScalingSpec(column="soc_pct", input_min=0.0, input_max=100.0),
                ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2),
            ),
            strategy="shuffled", data_access="full_in_mem",
        ))
        print("[5/7] plan report (the loader warms the split into the Flight cache first):")
        print(plan.report())
        loader = plan.loader(device=device, epoch=0)
        start = time.perf_counter()
        batches = tokens = 0
        valid: Any = 0
        for batch in loader:
            assert isinstance(batch, Batch)  # a plain plan (no align_by)
            batches += 1
            tokens += int(batch.inputs.shape[0] * batch.inputs.shape[1])
            valid = valid + batch.target_valid.sum()  # the loss mask; no sync per batch
        seconds = time.perf_counter() - start
        result = DemoResult(
            batches=batches, tokens=tokens, seconds=seconds,
            tokens_per_s=tokens / seconds if seconds else 0.0, device=str(loader.device),
            valid_tokens=int(valid),
        )
        print(f"[6/7] streamed {batches} batches, {tokens:,} tokens into {result.device} in "
              f"{seconds:.2f} s: {result.tokens_per_s / 1e6:.2f} M tokens/s")
        print(f"      {result.valid_tokens:,} tokens have a target to learn from "
              "(batch.target_valid, the loss mask: padding and null targets excluded)")
        print(loader.stats)
        _aligned_epoch(split, device=device)
    print("demo finished; servers stopped")
    return result


def _aligned_epoch(split: Split, *, device: str) -> None:
    """One epoch of an aligned plan: each lane one cell and cycle, cycling and HPPC side
    by side, ``has_data`` False where that cycle had no HPPC test."""
    plan = split.plan(LoaderConfig(
        align_by="alignment_key", strategy="shuffled",
        default_window=WindowConfig(batch_size=8, seq_len=256),
        window_by_protocol={"hppc": WindowConfig(batch_size=8, seq_len=64)},
        inputs={"cycling": ("current_a", "temperature_c"), "hppc": ("current_a",)},
        targets={"cycling": ("voltage_v",), "hppc": ("voltage_v",)},
        scaling=(ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),
                 ScalingSpec(column="temperature_c", input_min=0.0, input_max=60.0),
                 ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2)),
    ))
    batches = lanes = with_hppc = 0
    for batch in plan.loader(device=device, epoch=0):
        assert isinstance(batch, AlignedBatch)
        batches += 1
        lanes += batch.batch_size
        with_hppc += int(batch.has_data["hppc"].sum())
    print(f"[7/7] aligned plan (cycling + hppc per cell and cycle): {batches} batches, "
          f"hppc data in {with_hppc} of {lanes} lanes")
