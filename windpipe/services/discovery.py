"""Where a deployment's Flight servers are: the static list and a source re-read as it changes.

Why: in Kubernetes the Flight servers are a DaemonSet, one per node, and nodes come and
go; a static ``WINDPIPE_FLIGHT_LOCATIONS`` would have to be edited and re-applied at
each change. ``WINDPIPE_FLIGHT_DISCOVERY`` names a source that is read again every
``WINDPIPE_FLIGHT_DISCOVERY_S`` seconds, by the catalog (``/v1/config``, ``/metrics``,
``/v1/flight/stats``) and by every Flight server (the endpoint routing of
``windpipe.flight_server.locality``); the SDK asks ``/v1/config`` again at the start of a pass
and at a failover (``windpipe.sdk._stream``). A server added mid-epoch thus gets new requests
within a refresh; one removed stops being offered. Both servers read the same source
with this one reader, so it belongs to neither.

Sources (:func:`parse_source`):

* ``dns://NAME:PORT``: every address ``NAME`` resolves to, as ``grpc://ADDR:PORT`` (a
  headless Service answers one address per ready pod);
* ``file:///PATH``: one ``grpc://host:port`` per line (``#`` starts a comment), e.g. a
  mounted ConfigMap, which the kubelet updates in place.

Every line of a file is checked on its own (:func:`parse_lines`): a Flight location is
``grpc://`` or ``grpc+tcp://``, a host (a name, an IPv4 address or a bracketed IPv6 one)
and a port 1-65535, nothing else. A line that is not one is logged once, with its line
number and why, and skipped; the other lines still count. Whoever reads the locations
(a Flight server's ``GetFlightInfo`` endpoints, the catalog's ``/v1/config``,
``/v1/flight/stats`` and ``/metrics``) thus never meets one it cannot use: a single
mistyped line used to stop every stream of every server.

There is no announcement endpoint on purpose: a location in ``/v1/config`` receives
every client's bearer token, so only what the operator controls (settings, their DNS,
a file they mount) may name one, never a caller. A source that fails keeps the last
list it gave (a DNS blip must not empty the deployment); the failure is logged.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from windpipe.services.logging import get_logger
from windpipe.services.settings import Settings

__all__ = ["DISCOVERY_SCHEMES", "FLIGHT_SCHEMES", "DiscoverySource", "DnsSource",
           "FileSource", "FlightDiscovery", "Listing", "RejectedLine", "check_location",
           "parse_lines", "parse_source"]

DISCOVERY_SCHEMES = ("dns", "file")
FLIGHT_SCHEMES = ("grpc", "grpc+tcp")  # what windpipe's Flight servers listen on (no TLS)
_log = get_logger("windpipe.discovery")
# a DNS name: dot-separated labels of letters, digits, '-' and '_' (container names)
_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?")


def _check_host(host: str, *, bracketed: bool) -> None:
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            msg = f"[{host}] is not an IPv6 address"
            raise ValueError(msg) from None
    elif not _HOST_NAME.fullmatch(host):
        msg = f"{host!r} is not a host name or address"
        raise ValueError(msg)


def check_location(text: str) -> str:
    """``text`` when it is a Flight location windpipe can connect to:
    ``grpc://host:port`` or ``grpc+tcp://host:port``, the port 1-65535 (``ValueError``
    saying why otherwise)."""
    if not text or any(ch.isspace() for ch in text):
        msg = "not a URL (empty or holds spaces)"
        raise ValueError(msg)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # "[::1", a port that is not a number or past 65535
        msg = f"not a URL: {exc}"
        raise ValueError(msg) from None
    if parts.scheme not in FLIGHT_SCHEMES:
        got = f"{parts.scheme}://" if parts.scheme else "no scheme"
        msg = f"expected grpc://host:port or grpc+tcp://host:port, got {got}"
        raise ValueError(msg)
    if parts.username is not None or parts.password is not None:
        msg = "a location names no user or password"
        raise ValueError(msg)
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in text \
            or "#" in text:
        msg = "a location is scheme://host:port, without a path, query or fragment"
        raise ValueError(msg)
    host = parts.hostname or ""
    if not host:
        msg = "no host"
        raise ValueError(msg)
    _check_host(host, bracketed="[" in parts.netloc)
    if port is None or not 1 <= port <= 65535:
        msg = "no port" if port is None else f"port {port} is outside 1-65535"
        raise ValueError(msg)
    return text


@dataclass(frozen=True)
class RejectedLine:
    """A line of a discovery file that names no usable Flight location, and why."""

    number: int
    text: str
    reason: str


@dataclass(frozen=True)
class Listing:
    """What a discovery file names: its valid locations (first occurrence order, no
    duplicates) and the lines it skipped."""

    locations: tuple[str, ...]
    rejected: tuple[RejectedLine, ...]


def parse_lines(text: str) -> Listing:
    """The locations of a discovery file's ``text``, one a line (blank lines and ``#``
    comments skipped); every other line is checked by :func:`check_location` on its own,
    so one bad line costs only itself."""
    found: dict[str, None] = {}
    rejected: list[RejectedLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            found[check_location(line)] = None
        except ValueError as exc:
            rejected.append(RejectedLine(number, line, str(exc)))
    return Listing(tuple(found), tuple(rejected))


class DiscoverySource(Protocol):
    """Reads the Flight locations it names (raises ``OSError`` when it cannot)."""

    def read(self) -> tuple[str, ...]:
        """The locations now, ``grpc://host:port`` each."""
        ...


