"""The device feed: batches read ahead in a background thread and put on the device.

How a batch reaches the GPU (CUDA, ``pin_memory`` and ``prefetch_to_device`` on):

1. the reader thread takes the next record batch off the Flight stream (zero-copy
   CPU tensors over the Arrow buffers);
2. it copies the tensors into a page-locked buffer from a bounded pool (total
   page-locked bytes never exceed ``pinned_bytes_cap``; when the pool is full the
   reader waits for a buffer to come back). A batch built in this process (the
   same-host path, ``gather_source``) is instead gathered straight into that buffer
   (``windpipe.sdk._pinned``): its one host copy;
3. it issues non-blocking host-to-device copies on a side CUDA stream and records
   an event after them: one for a batch's window block (``inputs`` and ``targets``
   are views of it on the device), one each for its mask and ``has_channel``;
4. the consumer's stream waits on that event before the batch is handed out, so the
   copy overlaps the consumer's compute of earlier batches;
5. a buffer returns to the pool only after its copy's event has completed.

At most ``read_ahead`` batches are read ahead (``plan.loader`` passes
``LoaderOptions.read_ahead``, ``prefetch_factor * max(1, num_workers)``: as many as a
torch DataLoader with those options keeps in flight; docs/types.md). Without CUDA
(``device="auto"`` or ``"cpu"``) the same thread reads ahead and the batches are CPU
tensors. Asking for ``"cuda"`` on a machine without CUDA raises
:class:`InvalidConfig`: there is no silent fall-back to the CPU.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from windpipe.sdk._aligned import AlignedBatch
from windpipe.sdk._batch import Batch
from windpipe.sdk._exceptions import InvalidConfig, ResourceExhausted
from windpipe.sdk._html import progress_bar
from windpipe.sdk._pinned import PinnedBatchMemory
from windpipe.sdk._stats import LoaderStats
from windpipe.sdk._torch_import import PIN_MEMORY_NEEDS_CUDA, torch
from windpipe.services.materialize.batch_memory import BatchMemory

__all__ = ["DeviceLoader", "PinnedPool", "resolve_device"]

AnyBatch = Batch | AlignedBatch  # a plain plan's batch, or an aligned plan's (SEMANTICS 9)
_DEFAULT_PINNED_CAP = 512 << 20
_ALIGN = 1 << 20


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when available else CPU; CUDA without CUDA -> InvalidConfig."""
    name = str(device)
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        msg = f"unknown device {name!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        raise InvalidConfig(msg) from exc
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            msg = (
                f"device={name!r} was asked for but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use device='auto' or 'cpu'"
            )
            raise InvalidConfig(msg)
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            msg = f"device={name!r}: this machine has {count} CUDA device(s)"
            raise InvalidConfig(msg)
    elif resolved.type != "cpu":
        msg = f"device {name!r} is not supported: use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        raise InvalidConfig(msg)
    return resolved


