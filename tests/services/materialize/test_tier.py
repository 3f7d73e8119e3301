"""The shared tier: one build per host across processes, LRU under budget, never torn files."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.materialize.tier import Tier, TierInfo

KEY = "ab" * 16


def _fill_with(value: float, *, delay_s: float = 0.0, rows: int = 1000) -> Any:
    def fill(rows_out: np.ndarray) -> int:
        inputs, targets = rows_out[:, :3], rows_out[:, 3:]
        time.sleep(delay_s)
        inputs[:] = np.arange(rows * inputs.shape[1], dtype=np.float32).reshape(inputs.shape)
        targets[:] = value
        return rows * 8  # "bytes read from storage"

    return fill


def _build_in_process(directory: str, budget: int, start: Any, out: Any) -> None:
    tier = Tier(Path(directory), budget_bytes=budget)
    start.wait(30)
    block, read = tier.get_or_build(KEY, rows=1000, c_in=3, c_out=1,
                                    fill=_fill_with(float(os.getpid()), delay_s=0.3))
    out.put((os.getpid(), read, float(block.targets[0, 0]), float(block.inputs[-1, -1])))


def test_processes_on_one_host_build_a_block_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_build_in_process, args=(str(tmp_path), 1 << 20, start, out))
             for _ in range(3)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    builders = [r for r in results if r[1] > 0]
    assert len(builders) == 1  # storage read once on this host
    assert builders[0][1] == 8000
    assert {r[2] for r in results} == {float(builders[0][0])}  # everyone maps that file
    assert {r[3] for r in results} == {2999.0}
    assert sorted(p.name for p in tmp_path.glob("*.wpb")) == [f"{KEY}.wpb"]
    assert not list(tmp_path.glob("*.tmp-*"))


def test_least_recently_used_goes_and_mapped_blocks_stay_readable(tmp_path: Path) -> None:
    size = 64 + 1000 * 4 * 4
    tier = Tier(tmp_path, budget_bytes=2 * size)
    keys = ["a1" * 16, "b2" * 16, "c3" * 16]
    first, _ = tier.get_or_build(keys[0], rows=1000, c_in=3, c_out=1, fill=_fill_with(1.0))
    time.sleep(0.02)
    tier.get_or_build(keys[1], rows=1000, c_in=3, c_out=1, fill=_fill_with(2.0))
    time.sleep(0.02)
    assert tier.open(keys[0]) is not None  # touched: keys[1] is now the least recent
    time.sleep(0.02)
    tier.get_or_build(keys[2], rows=1000, c_in=3, c_out=1, fill=_fill_with(3.0))
    assert tier.open(keys[1]) is None
    assert tier.open(keys[0]) is not None
    assert tier.used_bytes() == 2 * size <= tier.budget_bytes
    assert tier.evictions == 1
    # evict the block that `first` maps: unlinked, never truncated, still readable
    (tmp_path / f"{keys[0]}.wpb").unlink()
    assert float(first.targets.sum()) == 1000.0
    assert float(first.inputs[-1, -1]) == 2999.0


def test_too_big_and_failed_builds_leave_nothing(tmp_path: Path) -> None:
    tier = Tier(tmp_path, budget_bytes=10_000)
    called = []
    with pytest.raises(WindpipeError) as info:
        tier.get_or_build(KEY, rows=1000, c_in=3, c_out=1,
                          fill=lambda *_: called.append(1) or 0)
    assert info.value.type == ErrorType.RESOURCE_EXHAUSTED
    assert "--tier-bytes" in info.value.message
    assert called == []  # refused before decoding anything

    def broken(rows_out: np.ndarray) -> int:
        rows_out[:10] = 1.0
        raise OSError("storage went away")

    with pytest.raises(OSError, match="storage went away"):
        tier.get_or_build(KEY, rows=100, c_in=3, c_out=1, fill=broken)
    assert tier.open(KEY) is None
    assert not list(tmp_path.glob("*.wpb*"))
    block, read = tier.get_or_build(KEY, rows=100, c_in=3, c_out=1,
                                    fill=_fill_with(5.0, rows=100))
    assert read == 800
    assert float(block.targets[0, 0]) == 5.0


def test_attach_only_to_the_advertised_tier(tmp_path: Path) -> None:
    tier = Tier(tmp_path / "t", budget_bytes=1 << 20)
    info = tier.info()
    assert TierInfo.from_dict(info.as_dict()) == info
    attached = Tier.attach(info)
    assert attached is not None
    assert attached.id == tier.id
    assert Tier(tmp_path / "t", budget_bytes=1 << 20).id == tier.id  # stable per directory
    assert Tier.attach(TierInfo(path=info.path, id="another", host=info.host,
                                budget_bytes=1)) is None
    assert Tier.attach(TierInfo(path=str(tmp_path / "missing"), id=info.id, host=info.host,
                                budget_bytes=1)) is None
    assert TierInfo.from_dict({"path": "x"}) is None
    with pytest.raises(ValueError, match="hex"):
        tier.open("../escape")


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    tier = Tier(tmp_path, budget_bytes=1 << 20)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    dead = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    stale = tmp_path / f"{KEY}.wpb.tmp-{dead.pid}-x"
    live = tmp_path / f"{KEY}.wpb.tmp-{os.getpid()}-y"
    young = tmp_path / f"{'cd' * 16}.wpb.tmp-{dead.pid}-z"
    for path in (stale, live, young):
        path.write_bytes(b"partial")
    hour_ago = time.time() - 7200
    os.utime(stale, (hour_ago, hour_ago))
    os.utime(live, (hour_ago, hour_ago))
    assert not list(tmp_path.glob("tier.json"))  # nothing happens before the tier is used
    Tier(tmp_path, budget_bytes=1 << 20).info()
    assert (tmp_path / "tier.json").exists()
    assert not stale.exists()
    assert live.exists()  # its writer lives
    assert young.exists()  # may belong to a live writer of another PID namespace
    assert tier.open(KEY) is None


_FULL_DISK = """
import sys
from pathlib import Path
import numpy as np
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.materialize.tier import Tier

tier = Tier(Path(sys.argv[1]), budget_bytes=64 << 20)
def fill(rows_out):
    rows_out[:] = 1.0  # every page of the block written through the mapping
    return 0
try:
    tier.get_or_build("ab" * 16, rows=1 << 20, c_in=3, c_out=1, fill=fill)  # 16 MiB
except WindpipeError as exc:
    print(exc.type.value, exc.details.get("free_bytes") is not None)
print("alive", sorted(p.name for p in Path(sys.argv[1]).glob("*.wpb*")))
"""


def test_a_full_disk_is_resource_exhausted_not_a_crash(tmp_path: Path) -> None:
    """A block is written through a mapping: on a disk with no room for it, a page fault
    would kill the process with SIGBUS. Its blocks are reserved first (fallocate), so a
    full disk is ``resource_exhausted`` and the write leaves nothing behind."""
    disk = tmp_path / "small"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
            capture_output=True, check=False).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(disk)],
                              capture_output=True, text=True, check=False, timeout=120)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines() == ["resource_exhausted True", "alive []"]
