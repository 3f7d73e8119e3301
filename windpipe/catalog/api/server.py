"""Run the catalog app under uvicorn in a background thread.

Used by ``windpipe serve``, the demo and the test fixtures: it binds (port 0 picks a
free port), waits until the server accepts connections, reports the real URL, and
stops with a deadline.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import uvicorn

from windpipe.catalog.api.app import create_app
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.principals import stored_tokens_exist
from windpipe.services.database import create_engine
from windpipe.services.exposure import check_exposure
from windpipe.services.runtime import warm_imports
from windpipe.services.settings import Settings
from windpipe.services.storage.store import StorageOptions

__all__ = ["CatalogServer", "start_catalog_server"]


@dataclass
class CatalogServer:
    """A running catalog server; ``url`` is where it listens."""

    server: uvicorn.Server
    thread: threading.Thread
    host: str
    port: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        """Base URL of the REST API."""
        return f"http://{self.host}:{self.port}"

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish within ``grace_s``, then close
        the connections left, so the app's lifespan still shuts down (disposing of its
        engine). Bounded even when a request's body never finishes arriving: uvicorn
        alone waits on such a request for its whole graceful timeout
        (``shutdown_grace_s``, whatever ``grace_s`` says), and ``force_exit`` alone
        leaves its connection open."""
        if self._stopped:
            return
        self._stopped = True
        config = self.server.config
        bound = max(1, math.ceil(grace_s))  # past it uvicorn cancels the requests left
        if config.timeout_graceful_shutdown is None or config.timeout_graceful_shutdown > bound:
            config.timeout_graceful_shutdown = bound
        self.server.should_exit = True
        self.thread.join(timeout=grace_s)
        if self.thread.is_alive():
            self._close_connections()
            self.thread.join(timeout=5)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout=5)

    def _close_connections(self) -> None:
        """Close every open connection on the server's loop: a request still waiting
        on its body sees the client go away and ends, and the shutdown goes on."""
        servers = self.server.servers
        if not servers:
            return
        loop = servers[0].get_loop()

        def close_all() -> None:
            for connection in list(self.server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.close()

        try:
            loop.call_soon_threadsafe(close_all)
        except RuntimeError:  # the loop closed meanwhile: the thread is ending
            return


def _tokens_in(settings: Settings) -> bool:
    engine = create_engine(settings.resolved_database_url())
    try:
        return stored_tokens_exist(CatalogContext.from_engine(engine))
    finally:
        engine.dispose()


def start_catalog_server(
    settings: Settings, *, port: int | None = None, startup_timeout_s: float = 30.0,
    storage: StorageOptions | None = None,
) -> CatalogServer:
    """Start the catalog on ``settings.host`` and ``port`` (default ``settings.port``);
    an exposed, unprotected catalog is refused (``windpipe.services.exposure``). ``storage``: as
    for :func:`windpipe.catalog.api.app.create_app` (``windpipe ui`` reads any registered root)."""
    check_exposure(settings, service="catalog", host=settings.host,
                   tokens_configured=lambda: _tokens_in(settings), signs_tickets=False)
    warm_imports()
    config = uvicorn.Config(
        create_app(settings, storage=storage), host=settings.host,
        port=settings.port if port is None else port,
        log_level=settings.log_level.lower(), lifespan="on", access_log=False,
        log_config=None,  # uvicorn logs through services.logging's one format
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="windpipe-catalog", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            msg = "the catalog server failed to start (see the log above)"
            raise RuntimeError(msg)
        if time.monotonic() > deadline:
            server.should_exit = True
            msg = f"the catalog server did not start within {startup_timeout_s} s"
            raise RuntimeError(msg)
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()
    return CatalogServer(server=server, thread=thread, host=bound[0], port=int(bound[1]))
