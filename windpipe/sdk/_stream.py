"""Reading one rank's pass of a plan from Flight servers, with failover.

``GetFlightInfo`` (on the first live server) returns endpoints; each endpoint's
locations are equivalent replicas, tried in order, and every endpoint is consumed
in order. When a server dies mid-pass (unavailable, connection reset, timed out, or
no batch within ``read_timeout`` seconds: a server that stops answering),
the stream asks another server for a new ``FlightInfo`` with ``start_batch`` = the
batches already received, so the pass continues with the next batch (and so it does
when the servers changed between two endpoints, see below): nothing is duplicated or
skipped (each batch's ``batch_idx`` is checked). The parts of an aligned batch (one
record batch per protocol) are handed out together once all have arrived, so a
failover mid-batch re-reads that batch whole. Errors that carry a
windpipe envelope (a bad segment, a refused ticket) are not retried: they raise the
SDK exception of their type.

The locations are asked for again (``refresh``: the catalog's ``/v1/config``, which
lists the servers ``WINDPIPE_FLIGHT_DISCOVERY`` finds) at the start of a pass and
between two endpoints once ``refresh_s`` seconds have passed, and at a failover once
a second has: a server added mid-epoch then gets its share of the rest of the pass
(a new ``FlightInfo``), one removed is no longer tried first. A refresh that fails
keeps the list (the catalog may be down while the Flight servers are not).

A server at its stream cap refuses a stream (``unavailable``, ``details.limit``
``"flight_max_streams"``): the next replica is tried, and when every one refused, the
pass waits for a free stream. How many failovers and how long a wait a pass allows,
counted since its last batch, is ``windpipe.sdk._retries``'s.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from windpipe.sdk._exceptions import InternalError, Unavailable, WindpipeError, error_from_flight
from windpipe.sdk._locations import UNREACHABLE_HINT, LocationMap
from windpipe.sdk._retries import PassRetries, busy_refusal
from windpipe.services.contract.auth import flight_headers
from windpipe.services.contract.wire import BatchMetadata, FlightCommand
from windpipe.services.tracing import Span, start_span

__all__ = ["FlightStream"]

_TRANSPORT_ERRORS = (
    fl.FlightUnavailableError, fl.FlightTimedOutError, fl.FlightCancelledError, OSError,
)


_FAILOVER_REFRESH_S = 1.0  # at most one refresh of the locations a second at failovers
_REFRESH_WAIT_S = 2.0  # how long a pass waits for a refresh's answer


@dataclass
class _Counters:
    """``failovers``: times a location failed and another one took over; ``gets``: the
    ``DoGet`` calls made, by location; ``refreshes``: the times the locations were
    asked for again (which path a rank took, and where it read, shows in them);
    ``busy``: streams a server refused at its stream cap."""

    failovers: int = 0
    dead: list[str] = field(default_factory=list)
    gets: dict[str, int] = field(default_factory=dict)
    refreshes: int = 0
    busy: int = 0


class FlightStream:
    """A Flight client over a set of equivalent servers (``grpc://host:port``).

    ``refresh``: where the locations come from again (see the module docstring);
    None: ``locations`` stay as given. ``max_failovers``: failovers in a row without a
    batch before a pass gives up; ``busy_wait_s``: how long in all a pass waits, without
    a batch, for servers at their stream cap.
    """

    def __init__(
        self,
        locations: Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 30.0,
        read_timeout: float | None = 60.0,
        max_failovers: int = 8,
        busy_wait_s: float = 60.0,
        location_map: LocationMap | None = None,
        refresh: Callable[[], Sequence[str]] | None = None,
        refresh_s: float = 10.0,
    ) -> None:
        if not locations:
            msg = "no Flight location is known: pass flight_locations= or configure the catalog"
            raise Unavailable(msg)
        self.location_map = location_map or LocationMap({})
        self.locations = [self.location_map(str(loc)) for loc in locations]
        self.max_failovers = max_failovers
        self.busy_wait_s = busy_wait_s
        self.read_timeout = read_timeout
        headers = flight_headers(token)
        self._headers = headers
        self._timeout = timeout
        self._info_options = fl.FlightCallOptions(headers=headers, timeout=timeout)
        self._get_options = fl.FlightCallOptions(headers=headers)
        self._clients: dict[str, fl.FlightClient] = {}
        self.counters = _Counters()
        self.refresh_s = refresh_s
        self._refresh = refresh
        self._refreshed_at = time.monotonic()
        self._refresh_lock = threading.Lock()

    def close(self) -> None:
        """Close every connection."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, location: str) -> fl.FlightClient:
        client = self._clients.get(location)
        if client is None:
            client = self._clients[location] = fl.FlightClient(location)
        return client

    def refresh_locations(self, *, failover: bool = False) -> None:
        """Ask for the locations again when due (``refresh_s`` since the last time, a
        second at a ``failover``). It waits for the answer at most
        ``_REFRESH_WAIT_S`` (a slow catalog must not stall a pass; a late answer still
        lands); a refresh that fails or names none keeps the current list."""
        if self._refresh is None:
            return
        now = time.monotonic()
        with self._refresh_lock:
            if now - self._refreshed_at < (_FAILOVER_REFRESH_S if failover else self.refresh_s):
                return
            self._refreshed_at = now
        thread = threading.Thread(target=self._replace_locations, args=(self._refresh,),
                                  name="windpipe-flight-refresh", daemon=True)
        thread.start()
        thread.join(timeout=_REFRESH_WAIT_S)

    def _replace_locations(self, refresh: Callable[[], Sequence[str]]) -> None:
        try:
            found = [self.location_map(str(loc)) for loc in refresh()]
        except (WindpipeError, OSError):
            return
        if found:
            self.counters.refreshes += 1
            self.locations = found

    def _options_in(self, span: Span, *, info: bool) -> fl.FlightCallOptions:
        """The ``GetFlightInfo`` (``info``) or ``DoGet`` options, with the span's
        ``traceparent`` among the call's headers when tracing is on
        (``services.tracing``: the Flight server continues the trace)."""
        if not span:
            return self._info_options if info else self._get_options
        extra = [(k.encode(), v.encode()) for k, v in span.headers().items()]
        return fl.FlightCallOptions(headers=[*self._headers, *extra],
                                    timeout=self._timeout if info else None)

    def _ordered(self, locations: Sequence[str], dead: set[str]) -> list[str]:
        live = [loc for loc in locations if loc not in dead]
        return live + [loc for loc in locations if loc in dead]

    def flight_info(
        self, command: FlightCommand, *, dead: set[str] | None = None
    ) -> tuple[fl.FlightInfo, str]:
        """``GetFlightInfo`` on the first server that answers; returns it and its location."""
        dead = dead if dead is not None else set()
        last: BaseException | None = None
        for location in self._ordered(self.locations, dead):
            span = start_span("flight GetFlightInfo", kind="client",
                              attributes={"server.address": location})
            try:
                info = self._client(location).get_flight_info(
                    command.descriptor(), self._options_in(span, info=True)
                )
            except _TRANSPORT_ERRORS as exc:
                span.failed(exc)
                dead.add(location)
                last = exc
                continue
            except fl.FlightError as exc:
                err = error_from_flight(exc, where=f"GetFlightInfo on {location}")
                span.failed(err)
                raise err from exc
            finally:
                span.end()
            return info, location
        msg = (f"no Flight server answered GetFlightInfo (could not reach "
               f"{', '.join(self.locations)}: {last}); {UNREACHABLE_HINT}")
        details: dict[str, Any] = {"last_error": str(last), "tried": list(self.locations)}
        if last is not None:
            cause = error_from_flight(last)
            if cause.details:  # the server's own envelope (e.g. its catalog is down)
                msg = f"{msg}; the last one said: {cause.message}"
                details = {**cause.details, **details}
        raise Unavailable(msg, details=details) from last

    def action(
        self, location: str, kind: str, body: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The JSON results of ``DoAction`` ``kind`` on one location, as they arrive.

        Sends the bearer token like every other call; errors raise the SDK exception
        of their envelope (or :class:`Unavailable` when the server cannot be reached).
        """
        payload = json.dumps(body or {}).encode()
        where = f"action {kind!r} on {location}"
        try:
            results = self._client(location).do_action(
                fl.Action(kind, payload), self._get_options
            )
            for result in results:
                yield json.loads(result.body.to_pybytes())
        except (fl.FlightError, OSError) as exc:
            raise error_from_flight(exc, where=where) from exc

    def batches(
        self, command: FlightCommand
    ) -> Generator[tuple[pa.RecordBatch, BatchMetadata], None, None]:
        """Every record batch of the pass from ``command.start_batch`` on, in order."""
        next_batch = command.start_batch
        dead: set[str] = set()
        retries = PassRetries(max_failovers=self.max_failovers, busy_wait_s=self.busy_wait_s)
        self.refresh_locations()
        while True:
            info, info_location = self.flight_info(
                replace(command, start_batch=next_batch), dead=dead
            )
            known = set(self.locations)
            parts: list[tuple[pa.RecordBatch, BatchMetadata]] = []
            try:
                for i, endpoint in enumerate(info.endpoints):
                    if i and not parts and self._servers_changed(known):
                        raise _Replan
                    uris = [self.location_map(_uri(loc)) for loc in endpoint.locations]
                    uris = uris or [info_location]
                    for batch, meta in self._endpoint(endpoint.ticket, uris, dead):
                        if meta.batch_idx < next_batch:
                            continue  # a replica repeated what another already sent
                        _check_next(meta, next_batch, len(parts))
                        parts.append((batch, meta))
                        if meta.aligned is not None and len(parts) < meta.aligned.parts:
                            continue  # an aligned batch is handed out whole, or not at all
                        yield from parts
                        parts = []
                        next_batch += 1
                        retries.progress()
            except _Replan:
                continue  # the rest of the pass, spread over the servers known now
            except _Failover as exc:  # wait, or give up (windpipe.sdk._retries)
                if exc.busy is not None:
                    retries.after_refusal(exc.busy, next_batch=next_batch, cause=exc.cause)
                else:
                    retries.after_failover(next_batch=next_batch, dead=dead, cause=exc.cause)
                self.refresh_locations(failover=True)
                continue
            return

    def _servers_changed(self, known: set[str]) -> bool:
        """Whether the locations (refreshed when due) differ from ``known``, those of the
        current ``FlightInfo``: then the rest of a long pass is asked for again, so a
        server added mid-epoch gets its share before the next pass."""
        if self._refresh is None:
            return False
        self.refresh_locations()
        return set(self.locations) != known

    def _endpoint(
        self, ticket: fl.Ticket, uris: list[str], dead: set[str]
    ) -> Iterator[tuple[pa.RecordBatch, BatchMetadata]]:
        """One endpoint's batches; raises :class:`_Failover` when its server dies mid-way."""
        ordered = self._ordered(uris, dead)
        for i, uri in enumerate(ordered):
            started = False
            reader: Any = None
            span = start_span("flight DoGet", kind="client", attributes={"server.address": uri})
            try:
                self.counters.gets[uri] = self.counters.gets.get(uri, 0) + 1
                reader = self._client(uri).do_get(ticket, self._options_in(span, info=False))
                for chunk in _chunks(reader, self.read_timeout, uri):
                    if chunk.data is None:
                        continue
                    if chunk.app_metadata is None:
                        msg = f"a record batch from {uri} has no app_metadata"
                        raise InternalError(msg)
                    started = True
                    yield chunk.data, BatchMetadata.decode(chunk.app_metadata)
                return
            except _TRANSPORT_ERRORS as exc:
                span.failed(exc)
                busy = busy_refusal(exc)
                if busy is not None:  # alive, at its stream cap: not a failover
                    self.counters.busy += 1
                    if i == len(ordered) - 1:
                        raise _Failover(uri, exc, busy=busy) from exc
                    continue
                dead.add(uri)
                self.counters.failovers += 1
                self.counters.dead.append(uri)
                if started or i == len(ordered) - 1:
                    # The ticket's start is now stale (or no replica is left): re-plan.
                    raise _Failover(uri, exc) from exc
            except fl.FlightError as exc:
                err = error_from_flight(exc, where=f"DoGet on {uri}")
                span.failed(err)
                if type(err) is Unavailable:
                    dead.add(uri)
                    self.counters.failovers += 1
                    self.counters.dead.append(uri)
                    raise _Failover(uri, exc) from exc
                raise err from exc
            finally:
                if reader is not None:
                    _cancel(reader)
                span.end()


def _check_next(meta: BatchMetadata, next_batch: int, have_parts: int) -> None:
    """Refuse a stream that skips a batch (or a part of an aligned one)."""
    if meta.batch_idx != next_batch:
        msg = f"the stream skipped from batch {next_batch} to {meta.batch_idx}; refusing " \
              "to continue"
        raise InternalError(msg)
    part = meta.aligned.part if meta.aligned is not None else 0
    if part != have_parts:
        msg = (f"batch {next_batch}: part {part} arrived after {have_parts} part(s); "
               "refusing to continue")
        raise InternalError(msg)


class _ReadTimedOut(OSError):  # noqa: N818 - a transport failure like the others
    """No batch arrived within the read deadline: the server is treated as dead."""


_DONE = object()


def _chunks(reader: Any, timeout: float | None, uri: str) -> Iterator[Any]:
    """The reader's chunks; with ``timeout``, each must arrive within ``timeout`` seconds.

    gRPC deadlines cover a whole call, so the per-batch deadline reads on a helper
    thread through a queue of two; a server that stops answering (stopped, wedged,
    partitioned) raises :class:`_ReadTimedOut`, a transport error, and the caller fails
    over exactly as for a dead one (the reader is cancelled, which ends the thread).
    """
    if timeout is None:
        while True:
            try:
                yield reader.read_chunk()
            except StopIteration:
                return
    out: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            try:
                item: Any = reader.read_chunk()
            except StopIteration:
                item = _DONE
            except BaseException as exc:
                item = exc
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item is _DONE or isinstance(item, BaseException):
                return

    thread = threading.Thread(target=pump, name="windpipe-flight-read", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = out.get(timeout=timeout)
            except queue.Empty:
                msg = f"no batch from {uri} within {timeout} s"
                raise _ReadTimedOut(msg) from None
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


class _Replan(Exception):  # noqa: N818 - internal signal
    """The servers changed between two endpoints: ask for a new ``FlightInfo``."""


class _Failover(WindpipeError):  # noqa: N818 - internal signal
    """A location failed (``busy``: refused the stream at its stream cap, that error)."""

    def __init__(self, location: str, cause: BaseException, *,
                 busy: WindpipeError | None = None) -> None:
        super().__init__(f"Flight server {location} failed: {cause}")
        self.location = location
        self.cause = cause
        self.busy = busy


def _uri(location: Any) -> str:
    uri = location.uri
    return uri.decode() if isinstance(uri, bytes) else str(uri)


def _cancel(reader: Any) -> None:
    with contextlib.suppress(fl.FlightError, OSError):
        reader.cancel()
