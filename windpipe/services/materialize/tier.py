"""The host's shared tier of decoded blocks: immutable files that any process maps read-only.

A directory on local disk or ``/dev/shm`` (``--tier-dir``), under a byte budget
(``--tier-bytes``)::

    tier.json              {"format": 2, "id": <uuid>, "host": <hostname>}
    <key>.wpb              one block (materialize.blocks): 64-byte header, then its
                           rows (R, C_in + C_out), float32, row-major (materialize.rows)
    <key>.lock             builders of <key> on this host queue here (flock)
    <key>.wpb.tmp-<pid>-…  a block being written

Rules a reader can rely on:

* a block file is written once, under a temporary name, and renamed into place: a
  reader never sees a partial file, and nothing ever truncates or rewrites one, so a
  mapped block cannot turn into a SIGBUS; its disk blocks are reserved before it is
  mapped for writing, so a full disk is ``resource_exhausted``, not a SIGBUS either;
* builders of one key take its lock: the second waits for the first and maps that
  file, so the host decodes each block once, however many processes ask;
* after a write the least recently used block files (their mtime, touched at every
  open) are unlinked until the directory fits the budget; a process that has one
  mapped keeps its pages until it unmaps it (POSIX), so eviction never breaks a reader.

The Flight server advertises its tier (path, id, host, budget and how the budget was
chosen) in the authenticated ``tier-info`` action; an in-process reader that finds the
same ``tier.json`` id at that path shares it.

The tier is the capacity level, the RAM chunk cache the speed level: a block is always
a mapped file, whose pages are the kernel's page cache, so the chunk cache charges a
mapped block :func:`mapping_charge` (what the mapping costs the process), not its bytes,
and a plan larger than the cache is served from the tier. Its budget, unless set, is
:func:`tier_budget`'s: half the free space of the disk that holds it, at server start.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from windpipe.services.contract.errors import ResourceExhausted
from windpipe.services.materialize.rows import RowMatrix
from windpipe.services.planning.sizes import chunk_row_bytes

__all__ = [
    "AUTO_TIER_CAP", "AUTO_TIER_FLOOR", "AUTO_TIER_FRACTION", "TIER_FORMAT", "Block", "Tier",
    "TierBudget", "TierInfo", "mapping_charge", "tier_budget", "tier_bytes",
]

TIER_FORMAT = 2  # 1: inputs and targets as two matrices (not read: other keys)
_MAGIC = b"WPBLOCK2"
_HEADER = 64
_SUFFIX = ".wpb"
_STALE_S = 3600.0
_PAGE_TABLE_RATIO = 512  # 8 bytes of page table per 4 KiB page mapped
AUTO_TIER_FRACTION = 0.5  # an unset budget: this fraction of the disk's free space
AUTO_TIER_FLOOR = 64 << 20  # ... and no tier when that is less than this
AUTO_TIER_CAP = 1 << 40  # ... and never more than this
_GIB = 1 << 30

Fill = Callable[[np.ndarray], int]  # (rows (R, C)) -> bytes read from storage


class Block(RowMatrix):
    """A loaded block (``windpipe.services.materialize.blocks``): one float32 row matrix
    ``rows (R, C_in + C_out)`` in the row layout of :mod:`windpipe.services.materialize.rows`, in
    memory or mapped read-only from a tier file."""

    __slots__ = ()


@dataclass(frozen=True, kw_only=True)
class TierBudget:
    """A tier's byte budget (0: no tier) and, in words, how it was chosen (stated in the
    ``tier-info`` answer and the server's start log, so an operator sees what "auto" meant
    on this disk)."""

    bytes: int
    source: str


def _gib(nbytes: int) -> str:
    return f"{nbytes / _GIB:.1f} GiB"


def tier_budget(directory: Path | None, configured: int | None) -> TierBudget:
    """The budget of a tier at ``directory``: ``configured`` when set (0: no tier), else
    (``None``: auto) :data:`AUTO_TIER_FRACTION` of the free space of the filesystem that
    holds it plus the blocks it already holds (a restart does not shrink its own tier),
    capped at :data:`AUTO_TIER_CAP`; below :data:`AUTO_TIER_FLOOR` there is no tier (a
    nearly full disk is not filled further).

    Resolved once, at server start: the budget of a running tier does not follow the
    disk's later free space, which the tier's own writes change.
    """
    if configured is not None:
        return TierBudget(bytes=configured,
                          source="set: 0, no tier" if configured == 0 else "set")
    if directory is None:
        return TierBudget(bytes=0, source="auto: no tier directory")
    probe = Path(directory).resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        return TierBudget(bytes=0, source=f"auto: free space of {probe} unknown ({exc}): "
                                          "no tier")
    own = 0
    if Path(directory).is_dir():
        own = sum(p.stat().st_size for p in Path(directory).glob(f"*{_SUFFIX}")
                  if p.is_file())
    budget = min(int((free + own) * AUTO_TIER_FRACTION), AUTO_TIER_CAP)
    held = f" + {_gib(own)} of its blocks" if own else ""
    how = f"auto: {AUTO_TIER_FRACTION:.0%} of {_gib(free)} free{held}"
    if budget < AUTO_TIER_FLOOR:
        return TierBudget(bytes=0, source=f"{how} is under {AUTO_TIER_FLOOR >> 20} MiB: "
                                          "no tier")
    return TierBudget(bytes=budget, source=how + (
        f", capped at {_gib(AUTO_TIER_CAP)}" if budget == AUTO_TIER_CAP else ""))


def mapping_charge(nbytes: int) -> int:
    """What a mapped block of ``nbytes`` bytes costs its process beyond the page cache
    (a header page and the page tables): the chunk cache charges this, so a plan larger
    than the cache but within the tier is held as mapped blocks; their pages are the
    kernel's to keep or drop (the page cache is the RAM level of the tier)."""
    return _HEADER + nbytes // _PAGE_TABLE_RATIO