@dataclass(frozen=True)
class DnsSource:
    """Every address of ``name`` (A and AAAA records), each as ``grpc://ADDR:port``."""

    name: str
    port: int

    def read(self) -> tuple[str, ...]:
        """Resolve ``name`` now (the system resolver; a headless Service's answer)."""
        infos = socket.getaddrinfo(self.name, self.port, type=socket.SOCK_STREAM)
        hosts = sorted({str(info[4][0]) for info in infos})
        return tuple(f"grpc://[{h}]:{self.port}" if ":" in h else f"grpc://{h}:{self.port}"
                     for h in hosts)


@dataclass(frozen=True)
class FileSource:
    """The lines of ``path``: one location each, blank lines and ``#`` comments skipped,
    a line that is no Flight location logged and skipped (:func:`parse_lines`)."""

    path: Path
    # the rejected lines already logged: a bad line is logged when it appears, not at
    # every re-read (reads are serialized by FlightDiscovery)
    _logged: set[RejectedLine] = field(default_factory=set, compare=False, repr=False)

    def read(self) -> tuple[str, ...]:
        """Read the file now: its valid locations."""
        listing = parse_lines(self.path.read_text())
        for line in listing.rejected:
            if line not in self._logged:
                _log.warning("flight.discovery.line_skipped", path=str(self.path),
                             line=line.number, text=line.text, reason=line.reason)
        self._logged.clear()
        self._logged.update(listing.rejected)
        return listing.locations


def parse_source(text: str) -> DnsSource | FileSource:
    """The source ``text`` names (``ValueError`` saying what is expected otherwise)."""
    parts = urlsplit(text)
    if parts.scheme == "dns" and parts.hostname and parts.port:
        return DnsSource(parts.hostname, parts.port)
    if parts.scheme == "file" and parts.path:
        return FileSource(Path(parts.path))
    msg = (f"flight discovery {text!r}: expected dns://NAME:PORT (every address of a "
           "name, e.g. a headless Service) or file:///PATH (one grpc://host:port a line)")
    raise ValueError(msg)


class FlightDiscovery:
    """The static locations, then those ``source`` names (read at most every
    ``interval_s`` seconds, lazily: whoever asks after the interval reads it, the
    others meanwhile get the last list)."""

    def __init__(self, static: tuple[str, ...], source: DiscoverySource | None, *,
                 interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.static = tuple(static)
        self.source = source
        self.interval_s = interval_s
        self._clock = clock
        self._found: tuple[str, ...] = ()
        self._read_at: float | None = None
        self._reading = False
        self._lock = threading.Lock()
        if source is not None:
            self._refresh()  # the first list before the first caller: none sees it empty

    @classmethod
    def from_settings(cls, settings: Settings, *,
                      static: tuple[str, ...] | None = None) -> FlightDiscovery:
        """``flight_locations`` (or ``static``) and ``flight_discovery``."""
        text = settings.flight_discovery
        return cls(tuple(settings.flight_locations) if static is None else static,
                   parse_source(text) if text else None,
                   interval_s=settings.flight_discovery_s)

    def locations(self) -> tuple[str, ...]:
        """The static locations, then the discovered ones not among them."""
        if self.source is not None:
            self._refresh()
        return tuple(dict.fromkeys((*self.static, *self._found)))

    def _refresh(self) -> None:
        assert self.source is not None
        now = self._clock()
        with self._lock:
            due = self._read_at is None or now - self._read_at >= self.interval_s
            if not due or self._reading:
                return
            self._reading = True
        try:
            found: tuple[str, ...] | None = self.source.read()
        except (OSError, UnicodeError) as exc:
            found = None
            _log.warning("flight.discovery.failed", source=repr(self.source),
                         error=f"{type(exc).__name__}: {exc}", kept=len(self._found))
        with self._lock:
            if found is not None:
                if found != self._found:
                    _log.info("flight.discovery.changed", added=sorted(set(found) - set(
                        self._found)), removed=sorted(set(self._found) - set(found)))
                self._found = found
            self._read_at = self._clock()
            self._reading = False
