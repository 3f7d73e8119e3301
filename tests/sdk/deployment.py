"""A real windpipe deployment for SDK tests: catalog (uvicorn) + Flight servers.

``Deployment`` starts the Flight servers on pre-picked free loopback ports (so every
server and the catalog's ``/v1/config`` know all locations), reading plans from the
same database as the catalog.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tests.fixtures.servers import free_ports, run_catalog_server
from windpipe._serving import serve_flight
from windpipe.flight_server.runner import RunningFlightServer
from windpipe.services.settings import Settings


@dataclass
class Deployment:
    url: str
    flights: list[RunningFlightServer]
    locations: list[str]
    settings: Settings
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def deployment(
    database_url: str, data_dir: Path, *, n_flight: int = 1, token: str | None = None,
    endpoint_batches: int = 64, cache_bytes: int | None = None, tier_bytes: int = 0,
    **settings: Any,
) -> Iterator[Deployment]:
    """Catalog + ``n_flight`` Flight servers; with ``tier_bytes`` they share a host tier
    (``data_dir/tier``), which makes the SDK's ``transport="auto"`` read locally;
    ``settings``: more ``Settings`` fields."""
    ports = free_ports(n_flight)
    locations = [f"grpc://127.0.0.1:{p}" for p in ports]
    settings = Settings(
        database_url=database_url, data_dir=data_dir, flight_host="127.0.0.1",
        flight_locations=tuple(locations), endpoint_batches=endpoint_batches,
        tier_bytes=tier_bytes, tier_dir=data_dir / "tier",
        admin_token=SecretStr(token) if token else None, log_level="WARNING", **settings,
    )
    with ExitStack() as stack:
        url = stack.enter_context(run_catalog_server(settings))
        flights = []
        for port in ports:
            running = serve_flight(settings, port=port, cache_bytes=cache_bytes)
            stack.callback(running.stop, grace_s=5.0)
            flights.append(running)
        yield Deployment(url=url, flights=flights, locations=locations, settings=settings)
