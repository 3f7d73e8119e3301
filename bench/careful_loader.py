"""The careful hand loader: who windpipe's same-host path must beat.

What a user who knows numpy writes in twenty lines: the columns decoded once into one
float32 ``.npy`` (not timed), memory-mapped, a read-only strided view ``(N-T, T+1, C)``
of every window made once, and per batch ONE first-axis fancy index by the batch's
window starts (one contiguous copy per window), inputs and targets as views of that
copy. The window starts are the workload's, i.e. the planner's schedule, so it reads
exactly the windows windpipe reads, in the same order. It runs at memory-copy speed:
the copy is all it does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch
from numpy.lib.stride_tricks import as_strided

from bench.measure import consume
from bench.workload import INPUTS, TARGETS, Workload

__all__ = ["columns_npy", "numpy_strided"]

COLUMNS = (*INPUTS, *TARGETS)


def columns_npy(w: Workload) -> tuple[Path, float]:
    """The workload's columns as one float32 ``(rows, C)`` ``.npy`` beside the data, streams
    end to end (written once and reused); returns the path and the seconds it took."""
    t0 = time.perf_counter()
    npy = Path(w.root) / "bench-columns.npy"
    if not npy.exists():
        tables = [pq.read_table(f"{w.root}/{p}", columns=list(COLUMNS)) for p in w.stream_paths]
        data = np.concatenate([
            np.column_stack([t[c].to_numpy(zero_copy_only=False) for c in COLUMNS])
            .astype(np.float32) for t in tables])
        tmp = npy.with_suffix(f".tmp-{os.getpid()}.npy")
        np.save(tmp, data)
        os.replace(tmp, npy)
    return npy, time.perf_counter() - t0


def numpy_strided(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The careful hand loader (see the module docstring)."""
    npy, load_s = columns_npy(w)
    data = np.load(npy, mmap_mode="r")
    b, t, n_in = w.batch_size, w.seq_len, len(INPUTS)
    rows, c = data.shape
    row, item = data.strides
    windows = as_strided(data, (rows - t, t + 1, c), (row, row, item), writeable=False)
    base = np.cumsum([0, *w.stream_rows])

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        epoch = 0
        while True:
            for k in range(w.n_batches):
                streams, offsets = w.lanes(epoch, k)
                window = windows[base[streams] + offsets]  # one copy: B windows of T+1 rows
                x, y = window[:, :-1, :n_in], window[:, 1:, n_in:]  # views of that copy
                mask = torch.ones((b, t), dtype=torch.bool)
                yield torch.from_numpy(x), torch.from_numpy(y), mask
            epoch += 1

    out = consume(batches(), max_batches=max_batches, max_seconds=max_seconds)
    out["load_seconds"] = load_s
    return out
