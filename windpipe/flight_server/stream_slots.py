"""Bounds on a Flight server's open ``DoGet`` streams, for clients that stop reading.

pyarrow's Flight server serves each ``DoGet`` on a gRPC thread of its own that asks the
stream's generator for the next batch only once gRPC took the previous one. A client
that stops reading (a hung or paused trainer, a reader that opened a stream and left it
open) blocks that thread in gRPC's write (HTTP/2 flow control), with the batch it holds
and a few MiB of gRPC buffers, until the call ends; no Python code of the stream runs
meanwhile, so the generator builds nothing ahead (the build-ahead thread stops at
``build_ahead_bytes``, the chunk read-ahead at ``readahead_batches``), but nothing ends
the call either: 64 such clients held 64 threads and 133 MiB. So:

* :class:`StreamSlots` admits at most ``flight_max_streams`` streams at once. One more is
  refused when ``DoGet`` starts, before its plan is loaded or a batch built, with
  ``unavailable`` (retryable; ``details.limit`` ``"flight_max_streams"``): threads and
  buffers stay bounded by the cap whatever the clients do. A slot is held from the
  admission until the stream's generator is closed, or dropped unstarted (pyarrow drops
  the generator of a client that left before the first batch: a finalizer frees it).
* A watchdog thread ends a stream whose client has taken nothing for
  ``flight_stream_stall_s`` seconds (the stream handed gRPC a batch and was not asked for
  the next within that time; the time a batch takes to build does not count). pyarrow
  gives a server no way to cancel a call, and a thread blocked in a gRPC write returns
  only when its call ends, so the watchdog shuts down the server's side of that client's
  TCP connection (:func:`shutdown_peer`): gRPC ends every call of the connection, the
  write returns, the generator is closed and the slot, the build-ahead thread and the
  read-ahead go with it. The client sees ``unavailable`` (the SDK resumes the pass at its
  next batch, as after any lost server). A stream whose peer is not a TCP connection of
  this process (a unix socket) cannot be ended so: it keeps its slot until its call ends.
* A stopping server does the same to the streams still open at the end of its grace
  period (:meth:`StreamSlots.open_slots`): gRPC's shutdown waits for every call, and a
  stream blocked on a client that stopped reading would otherwise never end.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable

from windpipe.services.contract.errors import Unavailable

__all__ = ["StreamSlot", "StreamSlots", "shutdown_peer"]

_FD_DIRS = ("/proc/self/fd", "/dev/fd")  # Linux, then the BSDs and macOS
_WATCH_EVERY_S = 1.0  # the watchdog looks at most this long apart (stall_s / 4 if shorter)


class StreamSlot:
    """One admitted stream: ``peer`` (gRPC's address of the client), ``plan``.

    The stream calls :meth:`handed` as it hands gRPC a batch and :meth:`taken` when it is
    asked for the next; :attr:`stalled` is set once the watchdog ended it; :meth:`release`
    (idempotent) frees the slot.
    """

    def __init__(self, owner: StreamSlots, *, peer: str, plan: str) -> None:
        self._owner = owner
        self.peer = peer
        self.plan = plan
        self.sent = 0  # batches handed to gRPC
        self.handed_at: float | None = None  # when the batch gRPC holds now was handed
        self.stalled = False

    def handed(self) -> None:
        """A batch goes to gRPC: the stall clock runs until the next is asked for."""
        self.sent += 1
        self.handed_at = self._owner.clock()

    def taken(self) -> None:
        """gRPC took the batch and asks for the next: the client is reading."""
        self.handed_at = None

    def release(self) -> None:
        """Free the slot (once; later calls do nothing)."""
        self._owner.release(self)


class StreamSlots:
    """At most ``max_streams`` open streams, each ended once stalled ``stall_s`` seconds.

    ``on_stall(slot, waited_s)`` is called on the watchdog thread, once per stalled stream:
    the server logs it, counts it and ends its connection. ``clock`` is for tests.
    """

    def __init__(self, *, max_streams: int, stall_s: float,
                 on_stall: Callable[[StreamSlot, float], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_streams = max_streams
        self.stall_s = stall_s
        self.clock = clock
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._open: set[StreamSlot] = set()
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def acquire(self, *, peer: str, plan: str) -> StreamSlot:
        """A slot for a new stream, else ``unavailable`` (all ``max_streams`` are taken)."""
        with self._lock:
            if len(self._open) >= self.max_streams:
                raise Unavailable(
                    f"this Flight server already serves {self.max_streams} streams, its "
                    "limit (WINDPIPE_FLIGHT_MAX_STREAMS): retry shortly or read from "
                    "another server",
                    details={"limit": "flight_max_streams", "max": self.max_streams,
                             "setting": "WINDPIPE_FLIGHT_MAX_STREAMS"})
            slot = StreamSlot(self, peer=peer, plan=plan)
            self._open.add(slot)
            if self._watchdog is None and not self._closed.is_set():
                self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                                  name="windpipe-flight-stall-watchdog")
                self._watchdog.start()
        return slot

    def open_slots(self) -> list[StreamSlot]:
        """The streams open now (the server ends their connections when it stops)."""
        with self._lock:
            return list(self._open)

    def release(self, slot: StreamSlot) -> None:
        """Free ``slot`` (nothing when it was freed already)."""
        with self._lock:
            self._open.discard(slot)

    def close(self) -> None:
        """Stop the watchdog (the server is stopping)."""
        self._closed.set()
        thread = self._watchdog
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def check(self) -> list[StreamSlot]:
        """End the streams stalled now (what the watchdog does every second or so); returns
        them."""
        now = self.clock()
        with self._lock:
            due = [(slot, now - at) for slot in self._open
                   if not slot.stalled and (at := slot.handed_at) is not None
                   and now - at >= self.stall_s]
            for slot, _ in due:
                slot.stalled = True
        for slot, waited in due:
            self._on_stall(slot, waited)
        return [slot for slot, _ in due]

    def _watch(self) -> None:
        every = min(_WATCH_EVERY_S, self.stall_s / 4)
        while not self._closed.wait(every):
            self.check()


def _peer_address(peer: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """The IP address and port of gRPC's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` (brackets
    possibly percent-encoded); None for anything else (a unix socket)."""
    kind, _, rest = urllib.parse.unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    try:
        return _plain_ip(host.strip("[]")), int(port)
    except ValueError:
        return None


def _plain_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``host`` as an address, an IPv4-mapped IPv6 address as its IPv4 one."""
    ip = ipaddress.ip_address(host.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _open_fds() -> list[int]:
    for path in _FD_DIRS:
        with contextlib.suppress(OSError):
            return [int(name) for name in os.listdir(path) if name.isdigit()]
    return []


def shutdown_peer(peer: str, *, port: int) -> bool:
    """Shut down (``shutdown(2)``, both ways) this process's TCP connections on local
    ``port`` to the client gRPC names ``peer``; whether one was found.

    The file descriptors stay gRPC's (it closes them once it sees the connection end):
    each socket is looked at through a duplicate, and a descriptor that closed or changed
    meanwhile is matched by its addresses, not by its number.
    """
    want = _peer_address(peer)
    if want is None:
        return False
    found = False
    for fd in _open_fds():
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        with sock:
            try:
                if sock.type != socket.SOCK_STREAM or sock.getsockname()[1] != port:
                    continue
                host, peer_port = sock.getpeername()[:2]
                if (_plain_ip(host), int(peer_port)) != want:
                    continue
                sock.shutdown(socket.SHUT_RDWR)
                found = True
            except (OSError, ValueError, IndexError, TypeError):
                continue
    return found
