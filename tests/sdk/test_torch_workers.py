"""DataLoader workers: the resume cursor is kept or the call says what to do; spawn's
requirements (an importable transform, a main guard) are checked with a clear message."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from tests.sdk.spawned import SPAWN, toy_dataset
from tests.sdk.wire_toys import ToyFlightServer
from windpipe.sdk import InvalidConfig
from windpipe.sdk._torch import WindpipeDataLoader, check_spawn


@pytest.fixture(scope="module")
def toy():
    server = ToyFlightServer(n_batches=11)
    yield server
    server.shutdown()



def _first(loader, n: int) -> list:
    seen = []
    for batch in loader:
        seen.append(batch)
        if len(seen) == n:
            break
    return seen


@pytest.mark.slow
def test_a_plain_dataloader_with_workers_refuses_a_blind_state_dict(toy):
    ds = toy_dataset(toy)
    seen = _first(DataLoader(ds, **SPAWN), 4)
    with pytest.raises(InvalidConfig, match=r"state_dict\(after=batch\)"):
        ds.state_dict()
    assert ds.state_dict(after=seen[-1])["batch"] == 4
    # iterated in this process again, the dataset knows its cursor
    assert len(_first(ds, 2)) == 2
    assert ds.state_dict()["batch"] == 2


@pytest.mark.slow
def test_the_windpipe_loader_keeps_the_cursor_across_workers(toy):
    ds = toy_dataset(toy)
    seen = _first(WindpipeDataLoader(ds, **SPAWN), 4)
    assert [b.batch_idx for b in seen] == [0, 1, 2, 3]
    state = ds.state_dict()
    assert state == {"plan_id": "p-toy", "epoch": 0, "batch": 4}
    resumed = toy_dataset(toy)
    resumed.load_state_dict(state)
    rest = [b.batch_idx for b in WindpipeDataLoader(resumed, **SPAWN)]
    assert rest == list(range(4, 11))
    assert resumed.state_dict()["batch"] == 11


def _double(batch):  # an importable transform
    return batch


def test_spawn_refuses_a_transform_workers_cannot_import(monkeypatch):
    options = {"num_workers": 2, "multiprocessing_context": "spawn"}
    with pytest.raises(InvalidConfig, match="cannot be sent to spawn DataLoader workers"):
        check_spawn(lambda b: b, options)
    check_spawn(_double, options)
    check_spawn(lambda b: b, {"num_workers": 0})

    def in_notebook(batch):
        return batch

    in_notebook.__module__ = "__main__"
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with pytest.raises(InvalidConfig, match="defined in this notebook"):
        check_spawn(in_notebook, options)


_TRAIN = """
from windpipe.sdk._torch import WindpipeDataLoader, WindpipeIterableDataset

def source(**kwargs):
    yield from ()

def main():
    ds = WindpipeIterableDataset(source, plan_id="p-x")
    print("batches", len(list(WindpipeDataLoader(ds, batch_size=None, num_workers=1,
                                                 multiprocessing_context="spawn"))))
"""


def _run_script(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(text)
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=root, check=False,
                          env={**os.environ, "PYTHONPATH": str(root)})


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path):
    """Refused in the parent, before any worker starts: our message, naming the line,
    not torch's "worker exited unexpectedly"."""
    proc = _run_script(tmp_path, _TRAIN + "\nmain()\n")
    assert proc.returncode != 0
    assert f"{InvalidConfig.__module__}.InvalidConfig" in proc.stderr, proc.stderr
    assert 'outside `if __name__ == "__main__":`' in proc.stderr
    line = _TRAIN.count("\n") + 2  # the unguarded main() call
    assert f"train.py:{line} starts DataLoader workers with 'spawn'" in proc.stderr
    assert "DataLoader worker (pid" not in proc.stderr  # torch's own message
    assert proc.stderr.count("Traceback") == 1  # no worker ever started


@pytest.mark.slow
def test_a_script_with_a_main_guard_runs_its_workers(tmp_path: Path):
    proc = _run_script(tmp_path, _TRAIN + '\nif __name__ == "__main__":\n    main()\n')
    assert proc.returncode == 0, proc.stderr
    assert "batches 0" in proc.stdout
