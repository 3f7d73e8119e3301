"""A slow object store on loopback: an HTTP reverse proxy that adds first-byte latency and
caps bandwidth in front of an S3-compatible server (moto's server mode in the tests
and benchmarks).

Every request waits ``latency_s`` after it arrived before the first byte of its answer
leaves (the upstream's own time counts towards it), then the body leaves at most at
``bandwidth_bps``: **in aggregate** over all connections by default (one pacer shared
by every response, the way a host's link or a store's per-client limit behaves), or
**per connection** with ``per_connection=True``. Responses are read whole from the
upstream first (one fresh upstream connection per request), so the upstream's speed
stays out of the pacing as long as it is faster than the cap.

    python -m bench.latency_proxy --upstream http://127.0.0.1:5000 --latency-ms 20 \\
        --bandwidth-mbps 200

prints ``listening on http://127.0.0.1:PORT`` and serves until interrupted. In a
program: ``with LatencyProxy(upstream, latency_s=0.02) as proxy: proxy.endpoint``.
Standard library only (asyncio).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlparse

__all__ = ["LatencyProxy", "ProxyStats", "main"]

_SLICE = 256 << 10  # paced slices: ~1.3 ms each at 200 MB/s
_READ_LIMIT = 16 << 20  # upstream read buffer: large bodies in few reads
_NO_BODY = {204, 304}


class _Pacer:
    """Bytes leave no faster than ``rate`` per second: each slice is given the next free
    interval of the link (first come, first served)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next = 0.0

    async def take(self, nbytes: int) -> None:
        now = time.perf_counter()
        start = max(now, self._next)
        self._next = start + nbytes / self.rate
        wait = self._next - now
        if wait > 0.0005:
            await asyncio.sleep(wait)


@dataclass
class ProxyStats:
    """Requests answered and body bytes sent, and the first and last byte times."""

    requests: int = 0
    body_bytes: int = 0
    first_s: float | None = None
    last_s: float | None = None