@dataclass(frozen=True)
class TierInfo:
    """What a server advertises: where its tier is, its id, the host it is on, its budget
    and how that budget was chosen."""

    path: str
    id: str
    host: str
    budget_bytes: int
    budget_source: str = "set"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"path": self.path, "id": self.id, "host": self.host,
                "budget_bytes": self.budget_bytes, "budget_source": self.budget_source}

    @classmethod
    def from_dict(cls, body: Any) -> TierInfo | None:
        """From :meth:`as_dict` (None for anything else)."""
        if not isinstance(body, dict):
            return None
        try:
            return cls(path=str(body["path"]), id=str(body["id"]), host=str(body["host"]),
                       budget_bytes=int(body["budget_bytes"]),
                       budget_source=str(body.get("budget_source", "set")))
        except (KeyError, TypeError, ValueError):
            return None


def tier_bytes(nbytes: int, *, blocks: int = 1) -> int:
    """Bytes ``blocks`` blocks of ``nbytes`` bytes of matrices in all take in a tier: the
    matrices and each file's header."""
    return nbytes + blocks * _HEADER


def _block_bytes(rows: int, c_in: int, c_out: int) -> int:
    return tier_bytes(rows * chunk_row_bytes(c_in, c_out))


class Tier:
    """One tier directory (created with its ``tier.json`` when first used, not before)."""

    def __init__(self, directory: Path, *, budget_bytes: int, budget_source: str = "set") -> None:
        if budget_bytes < 1:
            msg = f"tier budget must be positive, got {budget_bytes}"
            raise ValueError(msg)
        self.directory = Path(directory)
        self.budget_bytes = int(budget_bytes)
        self.budget_source = budget_source
        self._lock = threading.Lock()
        self._id: str | None = None
        self.builds = self.hits = self.evictions = self.bytes_written = 0

    @property
    def id(self) -> str:
        """The tier's id (``tier.json``; the directory is set up on first use)."""
        with self._lock:
            if self._id is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._id = self._identity()
                self._remove_stale_temporaries()
            return self._id

    @classmethod
    def attach(cls, info: TierInfo) -> Tier | None:
        """The tier a server advertised, when it is reachable here (same ``tier.json`` id
        at the same path: the same host, or a filesystem shared with it); else None."""
        try:
            found = json.loads((Path(info.path) / "tier.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(found, dict) or found.get("id") != info.id:
            return None
        return cls(Path(info.path), budget_bytes=info.budget_bytes)

    def info(self) -> TierInfo:
        """What a server advertises."""
        return TierInfo(path=str(self.directory.resolve()), id=self.id,
                        host=socket.gethostname(), budget_bytes=self.budget_bytes,
                        budget_source=self.budget_source)

    def stats(self) -> dict[str, int]:
        """Counters of this process and the bytes of the directory's blocks."""
        return {"tier_builds": self.builds, "tier_hits": self.hits,
                "tier_evictions": self.evictions, "tier_bytes_written": self.bytes_written,
                "tier_used_bytes": self.used_bytes(), "tier_budget_bytes": self.budget_bytes}

    def fits(self, nbytes: int, *, blocks: int = 1) -> bool:
        """Whether ``blocks`` blocks of ``nbytes`` bytes in all fit the budget together."""
        return tier_bytes(nbytes, blocks=blocks) <= self.budget_bytes

    def holds(self, key: str) -> bool:
        """Whether the block ``key`` is in the tier now (another process may evict it
        the next moment: :meth:`get_or_build` is what a reader relies on)."""
        return self._path(key).is_file()

    def used_bytes(self) -> int:
        """Bytes of every block file in the directory."""
        return sum(size for _, size, _ in self._blocks())

    # -- blocks -----------------------------------------------------------------------

    def open(self, key: str) -> Block | None:
        """The block ``key`` mapped read-only, or None when the tier does not hold it."""
        path = self._path(key)
        try:
            raw = np.memmap(path, dtype=np.uint8, mode="r")
        except (FileNotFoundError, ValueError):
            return None
        header = bytes(raw[:_HEADER])
        if len(header) < _HEADER or header[:8] != _MAGIC:
            return None
        rows, c_in, c_out = (int(v) for v in np.frombuffer(header[8:32], dtype="<i8"))
        if raw.shape[0] != _block_bytes(rows, c_in, c_out):
            return None
        matrix = raw[_HEADER:].view(np.float32).reshape(rows, c_in + c_out)
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        with self._lock:
            self.hits += 1
        return Block(rows=matrix, c_in=c_in)

    def get_or_build(self, key: str, *, rows: int, c_in: int, c_out: int,
                     fill: Fill) -> tuple[Block, int]:
        """The block ``key``, built with ``fill`` unless some process already did.

        Returns the block and the bytes this call read from storage (0 when it was
        there). A block larger than the whole budget is ``resource_exhausted``.
        """
        found = self.open(key)
        if found is not None:
            return found, 0
        nbytes = _block_bytes(rows, c_in, c_out)
        if nbytes > self.budget_bytes:
            raise ResourceExhausted(
                f"a block of {nbytes} bytes does not fit the tier budget of "
                f"{self.budget_bytes} bytes: raise --tier-bytes",
                details={"block_bytes": nbytes, "tier_budget_bytes": self.budget_bytes},
            )
        self.id  # noqa: B018 - sets up the directory
        with self._exclusive(key):
            found = self.open(key)
            if found is not None:
                return found, 0
            self._make_room(nbytes, keep=key)
            read = self._write(key, rows=rows, c_in=c_in, c_out=c_out, fill=fill)
        block = self.open(key)
        if block is None:  # evicted by another process in between: keep this one's pages
            raise ResourceExhausted(f"tier block {key} was evicted as soon as it was written: "
                                    "raise --tier-bytes", details={"key": key})
        return block, read

    # -- internals --------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            msg = f"tier keys are hex digests, got {key!r}"
            raise ValueError(msg)
        return self.directory / f"{key}{_SUFFIX}"

    def _identity(self) -> str:
        marker = self.directory / "tier.json"
        try:
            return str(json.loads(marker.read_text())["id"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        body = {"format": TIER_FORMAT, "id": uuid.uuid4().hex, "host": socket.gethostname()}
        tmp = self.directory / f"tier.json.tmp-{os.getpid()}-{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(body))
        try:
            os.link(tmp, marker)  # the first creator wins; everyone reads its id
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return str(json.loads(marker.read_text())["id"])

    @contextlib.contextmanager
    def _exclusive(self, key: str) -> Iterator[None]:
        with open(self.directory / f"{key}.lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _write(self, key: str, *, rows: int, c_in: int, c_out: int, fill: Fill) -> int:
        nbytes = _block_bytes(rows, c_in, c_out)
        tmp = self.directory / f"{key}{_SUFFIX}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            self._reserve(tmp, nbytes)
            raw = np.memmap(tmp, dtype=np.uint8, mode="r+", shape=(nbytes,))
            header = _MAGIC + np.asarray([rows, c_in, c_out], dtype="<i8").tobytes()
            raw[: len(header)] = np.frombuffer(header, dtype=np.uint8)
            read = fill(raw[_HEADER:].view(np.float32).reshape(rows, c_in + c_out))
            raw.flush()
            del raw
            os.rename(tmp, self._path(key))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        with self._lock:
            self.builds += 1
            self.bytes_written += nbytes
        return read

    def _reserve(self, path: Path, nbytes: int) -> None:
        """Create ``path`` with its ``nbytes`` allocated on disk. The block is written
        through a mapping, and a page the file system cannot back (a full disk, a full
        tmpfs) is a SIGBUS that kills the process; reserved first, a full disk is this
        ``resource_exhausted`` instead."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            free = shutil.disk_usage(self.directory).free
            raise ResourceExhausted(
                f"the tier's disk has no room for a block of {nbytes} bytes ({free} bytes "
                "free): free the disk or lower --tier-bytes",
                details={"block_bytes": nbytes, "free_bytes": free}) from None
        finally:
            os.close(fd)

    def _blocks(self) -> list[tuple[Path, int, float]]:
        out = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            out.append((path, stat.st_size, stat.st_mtime))
        return out

    def _make_room(self, nbytes: int, *, keep: str) -> None:
        blocks = sorted(self._blocks(), key=lambda b: b[2])
        used = sum(size for _, size, _ in blocks)
        for path, size, _ in blocks:
            if used + nbytes <= self.budget_bytes:
                return
            if path.name == f"{keep}{_SUFFIX}":
                continue
            path.unlink(missing_ok=True)
            used -= size
            with self._lock:
                self.evictions += 1

    def _remove_stale_temporaries(self) -> None:
        """Temporaries of writers that died (their pid is gone and the file is an hour old:
        a pid of another PID namespace may look gone while its writer lives)."""
        for tmp in self.directory.glob(f"*{_SUFFIX}.tmp-*"):
            try:
                old = time.time() - tmp.stat().st_mtime > _STALE_S
                pid = int(tmp.name.rsplit(".tmp-", 1)[1].split("-", 1)[0])
                os.kill(pid, 0)
            except ProcessLookupError:
                if old:
                    tmp.unlink(missing_ok=True)
            except (ValueError, OSError):
                continue