class PinnedPool:
    """Reusable page-locked byte buffers whose total size never exceeds ``cap_bytes``."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.allocated = 0
        self.peak = 0
        self._free: list[torch.Tensor] = []
        self._busy: list[tuple[torch.Tensor, Any]] = []

    def _reclaim(self, *, wait: bool) -> None:
        still: list[tuple[torch.Tensor, Any]] = []
        for i, (buf, event) in enumerate(self._busy):
            if event.query():
                self._free.append(buf)
            elif wait and i == 0 and not still:
                event.synchronize()
                self._free.append(buf)
            else:
                still.append((buf, event))
        self._busy = still

    def take(self, nbytes: int) -> torch.Tensor | None:
        """A page-locked uint8 buffer of at least ``nbytes``, or None while the pool is full.

        None means every byte under the cap is held by batches not yet handed to the
        consumer; try again once the consumer has taken one.
        """
        if nbytes > self.cap_bytes:
            msg = (
                f"one batch needs {nbytes} page-locked bytes, more than the cap of "
                f"{self.cap_bytes}; raise pinned_bytes_cap"
            )
            raise ResourceExhausted(msg)
        self._reclaim(wait=False)
        fits = [b for b in self._free if b.numel() >= nbytes]
        if not fits and self._busy:
            self._reclaim(wait=True)
            fits = [b for b in self._free if b.numel() >= nbytes]
        if fits:
            buf = min(fits, key=lambda b: b.numel())
            self._free = [b for b in self._free if b is not buf]
            return buf
        size = min(-(-nbytes // _ALIGN) * _ALIGN, self.cap_bytes)
        while self._free and self.allocated + size > self.cap_bytes:
            self.allocated -= self._free.pop(0).numel()
        if self.allocated + size > self.cap_bytes:
            return None
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        return torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def give_back(self, buf: torch.Tensor, event: Any) -> None:
        """Return ``buf`` once ``event`` (the copy out of it) has completed."""
        self._busy.append((buf, event))


def _pin(batch: AnyBatch, buf: torch.Tensor) -> AnyBatch:
    """Copy the batch's tensors into views of the page-locked ``buf``."""
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, src in batch.tensors().items():
        n = src.numel() * src.element_size()
        view = buf[offset:offset + n].view(src.dtype).view(src.shape)
        view.copy_(src)
        out[name] = view
        offset += -(-n // 64) * 64
    return batch.replace_tensors(out)


def _pinned_nbytes(batch: AnyBatch) -> int:
    return sum(
        -(-(t.numel() * t.element_size()) // 64) * 64 for t in batch.tensors().values()
    )


@dataclass
class _Item:
    batch: AnyBatch | None = None
    event: Any = None
    buf: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


class DeviceLoader:
    """Iterate batches on ``device``, read ahead by a background thread (see module doc).

    ``source`` makes the batch iterator (it runs in the reader thread); at most
    ``read_ahead`` batches wait, ready, for the consumer. After a full
    pass, ``stats`` holds a :class:`LoaderStats` with a one-line verdict. ``len()`` is
    the pass's batch count (``total``, else ``length()``, e.g. ``Plan.pass_length``), and
    a progress bar shown (``progress``) gets it as its total, so it has an ETA.
    ``pinned_bytes_cap`` (None: 512 MiB) bounds the page-locked buffers.
    ``gather_source(memory)``: the same batches as ``source()``, those it builds in this
    process written into ``memory`` (``windpipe.sdk._pinned``); with page-locked buffers on, the
    loader reads it instead, so such a batch costs one host copy, not two.
    ``timeline=True`` records a timing event pair around every host-to-device copy
    (``copy_events``; see ``bench/gpu_check.py``).
    """

    def __init__(
        self,
        source: Callable[[], Iterator[AnyBatch]],
        *,
        device: str | torch.device = "auto",
        read_ahead: int = 4,
        pin_memory: bool | None = None,
        non_blocking: bool = True,
        prefetch_to_device: bool | None = None,
        pinned_bytes_cap: int | None = None,
        failovers: Callable[[], int] | None = None,
        progress: bool | None = None,
        total: int | None = None,
        length: Callable[[], int] | None = None,
        desc: str = "batches",
        timeline: bool = False,
        gather_source: Callable[[BatchMemory], Iterator[AnyBatch]] | None = None,
    ) -> None:
        if read_ahead < 1:
            msg = f"read_ahead must be >= 1, got {read_ahead}"
            raise InvalidConfig(msg)
        self.device = resolve_device(device)
        cuda = self.device.type == "cuda"
        if pin_memory and not torch.cuda.is_available():
            raise InvalidConfig(PIN_MEMORY_NEEDS_CUDA)
        self.pin_memory = cuda if pin_memory is None else bool(pin_memory)
        self.prefetch_to_device = cuda if prefetch_to_device is None else bool(
            prefetch_to_device
        )
        self.non_blocking = non_blocking
        self.read_ahead = read_ahead
        self.pinned_bytes_cap = (_DEFAULT_PINNED_CAP if pinned_bytes_cap is None
                                 else pinned_bytes_cap)
        self._source = source
        self._gather_source = gather_source
        self._failovers = failovers
        self._progress = progress
        self._total = total
        self._length = length
        self._desc = desc
        self.timeline = timeline
        self.copy_events: list[tuple[Any, Any]] = []
        self.stats: LoaderStats | None = None
        self.pool: PinnedPool | None = None

    def __iter__(self) -> Iterator[AnyBatch]:
        return self._run()

    def __len__(self) -> int:
        """Batches this pass yields (``total``, else counted from the stored plan)."""
        if self._total is not None:
            return self._total
        if self._length is None:
            msg = "this loader's source does not know its batch count"
            raise TypeError(msg)
        self._total = self._length()
        return self._total

    def __repr__(self) -> str:
        done = "not run yet" if self.stats is None else f"last pass: {self.stats.batches} batches"
        return (f"DeviceLoader({self._desc}, device={self.device}, "
                f"read_ahead={self.read_ahead}, pin_memory={self.pin_memory}, {done})")

    def _run(self) -> Iterator[AnyBatch]:
        tqdm = progress_bar()  # imported only when a bar is drawn

        cuda = self.device.type == "cuda"
        pinned = cuda and self.pin_memory
        self.pool = PinnedPool(self.pinned_bytes_cap) if pinned else None
        self.copy_events = []
        side = torch.cuda.Stream(self.device) if cuda and self.prefetch_to_device else None
        q: queue.Queue[_Item] = queue.Queue(maxsize=self.read_ahead)
        stop = threading.Event()
        stats = LoaderStats(device=str(self.device))
        pool_lock = threading.Lock()

        def put(item: _Item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                except queue.Full:
                    continue
                return True
            return False

        memory = None
        gather_source = self._gather_source
        if self.pool is not None and gather_source is not None:
            memory = PinnedBatchMemory(lambda n: self._take(n, pool_lock, stop))

        def reader() -> None:
            it = (self._source() if memory is None or gather_source is None
                  else gather_source(memory))
            try:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    try:
                        batch = next(it)
                    except StopIteration:
                        break
                    stats.server_wait_s += time.perf_counter() - t0
                    item = _Item(batch=batch)
                    gathered = None if memory is None else memory.taken()
                    if gathered is not None:  # built into a pinned buffer: no second copy
                        item.buf = gathered
                        stats.pinned_gathers += 1
                    elif self.pool is not None:
                        stats.pinned_copies += 1
                        buf = self._take(_pinned_nbytes(batch), pool_lock, stop)
                        if buf is None:
                            return
                        item.buf = buf
                        batch = item.batch = _pin(batch, buf)
                    if side is not None:
                        t1 = time.perf_counter()
                        with torch.cuda.stream(side):
                            begin = None
                            if self.timeline:
                                begin = torch.cuda.Event(enable_timing=True)
                                begin.record(side)
                            item.batch = batch.to(self.device, non_blocking=self.non_blocking)
                            item.event = torch.cuda.Event(enable_timing=self.timeline)
                            item.event.record(side)
                            if begin is not None:
                                self.copy_events.append((begin, item.event))
                        stats.h2d_s += time.perf_counter() - t1
                    if not put(item):
                        return
                put(_Item(done=True))
            except BaseException as exc:
                put(_Item(error=exc))
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()

        thread = threading.Thread(target=reader, name="windpipe-loader", daemon=True)
        bar = tqdm(total=self._total, desc=self._desc, unit="batch",
                   disable=True if self._progress is False else None if
                   self._progress is None else False)
        if not bar.disable and bar.total is None and self._length is not None:
            bar.total = len(self)  # a shown bar gets its total and ETA
            bar.refresh()
        start = time.perf_counter()
        thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = q.get()
                waited = time.perf_counter() - t0
                stats.consumer_wait_s += waited
                if item.error is not None:
                    raise item.error
                if item.done or item.batch is None:
                    break
                batch = self._deliver(item, pool_lock)
                stats.batches += 1
                stats.tokens += batch.tokens
                stats.bytes += batch.nbytes
                stats.timeline.append((time.perf_counter() - start, waited, batch.tokens))
                bar.update(1)
                t1 = time.perf_counter()
                yield batch
                stats.consumer_s += time.perf_counter() - t1
            stats.wall_s = time.perf_counter() - start
            stats.failovers = self._failovers() if self._failovers else 0
            self.stats = stats
        finally:
            stop.set()
            bar.close()
            thread.join(timeout=2)

    def _take(
        self, nbytes: int, lock: threading.Lock, stop: threading.Event
    ) -> torch.Tensor | None:
        assert self.pool is not None
        while not stop.is_set():
            with lock:
                buf = self.pool.take(nbytes)
            if buf is not None:
                return buf
            time.sleep(0.0005)
        return None

    def _deliver(self, item: _Item, pool_lock: threading.Lock) -> AnyBatch:
        batch = item.batch
        assert batch is not None
        if self.device.type != "cuda":
            return batch
        current = torch.cuda.current_stream(self.device)
        if item.event is not None:
            current.wait_event(item.event)
            for t in batch.tensors().values():
                t.record_stream(current)
            done_event = item.event
        else:
            batch = batch.to(self.device, non_blocking=self.non_blocking)
            done_event = torch.cuda.Event()
            done_event.record(current)
        if item.buf is not None and self.pool is not None:
            with pool_lock:
                self.pool.give_back(item.buf, done_event)
        return batch
