"""Batches byte for byte across two revisions: digests of every batch of many plan shapes.

A refactor that must not change a batch is checked by recording, for one
synthetic dataset, the digest of every batch (inputs, targets, mask, has_channel,
has_data and the provenance) of every plan shape below, over Flight and in process
from the host's tier, for two epochs and several ranks; then comparing two records.

It speaks only to the public surfaces every revision has (the ``windpipe`` command in
a subprocess, the SDK's ``Catalog``), so it runs against an older checkout too::

    git worktree add /tmp/base <rev>
    (cd /tmp/base && PYTHONPATH=/tmp/base python /path/to/bench/identity.py record base.json)
    python bench/identity.py record head.json
    python bench/identity.py compare base.json head.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # run as a script: bench/planning.py must not shadow the SDK's planning

# the SDK of whichever checkout is first on sys.path (PYTHONPATH)
from windpipe.sdk import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig

CYC = ("current_a", "temperature_c")
HPPC = ("current_a", "soc_pct")
W = WindowConfig
SCALE = (ScalingSpec(column="current_a", input_min=-10.0, input_max=10.0),
         ScalingSpec(column="voltage_v", input_min=2.5, input_max=4.2))
BLOCK_SCALE = (ScalingSpec(column="current_a", input_min=-6.0, input_max=6.0),
               ScalingSpec(column="voltage_v", input_min=2.0, input_max=4.5))


def shapes() -> dict[str, dict[str, Any]]:
    """Plan shapes the tests know, by name: every strategy, state, drop, scaling and
    alignment option the contract has, over one and several protocols."""
    one = {"inputs": {"cycling": CYC}, "targets": {"cycling": ("voltage_v",)}}
    two = {"inputs": {"cycling": CYC, "hppc": HPPC},
           "targets": {"cycling": ("voltage_v",), "hppc": ("voltage_v",)}}
    eis = {"inputs": {"cycling": CYC, "eis": ("freq_hz", "z_real_ohm")},
           "targets": {"cycling": ("voltage_v",), "eis": ("z_imag_ohm",)}}
    return {
        "sequential": {**one, "default_window": W(batch_size=4, seq_len=64)},
        "sequential_validation": {**one, "split": "val",
                                  "default_window": W(batch_size=3, seq_len=50)},
        "sequential_step": {**one, "default_window": W(batch_size=4, seq_len=32, step_rows=20)},
        "sequential_scaled": {**one, "default_window": W(batch_size=4, seq_len=64),
                              "scaling": SCALE},
        "sequential_drop": {**one, "default_window": W(batch_size=5, seq_len=48),
                            "drop_incomplete_batches": True},
        "shuffled": {**one, "strategy": "shuffled", "default_window": W(batch_size=4, seq_len=64)},
        "shuffled_no_phase": {**one, "strategy": "shuffled", "phase_shift": False,
                              "seed": 7, "default_window": W(batch_size=6, seq_len=40)},
        "stateful": {**one, "stateful_n_windows": 3, "default_window": W(batch_size=2, seq_len=32)},
        "stateful_all": {**one, "stateful_n_windows": -1,
                         "default_window": W(batch_size=2, seq_len=128)},
        "two_protocols": {**two, "default_window": W(batch_size=4, seq_len=64)},
        "two_protocols_shuffled": {**two, "strategy": "shuffled",
                                   "window_by_protocol": {"hppc": W(batch_size=2, seq_len=16)},
                                   "default_window": W(batch_size=4, seq_len=64)},
        "two_protocols_order": {**two, "protocol_order": ("hppc", "cycling"),
                                "default_window": W(batch_size=3, seq_len=32)},
        "chain": {**two, "stateful_n_windows": 2, "cross_protocol_state_carry": "chain",
                  "default_window": W(batch_size=2, seq_len=32)},
        "eis": {**eis, "default_window": W(batch_size=4, seq_len=16), "scaling": (
            ScalingSpec(column="freq_hz", transform="log1p", input_min=0.0, input_max=1e4,
                        clip=True),)},
        "aligned": {**two, "align_by": "alignment_key",
                    "window_by_protocol": {"hppc": W(batch_size=4, seq_len=16)},
                    "default_window": W(batch_size=4, seq_len=64)},
        # scaled as no other shape, so that no other shape's in-process reads put their
        # whole blocks in the tier (a block held whole is read whole, not by sub-blocks)
        "block_shuffled": {**one, "strategy": "block_shuffled", "shuffle_block_bytes": 24 << 10,
                           "scaling": BLOCK_SCALE, "default_window": W(batch_size=4, seq_len=64)},
        "two_protocols_block_shuffled": {
            **two, "strategy": "block_shuffled", "shuffle_block_bytes": 16 << 10, "seed": 9,
            "scaling": BLOCK_SCALE[:1],
            "window_by_protocol": {"hppc": W(batch_size=2, seq_len=16)},
            "default_window": W(batch_size=4, seq_len=48, drop_incomplete=False)},
        "aligned_shuffled": {**eis, "align_by": "alignment_key", "strategy": "shuffled",
                             "window_by_protocol": {"eis": W(batch_size=3, seq_len=8)},
                             "default_window": W(batch_size=3, seq_len=32)},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _windpipe(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "windpipe.cli", *args], **kw)


# the server's two read paths: whole-split blocks when they fit (the default), and chunks
# (a block shuffle's sub-blocks, unless the tier holds its whole block)
READ_PATHS = {"blocks": (), "chunks": ("--no-auto-blocks",)}


@contextmanager
def _served(work: Path, data: Path, flags: tuple[str, ...]) -> Iterator[str]:
    port, flight = _free_port(), _free_port()
    log = (work / "serve.log").open("wb")
    proc = _windpipe("serve", "--data-dir", str(work / "state"), "--port", str(port),
                     "--flight-port", str(flight), "--allow-root", str(data), *flags,
                     stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError((work / "serve.log").read_text())
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _digest(batch: Any) -> str:
    h = hashlib.sha256()
    parts = batch.parts if hasattr(batch, "parts") else {"": batch}
    for name, part in sorted(parts.items()):
        h.update(name.encode())
        for t in (part.inputs, part.targets, part.mask, part.has_channel):
            a = np.ascontiguousarray(_host(t))
            h.update(str((a.dtype, a.shape)).encode())
            h.update(a.tobytes())
        state = part.state
        h.update(repr((state.split, state.batch_idx, state.protocols, state.manifest_paths,
                       state.manifest_row_ids, state.group_keys, state.alignment_keys,
                       state.window_offsets, state.segments, state.stateful_group_idx,
                       state.stateful_step_idx, state.stateful_steps)).encode())
        if hasattr(batch, "has_data") and name:
            h.update(_host(batch.has_data[name]).tobytes())
    return h.hexdigest()[:24]


def _host(array: Any) -> np.ndarray:
    """A torch tensor's or a ``jax.Array``'s values in host memory."""
    return array.numpy() if hasattr(array, "numpy") else np.asarray(array)


def _record_all(cat: Catalog, data: Path, path: str, *, with_jax: bool,
                ) -> dict[str, list[str]]:
    results: dict[str, list[str]] = {}
    jax_loader: Any = None
    if with_jax:  # the same-host batches as jax.Arrays too (the numpy form XLA takes)
        from windpipe.sdk._jax import JaxLoader  # noqa: PLC0415  (windpipe.jax.loader)

        jax_loader = JaxLoader
    ver = cat.register("identity", root=data.resolve().as_uri(), manifest="manifest.parquet")
    split = ver.split(ValidationConfig.sample(fraction=0.25, seed=3))
    for name, fields in shapes().items():
        plan = split.plan(LoaderConfig(**fields))
        for transport in ("flight", "local"):
            for epoch in (0, 1):
                for world in (1, 2):
                    for rank in range(world):
                        key = f"{name}/{path}/{transport}/e{epoch}/r{rank}of{world}"
                        results[key] = [_digest(b) for b in plan.batches(
                            epoch=epoch, rank=rank, world_size=world, transport=transport,
                            progress=False)]
                        if jax_loader is not None and transport == "local":
                            results[key.replace("/local/", "/jax-local/")] = [
                                _digest(b) for b in jax_loader(
                                    plan, epoch, rank=rank, world_size=world,
                                    transport=transport, progress=False)]
    cat.close()
    return results


def record(out: Path, *, rows_per_cycle: int, with_jax: bool = False) -> dict[str, Any]:
    """Digest every batch of every shape; returns and writes ``{shape/run: [digest...]}``
    (``with_jax``: the same-host runs through ``windpipe.jax.loader`` too, as
    ``.../jax-local/...``, which must equal their ``.../local/...`` run)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        for path in READ_PATHS:
            (work / path).mkdir()
        subprocess.run([sys.executable, "-m", "windpipe.cli", "synth", str(data), "--cells", "4",
                        "--cycles", "4", "--rows-per-cycle", str(rows_per_cycle),
                        "--hppc-every", "2", "--eis-every", "2", "--missing-channel",
                        "temperature_c", "--missing-cells", "1"],
                       check=True, capture_output=True)
        for path, flags in READ_PATHS.items():
            with _served(work / path, data, flags) as url:
                results.update(_record_all(Catalog(url), data, path, with_jax=with_jax))
    out.write_text(json.dumps(results, indent=0, sort_keys=True))
    return results


