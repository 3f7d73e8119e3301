"""Client-side remapping of Flight locations (a notebook on the host of a compose
deployment: the servers advertise ``grpc://flight-1:8815``, a container name the host
cannot resolve, while the port is published on ``localhost``).

``Catalog(url, location_map={"flight-1:8815": "localhost:8815"})`` or
``WINDPIPE_FLIGHT_LOCATION_MAP="flight-1:8815=localhost:8815,flight-2=127.0.0.1"``.
A key matches a whole location (``grpc://flight-1:8815``), its ``host:port`` or its
host alone; the value replaces the same part (a whole location, ``host:port``, or the
host keeping the port). Every location the catalog or a ``FlightInfo`` names goes
through the map, so failover and every endpoint are remapped alike.

``WINDPIPE_HOST_ID`` (:func:`local_host_id`) names the node this process runs on, for
the same-host path (``windpipe.sdk._local``): set, only the tier of a Flight server whose
``tier-info`` names the same host id is read in process. Why: a pod's hostname is
not its node's, and several tiers can be reachable from one machine (a shared
filesystem, or the multi-node test's simulated nodes); the Flight server's
``WINDPIPE_HOST_ID`` (``--host-id``) is the other half.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from windpipe.sdk._exceptions import InvalidConfig

__all__ = ["HOST_ID_ENV", "LOCATION_MAP_ENV", "UNREACHABLE_HINT", "LocationMap", "local_host_id"]

LOCATION_MAP_ENV = "WINDPIPE_FLIGHT_LOCATION_MAP"
HOST_ID_ENV = "WINDPIPE_HOST_ID"
UNREACHABLE_HINT = (
    "if these names are only valid inside the deployment's network (compose service "
    "names), map them to addresses this machine reaches: Catalog(url, location_map="
    "{'flight-1:8815': 'localhost:8815'}) or WINDPIPE_FLIGHT_LOCATION_MAP"
)


class LocationMap:
    """The map of the module docstring; ``LocationMap(None)`` reads the variable."""

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        if mapping is None:
            mapping = _parse(os.environ.get(LOCATION_MAP_ENV, ""))
        self.mapping = {str(k): str(v) for k, v in mapping.items()}

    def __bool__(self) -> bool:
        return bool(self.mapping)

    def __repr__(self) -> str:
        return f"LocationMap({self.mapping!r})"

    def __call__(self, location: str) -> str:
        """``location`` after the map (unchanged when no key matches)."""
        if not self.mapping:
            return location
        if location in self.mapping:
            return self.mapping[location]
        parts = urlsplit(location)
        host, port = parts.hostname or "", parts.port
        netloc = f"{host}:{port}" if port is not None else host
        if netloc in self.mapping:
            new = self.mapping[netloc]
            return new if "://" in new else parts._replace(netloc=new).geturl()
        if host in self.mapping:
            new = self.mapping[host]
            if "://" in new:
                return new
            return parts._replace(netloc=f"{new}:{port}" if port is not None else new).geturl()
        return location


def local_host_id() -> str | None:
    """This node's host id (``WINDPIPE_HOST_ID``), or None: then any tier reachable here
    counts as this host's."""
    return os.environ.get(HOST_ID_ENV, "").strip() or None


def _parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            msg = (f"{LOCATION_MAP_ENV}: expected FROM=TO pairs separated by commas, "
                   f"got {item!r}")
            raise InvalidConfig(msg)
        out[key.strip()] = value.strip()
    return out
