"""A researcher's own data to a training step, in embedded mode (no server, no socket:
``windpipe.embedded``) and over the served catalog (catalog + Flight server, as
``windpipe serve`` runs them): a cycler export through ``windpipe ingest``, and a folder
of parquet files with no manifest registered by a path pattern."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl
import psutil
import pytest

from tests.fixtures.cyclers import biologic_mpr, maccor_file
from tests.fixtures.servers import embedded_services
from windpipe import embedded
from windpipe.cli import main
from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.ingest import PATTERN

torch = pytest.importorskip("torch")

CONFIG = LoaderConfig(
    split="train", default_window=WindowConfig(batch_size=2, seq_len=16),
    inputs={"cycling": ("current_a", "dt_s")}, targets={"cycling": ("voltage_v",)},
)


def _listening() -> set[object]:
    return {c.laddr for c in psutil.Process().net_connections(kind="all")
            if c.status == psutil.CONN_LISTEN}


@contextmanager
def _catalog(mode: str, state: Path) -> Iterator[Catalog]:
    """``embedded``: the catalog in this process, and no socket opened while it works;
    ``served``: the catalog and a Flight server on free loopback ports."""
    if mode == "served":
        with embedded_services(state) as url, Catalog(url) as cat:
            yield cat
        return
    before = _listening()
    with embedded(state) as cat:
        yield cat
        assert _listening() == before  # nothing listens: no server was started


MODES = pytest.mark.parametrize("mode", ["embedded", "served"])


def _one_step(plan: object) -> float:
    """The first batch through a tiny model: one optimizer step, the loss."""
    batch = next(iter(plan.batches(epoch=0, rank=0, world_size=1)))  # type: ignore[attr-defined]
    assert batch.inputs.shape == (2, 16, 2)
    assert batch.targets.shape == (2, 16, 1)
    valid = batch.target_valid
    assert bool(valid.any())
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss = torch.nn.functional.mse_loss(model(batch.inputs)[valid], batch.targets[valid])
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


@MODES
def test_a_cycler_export_to_a_training_step(tmp_path: Path, mode: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    for cell in ("cellA", "cellB", "cellC"):
        maccor_file(exports / f"{cell}.001", cycles=4, rows_per_cycle=90)
    biologic_mpr(exports / "cellD.mpr", cycles=4, rows_per_cycle=90)
    out = tmp_path / "lab"
    assert main(["ingest", str(exports), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    with _catalog(mode, tmp_path / "state") as cat:
        ver = cat.register("lab", root=out.as_uri(), manifest="manifest.parquet",
                           progress=False)
        assert ver.raw["n_manifest_rows"] == 16
        # the ingest's layout registers by its pattern too: the same identities
        by_pattern = cat.register("lab-pattern", root=out.as_uri(), pattern=PATTERN,
                                  progress=False)
        keys = ["set_id", "cell_id", "cidx", "protocol", "row_count"]
        assert by_pattern.index().frame.select(keys).equals(ver.index().frame.select(keys))
        split = ver.split(ValidationConfig.sample(fraction=0.25, seed=3,
                                                  group_by=("cell_id",)))
        plan = split.plan(CONFIG)
        assert plan.n_batches > 0
        assert np.isfinite(_one_step(plan))


@MODES
def test_a_folder_of_parquet_files_without_a_manifest_to_a_training_step(
    tmp_path: Path, mode: str,
) -> None:
    root = tmp_path / "mydata"
    rng = np.random.default_rng(7)
    for cell in ("a1", "a2", "b1", "b2"):
        for cidx in range(3):
            n = 200
            current = np.where(np.arange(n) < n // 2, 1.5, -1.5) + rng.normal(0, 0.01, n)
            path = root / cell / "cycling" / f"cycle_{cidx}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame({
                "time_s": np.arange(n, dtype=np.float64),
                "dt_s": np.ones(n, dtype=np.float32),
                "current_a": current.astype(np.float32),
                "voltage_v": (3.6 + 0.3 * np.cumsum(current) / n).astype(np.float32),
            }).write_parquet(path)
    cells = pl.DataFrame({"cell_id": ["a1", "a2", "b1", "b2"],
                          "chemistry": ["nmc", "nmc", "lfp", "lfp"]})
    with _catalog(mode, tmp_path / "state") as cat:
        ver = cat.register("mine", root=root.as_uri(),
                           pattern="{cell_id}/{protocol}/cycle_{cidx}.parquet",
                           metadata=cells, progress=False)
        assert ver.raw["n_manifest_rows"] == 12
        split = ver.split(ValidationConfig.provide([{"chemistry": "lfp", "cell_id": "b2"}]))
        assert set(split.index().filter_split("val").frame.get_column("cell_id")) == {"b2"}
        assert np.isfinite(_one_step(split.plan(CONFIG)))
