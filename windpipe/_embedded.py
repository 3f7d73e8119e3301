"""Embedded mode: ``windpipe.embedded(data_dir)``, the catalog in this process, no server.

The returned :class:`~sdk.Catalog` is the SDK's own, with the same handles, plans and
batches as a served one; only where its calls go differs:

* REST calls go to the catalog's FastAPI app in this process through
  :class:`AppTransport` (an ``httpx`` transport, no socket, no port). The app's event
  loop runs in a daemon thread (an anyio blocking portal), so a notebook's own running
  loop is never touched; the app's lifespan (the SQLite engine under ``data_dir``,
  migrations) starts with the transport and ends with ``cat.close()``.
* Batches are built in this process from storage, over the host's tier of decoded
  blocks (``windpipe.sdk._in_process``): there is no Flight server.

The user is the operator here: registrations may name any root this process can read
(no allow-list, no root scopes; segment paths stay confined to their root), and no
token is needed (unless ``data_dir`` holds stored tokens of a served deployment:
``token=``). The settings come from the ``WINDPIPE_*`` variables (S3 endpoint and keys,
request limits, cache and tier budgets) except what describes a server: database URL,
token, host, allowed roots and root scopes, Flight locations.

The database is ``data_dir/catalog.db`` itself: one that is a symbolic link (or anything
but a regular file) is refused with ``InvalidConfig`` before it is opened, as opening
would migrate, and then write, whatever file the link points at.

This module sits in the top layer because it imports the catalog; the SDK only
calls the picklable :class:`~sdk._in_process.InProcess` it is handed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from pathlib import Path

import anyio.from_thread
import httpx
from fastapi import FastAPI

from windpipe.catalog.api.app import create_app
from windpipe.sdk import Catalog
from windpipe.sdk._in_process import InProcess
from windpipe.services.contract.errors import InvalidConfig
from windpipe.services.materialize.tier import tier_budget
from windpipe.services.settings import Settings
from windpipe.services.storage.store import StorageOptions

__all__ = ["DATABASE_FILE", "AppTransport", "check_database_file", "embedded",
           "embedded_settings", "open_transport"]

DATABASE_FILE = "catalog.db"


class AppTransport(httpx.BaseTransport):
    """A synchronous ``httpx`` transport that hands each request to an ASGI app in this
    process (see the module docstring); :meth:`close` ends the app's lifespan."""

    def __init__(self, app: FastAPI) -> None:
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(
                anyio.from_thread.start_blocking_portal(name="windpipe-embedded"))
            self._stack.enter_context(self._portal.wrap_async_context_manager(
                app.router.lifespan_context(app)))
        except BaseException:
            self._stack.close()
            raise
        # closed when dropped, and at exit while the loop thread still runs (a daemon
        # thread: left to the interpreter's finalization, closing it would deadlock)
        self._close = weakref.finalize(self, self._stack.close)
        # the app answers its own errors (500 envelopes), as it would over a socket
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Run ``request`` through the app; the whole answer is read before returning."""
        if not self._close.alive:
            msg = "the embedded catalog is closed"
            raise httpx.TransportError(msg, request=request)
        return self._portal.call(self._handle, request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        response = await self._asgi.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=httpx.ByteStream(content),
                              extensions=response.extensions)

    def close(self) -> None:
        """End the app's lifespan (its engine) and stop the event loop thread."""
        self._close()


def check_database_file(data_dir: Path) -> Path:
    """``data_dir/catalog.db``, when it is a regular file or does not exist yet.

    A symbolic link there is refused (``InvalidConfig``), dangling or not: the catalog
    would migrate the database it points at, wherever that is, and write its rows there.
    So is anything else that is not a regular file (a directory, a FIFO)."""
    path = data_dir / DATABASE_FILE
    if path.is_symlink():
        target = str(path.readlink())
        msg = (f"the embedded catalog's database {path} is a symbolic link (to {target}); "
               "embedded mode opens only a regular file there: replace the link by the "
               "file, or point data_dir at the directory that holds it")
        raise InvalidConfig(msg, details={"path": str(path), "target": target})
    if path.exists() and not path.is_file():
        msg = (f"the embedded catalog's database {path} is not a regular file; move it "
               "away or choose another data_dir")
        raise InvalidConfig(msg, details={"path": str(path)})
    return path


def embedded_settings(data_dir: Path) -> Settings:
    """The catalog settings of embedded mode over ``data_dir``: the ``WINDPIPE_*``
    variables, less what describes a server (see the module docstring)."""
    return Settings().model_copy(update={
        "data_dir": data_dir, "database_url": None, "admin_token": None, "host": "127.0.0.1",
        "insecure": False, "allowed_roots": (), "root_scopes": (), "catalog_url": None,
        "flight_locations": (), "flight_public_location": None,
    })


def open_transport(spec: InProcess) -> AppTransport:
    """The catalog of ``spec`` in this process (``InProcess.open_transport``; a
    DataLoader worker calls it again in its own process: the database is checked again)."""
    check_database_file(spec.data_dir)
    settings = embedded_settings(spec.data_dir)
    return AppTransport(create_app(settings, storage=spec.storage))


def embedded(
    data_dir: str | Path | None = None,
    *,
    cache_bytes: int | None = None,
    tier_bytes: int | None = None,
    token: str | None = None,
) -> Catalog:
    """A :class:`~sdk.Catalog` whose catalog runs in this process on SQLite under
    ``data_dir`` (default: ``WINDPIPE_DATA_DIR``, else ``.windpipe``, as ``windpipe
    serve``), with no port and no Flight server; batches are built here from storage.

    ``cache_bytes``: the chunk cache budget, ``tier_bytes``: the tier's under
    ``data_dir/tier`` (``WINDPIPE_TIER_DIR`` moves it; 0: no tier); defaults as for
    ``windpipe serve``. ``token``: only for a ``data_dir`` that holds stored tokens.
    ``cat.close()`` (or ``with``) ends it.
    """
    settings = Settings() if data_dir is None else Settings(data_dir=Path(data_dir))
    root = settings.data_dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    check_database_file(root)
    if tier_bytes is not None:
        settings = settings.model_copy(update={"tier_bytes": tier_bytes})
    tier_dir = settings.resolved_tier_dir()
    spec = InProcess(
        data_dir=root, open_transport=open_transport,
        storage=dataclasses.replace(StorageOptions.from_settings(settings), allowed=None),
        cache_bytes=settings.cache_bytes if cache_bytes is None else cache_bytes,
        tier_dir=None if tier_dir is None else tier_dir.resolve(),
        tier_bytes=tier_budget(tier_dir, settings.tier_bytes).bytes,
        pack_dir=settings.resolved_pack_dir().resolve(),
    )
    return Catalog(in_process=spec, token=token)
