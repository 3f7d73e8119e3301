"""``windpipe serve`` (the catalog, a Flight server, or both in one process) and
``windpipe migrate``."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from typing import Any

from windpipe.commands.common import CliError, settings_from
from windpipe.services.allocator_trim import AllocatorTrimmer
from windpipe.services.runtime import freeze_startup_heap
from windpipe.services.settings import Settings

__all__ = ["migrate", "serve"]


def _check_port(host: str, port: int, *, flag: str, variable: str) -> None:
    """Refuse a port another process listens on, naming it and how to change it."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            msg = (f"port {port} on {host} is taken ({exc.strerror}); pick another with "
                   f"{flag} PORT (or {variable}), or 0 for any free port")
            raise CliError(msg) from None


def _wait_for_stop() -> None:
    stop = threading.Event()

    def _handler(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    stop.wait()


def serve(args: argparse.Namespace) -> int:
    """Run the services ``args.service`` names until SIGTERM or SIGINT."""
    from windpipe.services.exposure import InsecureDeploymentError  # noqa: PLC0415

    try:
        return _serve_until_stopped(args)
    except InsecureDeploymentError as exc:
        print(f"windpipe serve: {exc}", file=sys.stderr)
        return 2


def _serve_until_stopped(args: argparse.Namespace) -> int:
    from windpipe.services.logging import configure_logging  # noqa: PLC0415
    from windpipe.services.tracing import configure_tracing  # noqa: PLC0415

    settings = settings_from(args)
    _check_roots(settings)
    if args.service in ("all", "flight"):
        _check_port(settings.resolved_flight_host(), settings.flight_port,
                    flag="--flight-port", variable="WINDPIPE_FLIGHT_PORT")
        if settings.flight_metrics_port is not None:
            _check_port(settings.resolved_flight_host(), settings.flight_metrics_port,
                        flag="--flight-metrics-port", variable="WINDPIPE_FLIGHT_METRICS_PORT")
    if args.service in ("all", "catalog"):
        _check_port(settings.host, settings.port, flag="--port", variable="WINDPIPE_PORT")
    configure_logging(level=settings.log_level, json=settings.log_json)
    # with WINDPIPE_OTEL=1 or OTEL_* set: spans exported (OTLP by default); else nothing
    configure_tracing(service_name=f"windpipe-{args.service}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    running: list[Any] = []
    trimmer = AllocatorTrimmer(interval_s=settings.allocator_trim_s)
    try:
        if args.service in ("all", "flight"):
            from windpipe._serving import serve_flight  # noqa: PLC0415

            flight = serve_flight(settings)  # the database's plans, or the catalog_url's
            running.append(flight)
            if not settings.flight_locations:
                settings = settings.model_copy(update={"flight_locations": (flight.location,)})
            print(f"windpipe flight ready at {flight.location}", flush=True)
            if flight.metrics is not None:
                print(f"windpipe flight metrics at {flight.metrics.url}", flush=True)
        if args.service in ("all", "catalog"):
            from windpipe.catalog.api.server import start_catalog_server  # noqa: PLC0415

            catalog = start_catalog_server(settings)
            running.append(catalog)
            print(f"windpipe catalog ready at {catalog.url}", flush=True)
        freeze_startup_heap()  # no full collection walks the imports again (the GIL)
        trimmer.start()  # freed memory back to the kernel (allocator_trim's docstring)
        _wait_for_stop()
    finally:
        trimmer.stop()
        for service in reversed(running):
            service.stop(grace_s=settings.shutdown_grace_s)
        if running:  # nothing to say for a server that never started
            print("windpipe stopped", flush=True)
    return 0


def _check_roots(settings: Settings) -> None:
    """Refuse an allowed root the servers could not use, in one line (a relative
    directory was already taken from the working directory by ``Settings``)."""
    from windpipe.services.storage.roots import AllowedRoots  # noqa: PLC0415

    try:
        AllowedRoots.parse(settings.resolved_allowed_roots())
    except ValueError as exc:
        raise CliError(f"--allow-root / WINDPIPE_ALLOWED_ROOTS: {exc}") from None


def migrate(args: argparse.Namespace) -> int:
    """Upgrade the catalog database to ``args.revision``."""
    from windpipe.migrations import upgrade_database  # noqa: PLC0415

    settings = settings_from(args)
    url = settings.resolved_database_url()
    upgrade_database(url, args.revision)
    print(f"database at revision {args.revision}: {url.split('@')[-1]}")
    return 0