def _parse_head(raw: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = raw.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers.append((k.strip(), v.strip()))
    return lines[0], headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            with contextlib.suppress(asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n")
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


class LatencyProxy:
    """The proxy (see the module docstring); :meth:`start` runs it on its own thread."""

    def __init__(self, upstream: str, *, latency_s: float = 0.020,
                 bandwidth_bps: float = 200e6, per_connection: bool = False,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.latency_s = latency_s
        self.bandwidth_bps = bandwidth_bps
        self.per_connection = per_connection
        self.stats = ProxyStats()
        self._bind = (host, port)
        self._shared = _Pacer(bandwidth_bps)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``http://host:port`` of the proxy."""
        return f"http://{self._bind[0]}:{self.port}"

    def start(self) -> LatencyProxy:
        """Listen (on a thread of its own) and return once bound."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._client, *self._bind))
            self.port = int(self._server.sockets[0].getsockname()[1])
            ready.set()
            loop.run_forever()
            self._server.close()
            pending = asyncio.all_tasks(loop)  # open client connections
            for task in pending:
                task.cancel()
            if pending:  # gather() of nothing asks for this thread's loop: there is none
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=serve, name="latency-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        """Stop listening and end the thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    async def _client(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        pacer = _Pacer(self.bandwidth_bps) if self.per_connection else self._shared
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                arrived = time.perf_counter()
                line, headers = _parse_head(head[:-4])
                if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
                    body = await _read_chunked(reader)
                    headers = [(k, v) for k, v in headers
                               if k.lower() != "transfer-encoding"]
                    headers.append(("Content-Length", str(len(body))))
                else:
                    body = await reader.readexactly(int(_header(headers, "content-length")
                                                        or 0))
                await self._exchange(line, headers, body, arrived, writer, pacer)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _exchange(self, line: str, headers: list[tuple[str, str]], body: bytes,
                        arrived: float, writer: asyncio.StreamWriter, pacer: _Pacer) -> None:
        """One request: forwarded upstream on a fresh connection; the answer's head leaves
        ``latency_s`` after ``arrived``, its body streams through as it comes, paced."""
        method = line.split(" ", 1)[0].upper()
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream, limit=_READ_LIMIT)
        except OSError:
            await self._answer(writer, arrived, "HTTP/1.1 502 Bad Gateway",
                               [("Content-Length", "0")])
            return
        try:
            kept = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
            raw = "\r\n".join([line, *(f"{k}: {v}" for k, v in kept), "Connection: close",
                               "", ""]).encode("latin-1")
            up_w.write(raw + body)
            await up_w.drain()
            status, resp = _parse_head((await up_r.readuntil(b"\r\n\r\n"))[:-4])
            code = int(status.split(" ")[1])
            length = _header(resp, "content-length")
            chunked = (_header(resp, "transfer-encoding") or "").lower() == "chunked"
            out = [(k, v) for k, v in resp if k.lower() not in (
                "connection", "keep-alive", "transfer-encoding")]
            out.append(("Connection", "keep-alive"))
            if method == "HEAD" or code in _NO_BODY:
                await self._answer(writer, arrived, status, out)
                return
            if length is not None and not chunked:  # the common case: stream it through
                await self._answer(writer, arrived, status, out)
                await self._stream(writer, up_r, int(length), pacer)
                return
            payload = await _read_chunked(up_r) if chunked else await up_r.read()
            out = [(k, v) for k, v in out if k.lower() != "content-length"]
            out.append(("Content-Length", str(len(payload))))
            await self._answer(writer, arrived, status, out)
            await self._send(writer, payload, pacer)
        finally:
            up_w.close()

    async def _answer(self, writer: asyncio.StreamWriter, arrived: float, status: str,
                      headers: list[tuple[str, str]]) -> None:
        """The response head, no earlier than ``latency_s`` after the request arrived."""
        delay = arrived + self.latency_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        self.stats.requests += 1
        writer.write(self._head(status, headers))

    async def _stream(self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader,
                      length: int, pacer: _Pacer) -> None:
        """``length`` body bytes from ``reader`` to ``writer`` as they arrive, paced."""
        left = length
        while left > 0:
            piece = await reader.read(min(_SLICE, left))
            if not piece:
                raise ConnectionError("the upstream closed mid-body")
            left -= len(piece)
            await self._paced(writer, piece, pacer)
        await writer.drain()

    @staticmethod
    def _head(status: str, headers: list[tuple[str, str]]) -> bytes:
        return "\r\n".join([status, *(f"{k}: {v}" for k, v in headers), "", ""]).encode(
            "latin-1")

    async def _send(self, writer: asyncio.StreamWriter, payload: bytes,
                    pacer: _Pacer) -> None:
        view = memoryview(payload)
        for at in range(0, len(view), _SLICE):
            await self._paced(writer, view[at : at + _SLICE], pacer)
        await writer.drain()

    async def _paced(self, writer: asyncio.StreamWriter, piece: bytes | memoryview,
                     pacer: _Pacer) -> None:
        await pacer.take(len(piece))
        writer.write(piece)
        if writer.transport.get_write_buffer_size() > _SLICE * 4:
            await writer.drain()
        stats = self.stats
        now = time.perf_counter()
        stats.first_s = now if stats.first_s is None else stats.first_s
        stats.last_s = now
        stats.body_bytes += len(piece)


def main(argv: list[str] | None = None) -> int:
    """Run the proxy until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m bench.latency_proxy",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="http://host:port of the S3 server")
    parser.add_argument("--latency-ms", type=float, default=20.0,
                        help="first-byte latency per request (default %(default)s)")
    parser.add_argument("--bandwidth-mbps", type=float, default=200.0,
                        help="MB/s (1e6 bytes) of response bodies (default %(default)s)")
    parser.add_argument("--per-connection", action="store_true",
                        help="cap each connection, not all of them together (default off)")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    args = parser.parse_args(argv)
    proxy = LatencyProxy(args.upstream, latency_s=args.latency_ms / 1000,
                         bandwidth_bps=args.bandwidth_mbps * 1e6,
                         per_connection=args.per_connection, port=args.port).start()
    print(f"listening on {proxy.endpoint}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()
    return 0



if __name__ == "__main__":
    sys.exit(main())