def compare(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(runs compared, batches compared, the runs that differ)."""
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return len(a.keys() & b.keys()), sum(len(v) for k, v in a.items() if k in b), differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.identity", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--rows-per-cycle", type=int, default=400)
    rec.add_argument("--jax", action="store_true",
                     help="also digest the same-host runs as windpipe.jax batches")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        os.environ.setdefault("WINDPIPE_LOG_LEVEL", "warning")
        res = record(args.out, rows_per_cycle=args.rows_per_cycle, with_jax=args.jax)
        print(f"recorded {sum(len(v) for v in res.values())} batches in {len(res)} runs "
              f"of {len(shapes())} plan shapes -> {args.out}")
        jax_runs = [k for k in res if "/jax-local/" in k]
        if jax_runs:
            off = [k for k in jax_runs if res[k] != res[k.replace("/jax-local/", "/local/")]]
            print(f"{len(jax_runs)} runs as JAX batches; {len(off)} differ from torch's")
            return 1 if off else 0
        return 0
    runs, batches, differ = compare(json.loads(args.a.read_text()),
                                    json.loads(args.b.read_text()))
    print(f"{runs} runs, {batches} batches compared; {len(differ)} runs differ")
    for key in differ:
        print(f"  differs: {key}")
    return 1 if differ or runs == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
