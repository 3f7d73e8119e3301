"""What users would pick instead of windpipe, and the machine's ceilings.

Each contender consumes the shared :class:`~bench.workload.Workload` into torch
tensors ``inputs (B, T, 3)``, ``targets (B, T, 1)``, ``mask (B, T)`` and returns how
many batches it produced in how long. They run in their own processes (see
``bench/runner.py``), so peak memory and CPU time are theirs alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import torch

from bench.careful_loader import columns_npy, numpy_strided
from bench.measure import consume
from bench.workload import INPUTS, TARGETS, Workload

__all__ = ["BASELINES"]

COLUMNS = (*INPUTS, *TARGETS)


def _schedule(w: Workload) -> Iterator[tuple[int, int]]:
    """``(epoch, batch)`` of the schedule, epoch after epoch (contenders stop on their
    limits); every epoch is reshuffled."""
    if w.n_batches == 0:
        return
    epoch = 0
    while True:
        for b in range(w.n_batches):
            yield epoch, b
        epoch += 1


def _window_tensors(cols: np.ndarray, n_rows: int, t: int) -> tuple[torch.Tensor, ...]:
    """Inputs, targets and mask of one lane from its rows ``[o, o+T+1)`` (T+1 x C)."""
    x = torch.from_numpy(np.nan_to_num(cols[:t, : len(INPUTS)], nan=-2.0))
    y = torch.full((t, len(TARGETS)), float("nan"))
    y[: n_rows - 1] = torch.from_numpy(cols[1:n_rows, len(INPUTS):])
    if x.shape[0] < t:
        x = torch.cat([x, torch.full((t - x.shape[0], len(INPUTS)), -2.0)])
    mask = torch.zeros(t, dtype=torch.bool)
    mask[: n_rows - 1] = True
    return x, y, mask


def windowed_parquet(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The seed's "windowed" mode: per window, polars reads only that window's rows.

    ``pl.scan_parquet(path).slice(o, T + 1).select(columns).collect()``, what users
    write to read one window (the reader prunes row groups, nothing is kept open).
    """
    paths = [f"{w.root}/{p}" for p in w.stream_paths]
    t = w.seq_len

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for e, b in _schedule(w):
            lanes = []
            for s, o in zip(*w.lanes(e, b), strict=True):
                rows = (pl.scan_parquet(paths[int(s)]).slice(int(o), t + 1)
                        .select(COLUMNS).collect())
                cols = rows.to_numpy().astype(np.float32, copy=False)
                lanes.append(_window_tensors(cols, rows.height, t))
            yield tuple(torch.stack(parts) for parts in zip(*lanes, strict=True))

    return consume(batches(), max_batches=max_batches, max_seconds=max_seconds)


