"""``windpipe[jax]`` without torch: a fresh virtual environment holding a non-editable
install of a copy of the tree with the ``server`` (an embedded catalog) and ``jax``
extras, and no torch, streams a plan's batches through ``windpipe.jax``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures.packaging import install_tree

pytestmark = pytest.mark.slow

_SCRIPT = """
import importlib.util, sys, warnings
from pathlib import Path
import numpy as np
import windpipe, windpipe.jax
from windpipe import LoaderConfig, ValidationConfig, WindowConfig
from windpipe.services.synth import write_synthetic_dataset

assert importlib.util.find_spec("torch") is None, "torch is installed"
warnings.simplefilter("ignore")
base = Path(sys.argv[1])
data = write_synthetic_dataset(base / "data", cells=2, cycles=2, rows_per_cycle=200, seed=1)
with windpipe.embedded(base / "state") as cat:
    ver = cat.register("d", root=data.path.resolve().as_uri(), manifest="manifest.parquet")
    plan = ver.split(ValidationConfig.sample(fraction=0.3, seed=1)).plan(LoaderConfig(
        default_window=WindowConfig(batch_size=4, seq_len=32),
        inputs={"cycling": ("current_a", "voltage_v")}, targets={"cycling": ("voltage_v",)}))
    loader = windpipe.jax.loader(plan)
    hosts = list(loader.host_batches())
    got = list(loader)
    assert len(got) == len(hosts) == len(loader) > 0
    for g, h in zip(got, hosts):
        assert np.asarray(g.inputs).tobytes() == np.ascontiguousarray(h.inputs).tobytes()
        assert np.asarray(g.target_valid).tobytes() == h.target_valid.tobytes()
        assert g.state == h.state
assert "torch" not in sys.modules
print("batches", len(got))
"""


def test_windpipe_jax_streams_a_plan_where_torch_is_not_installed(tmp_path: Path) -> None:
    python = str(install_tree(tmp_path, "server,jax") / "bin" / "python")
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([python, "-c", _SCRIPT, str(work)], cwd=work, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "batches"
