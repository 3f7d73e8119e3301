"""The SDK without torch: ``from windpipe import Catalog`` imports, and the
REST workflow (register, index, split, plan, report) works; the first call that needs
torch (batches, the loader, the torch dataset) says what to install.

torch is installed here, so a subprocess blocks it (``sys.modules["torch"] = None``,
which makes ``import torch`` fail as if it were absent) and talks to a real catalog.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.servers import free_port, run_catalog_server
from windpipe.services.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_TORCH = r'''
import json
import sys

sys.modules["torch"] = None  # as if torch were not installed

from windpipe import Catalog, LoaderConfig, ValidationConfig, WindowConfig
import windpipe.sdk as sdk

url, root, dead_flight = sys.argv[1:4]
cat = Catalog(url, flight_locations=[dead_flight])
ver = cat.register("no-torch", root=root, manifest="manifest.parquet", progress=False)
index_rows = ver.index().frame.height
split = ver.split(ValidationConfig.sample(fraction=0.3, seed=1))
split_columns = split.index().frame.columns
plan = split.plan(LoaderConfig(
    inputs={"cycling": ("current_a", "temperature_c")}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=4, seq_len=32)))
again = cat.plan(plan.id)
report = plan.report(world_size=2)
out = {
    "index_rows": index_rows, "split_columns": split_columns, "n_batches": plan.n_batches,
    "same_plan": again.id == plan.id, "report": repr(report), "plan": repr(plan),
    "versions": [v.id for v in cat.versions("no-torch")],
    "torch_modules": sorted(m for m in sys.modules if m.split(".")[0] == "torch"),
    "errors": {},
}
needs_torch = {
    "batches": lambda: plan.batches(epoch=0),
    "loader": lambda: plan.loader(device="cpu"),
    "torch_dataset": lambda: plan.torch_dataset(),
    "dataloader": lambda: plan.dataloader(),
    "WindpipeIterableDataset": lambda: sdk.WindpipeIterableDataset,
}
for name, call in needs_torch.items():
    try:
        call()
    except ModuleNotFoundError as exc:
        out["errors"][name] = {"name": exc.name, "message": str(exc),
                               "type": type(exc).__name__}
    except Exception as exc:
        out["errors"][name] = {"unexpected": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def catalog_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("no-torch")
    settings = Settings(database_url=f"sqlite:///{tmp / 'catalog.db'}", data_dir=tmp / "state",
                        log_level="WARNING")
    with run_catalog_server(settings) as url:
        yield url


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, check=False)


def test_importing_the_sdk_loads_no_torch() -> None:
    result = _run("import sys, windpipe, windpipe.sdk; "
                  "from windpipe import Catalog, Batch, DeviceLoader; "
                  "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_rest_workflow_runs_without_torch_and_batches_say_what_to_install(
    catalog_url: str, synth_dataset: Any,
) -> None:
    dead_flight = f"grpc://127.0.0.1:{free_port()}"  # a batch that got this far would say so
    result = _run(WITHOUT_TORCH, catalog_url, synth_dataset.path.resolve().as_uri(), dead_flight)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["index_rows"] > 0
    assert "split" in out["split_columns"]
    assert out["n_batches"] > 0
    assert out["same_plan"]
    assert out["report"]
    assert out["plan"]
    assert len(out["versions"]) == 1
    assert out["torch_modules"] == ["torch"]  # the blocked entry, nothing imported
    assert set(out["errors"]) == {"batches", "loader", "torch_dataset", "dataloader",
                                  "WindpipeIterableDataset"}
    for name, error in out["errors"].items():
        assert "unexpected" not in error, (name, error)
        assert error["type"] == "TorchMissing", (name, error)
        assert error["name"] == "torch"
        assert error["message"].startswith(
            "windpipe's torch batches need torch: install your torch build, "
            "or pip install -e '.[torch]' in a checkout"), (name, error)