def rowgroup_parquet(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """A tuned per-window reader: open files kept, each window decodes the row groups it
    spans with pyarrow and cuts its rows (stronger than the seed's windowed mode)."""
    files = {s: pq.ParquetFile(f"{w.root}/{p}") for s, p in enumerate(w.stream_paths)}
    starts = {
        s: np.cumsum([0] + [f.metadata.row_group(i).num_rows
                            for i in range(f.metadata.num_row_groups)])
        for s, f in files.items()
    }
    t = w.seq_len

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for e, b in _schedule(w):
            lanes = []
            for s, o in zip(*w.lanes(e, b), strict=True):
                rg = starts[int(s)]
                first = int(np.searchsorted(rg, o, side="right") - 1)
                last = int(np.searchsorted(rg, o + t + 1, side="left") - 1)
                table = files[int(s)].read_row_groups(list(range(first, last + 1)),
                                                      columns=list(COLUMNS))
                rows = table.slice(int(o - rg[first]), t + 1)
                cols = np.column_stack([rows[c].to_numpy(zero_copy_only=False) for c in COLUMNS])
                lanes.append(_window_tensors(cols.astype(np.float32), rows.num_rows, t))
            yield tuple(torch.stack(parts) for parts in zip(*lanes, strict=True))

    return consume(batches(), max_batches=max_batches, max_seconds=max_seconds)


def _preload(w: Workload) -> tuple[torch.Tensor, np.ndarray]:
    tables = [pq.read_table(f"{w.root}/{p}", columns=list(COLUMNS)) for p in w.stream_paths]
    data = torch.cat([
        torch.from_numpy(np.column_stack([t[c].to_numpy(zero_copy_only=False) for c in COLUMNS])
                         .astype(np.float32))
        for t in tables
    ])
    starts = np.cumsum([0, *w.stream_rows])
    return data, starts


class _WindowDataset(torch.utils.data.Dataset[tuple[torch.Tensor, ...]]):
    """A map-style dataset of lane windows, as users write them: item ``i`` is lane
    ``i`` of the workload's epochs laid end to end."""

    def __init__(self, w: Workload, reader: Callable[[int, int], np.ndarray]) -> None:
        self.w = w
        self.reader = reader

    def __len__(self) -> int:
        return int(self.w.lane_stream.size)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        s, o = int(self.w.lane_stream.flat[i]), int(self.w.lane_offset.flat[i])
        cols = self.reader(s, o)
        return _window_tensors(cols, cols.shape[0], self.w.seq_len)


def numpy_memmap(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The 20-line loader many users write: parquet decoded once into one ``.npy``,
    memory-mapped, each batch ``np.stack`` of B slices of T+1 rows copied out of it in the
    training process (inputs and targets are strided views of that one copy). The careful
    version of it is ``numpy_strided`` (``bench.careful_loader``)."""
    npy, load_s = columns_npy(w)
    data_np = np.load(npy, mmap_mode="r")
    base = np.cumsum([0, *w.stream_rows])
    b, t = w.batch_size, w.seq_len
    n_in = len(INPUTS)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for e, k in _schedule(w):
            streams, offsets = w.lanes(e, k)
            starts = base[streams] + offsets
            window = np.stack([data_np[o : o + t + 1] for o in starts])  # B slices, T+1 rows
            x, y = window[:, :-1, :n_in], window[:, 1:, n_in:]  # views: no second copy
            mask = np.ones((b, t), dtype=bool)
            yield torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask)

    out = consume(batches(), max_batches=max_batches, max_seconds=max_seconds)
    out["load_seconds"] = load_s
    return out


def full_in_mem_torch(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The seed's "full_in_mem" mode: all columns in CPU float32 tensors, windows cut there."""
    t0 = time.perf_counter()
    data, starts = _preload(w)
    load_s = time.perf_counter() - t0
    data_np = data.numpy()
    t = w.seq_len

    def read(s: int, o: int) -> np.ndarray:
        lo = int(starts[s]) + o
        return data_np[lo : min(lo + t + 1, int(starts[s + 1]))]

    ds = _WindowDataset(w, read)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for e, b in _schedule(w):
            first = ((e % w.lane_stream.shape[0]) * w.n_batches + b) * w.batch_size
            items = [ds[first + i] for i in range(w.batch_size)]
            yield tuple(torch.stack(parts) for parts in zip(*items, strict=True))

    out = consume(batches(), max_batches=max_batches, max_seconds=max_seconds)
    out["load_seconds"] = load_s
    return out


class _ParquetWindowReader:
    """Per-worker parquet handles; each window reads the row groups it spans."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        self.files: dict[int, tuple[pq.ParquetFile, np.ndarray]] = {}

    def __call__(self, s: int, o: int) -> np.ndarray:
        if s not in self.files:
            pf = pq.ParquetFile(f"{self.w.root}/{self.w.stream_paths[s]}")
            md = pf.metadata
            rg = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
            self.files[s] = (pf, rg)
        pf, rg = self.files[s]
        t = self.w.seq_len
        first = int(np.searchsorted(rg, o, side="right") - 1)
        last = int(np.searchsorted(rg, o + t + 1, side="left") - 1)
        table = pf.read_row_groups(list(range(first, last + 1)), columns=list(COLUMNS))
        rows = table.slice(int(o - rg[first]), t + 1)
        return np.column_stack(
            [rows[c].to_numpy(zero_copy_only=False) for c in COLUMNS]
        ).astype(np.float32)


def torch_dataloader(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """A torch DataLoader over a map-style window dataset reading parquet, 2 workers."""
    ds = _WindowDataset(w, _ParquetWindowReader(w))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=w.batch_size, shuffle=False, num_workers=2, drop_last=True,
        prefetch_factor=4, persistent_workers=True,
    )

    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    return consume(batches(), max_batches=max_batches, max_seconds=max_seconds)


class _CeilingServer(flight.FlightServerBase):
    """Streams prebuilt record batches of the workload's batch size, in turn, again and
    again."""

    def __init__(self, batches: list[pa.RecordBatch], count: int) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.batches = batches
        self.count = count

    def do_get(self, context: flight.ServerCallContext,
               ticket: flight.Ticket) -> flight.FlightDataStream:
        n = len(self.batches)
        count = WARM_BATCHES if ticket.ticket == WARM_TICKET else self.count
        return flight.GeneratorStream(self.batches[0].schema,
                                      (self.batches[i % n] for i in range(count)))


def _ceiling_batch(w: Workload, *, seed: int) -> pa.RecordBatch:
    b, t = w.batch_size, w.seq_len
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal(b * t * len(INPUTS), dtype=np.float32)
    targets = rng.standard_normal(b * t * len(TARGETS), dtype=np.float32)
    mask = np.ones(b * t, dtype=np.uint8)

    def lists(values: np.ndarray, width: int) -> pa.Array:
        offsets = pa.array(np.arange(b + 1, dtype=np.int32) * width)
        return pa.ListArray.from_arrays(offsets, pa.array(values))

    return pa.record_batch(
        [lists(inputs, t * len(INPUTS)), lists(targets, t * len(TARGETS)), lists(mask, t)],
        names=["inputs", "targets", "mask"],
    )


CEILING_BATCHES = 48  # distinct prebuilt batches the ceiling rotates over: more than an L3
# an unmeasured stream first, as windpipe_flight_warm's pass: the connection made and the
# client's first conversion done (pyarrow's first to_numpy imports pandas: ~0.3-0.9 s)
WARM_TICKET, WARM_BATCHES = b"warm", 8


def flight_ceiling(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """Raw pyarrow.flight DoGet of prebuilt record batches of the same size (the transport),
    rotating over :data:`CEILING_BATCHES` distinct ones (48 MiB at 64 x 1024): each batch
    sent is bytes not in a cache, as a loader's new batch is (``memcpy_ceiling`` rotates its
    sources for the same reason)."""
    return _flight_ceiling(w, max_batches=max_batches, max_seconds=max_seconds,
                           distinct=CEILING_BATCHES)


def flight_ceiling_hot(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """The same with one prebuilt record batch again and again: both processes send and
    receive bytes their caches already hold (the floor of gRPC's own per-batch work)."""
    return _flight_ceiling(w, max_batches=max_batches, max_seconds=max_seconds, distinct=1)


def _flight_ceiling(w: Workload, *, max_batches: int, max_seconds: float,
                    distinct: int) -> dict[str, Any]:
    import multiprocessing as mp  # noqa: PLC0415

    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_serve_ceiling, args=(w, max_batches, distinct, ready),
                       daemon=True)
    proc.start()
    port = ready.get(timeout=60)
    client = flight.connect(f"grpc://127.0.0.1:{port}")
    b, t = w.batch_size, w.seq_len

    def batches(ticket: bytes = b"x") -> Iterator[tuple[torch.Tensor, ...]]:
        reader = client.do_get(flight.Ticket(ticket))
        for chunk in reader:
            rb = chunk.data
            x = torch.from_numpy(rb.column(0).values.to_numpy()).view(b, t, len(INPUTS))
            y = torch.from_numpy(rb.column(1).values.to_numpy()).view(b, t, len(TARGETS))
            m = torch.from_numpy(rb.column(2).values.to_numpy()).view(b, t).view(torch.bool)
            yield x, y, m

    try:
        for _ in batches(WARM_TICKET):
            pass
        return consume(batches(), max_batches=max_batches, max_seconds=max_seconds)
    finally:
        client.close()
        proc.terminate()
        proc.join(10)


def _serve_ceiling(w: Workload, count: int, distinct: int, ready: Any) -> None:
    server = _CeilingServer([_ceiling_batch(w, seed=k) for k in range(distinct)], count)
    ready.put(server.port)
    threading.Event().wait()


def memcpy_ceiling(w: Workload, *, max_batches: int, max_seconds: float) -> dict[str, Any]:
    """A numpy copy of the same bytes per batch into a preallocated buffer."""
    b, t = w.batch_size, w.seq_len
    n_src = 16  # rotate sources so the copies are not served from a warm L2
    src = np.random.default_rng(0).integers(0, 255, (n_src, w.batch_bytes), dtype=np.uint8)
    dst = np.empty(w.batch_bytes, dtype=np.uint8)
    n_in = b * t * len(COLUMNS) * 4

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        i = 0
        while True:
            np.copyto(dst, src[i % n_src])
            x = torch.from_numpy(dst[:n_in].view(np.float32)).view(b, t, len(COLUMNS))
            yield x, x, x
            i += 1

    return consume(batches(), max_batches=max_batches, max_seconds=max_seconds)


BASELINES: dict[str, Callable[..., dict[str, Any]]] = {
    "numpy_strided": numpy_strided,
    "numpy_memmap": numpy_memmap,
    "windowed_parquet": windowed_parquet,
    "rowgroup_parquet": rowgroup_parquet,
    "full_in_mem_torch": full_in_mem_torch,
    "torch_dataloader": torch_dataloader,
    "flight_ceiling": flight_ceiling,
    "flight_ceiling_hot": flight_ceiling_hot,
    "memcpy_ceiling": memcpy_ceiling,
}
