"""``windpipe ui DIR``: the catalog's read-only pages over the embedded catalog in ``DIR``.

The catalog of ``windpipe.embedded(DIR)`` (SQLite at ``DIR/catalog.db``), served on
127.0.0.1 only, so no token is needed (the tokenless ``local`` caller exists only on a
loopback listener, for a caller on this host, while ``DIR`` holds no stored token).
Its segments are read wherever they were registered from, as embedded mode reads them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from windpipe.commands.common import CliError
from windpipe.commands.serve import _check_port, _wait_for_stop

__all__ = ["ui"]


def ui(args: argparse.Namespace) -> int:
    """Serve ``/ui`` over the embedded catalog in ``args.directory`` until SIGTERM/SIGINT."""
    import dataclasses  # noqa: PLC0415

    from windpipe._embedded import DATABASE_FILE, check_database_file, embedded_settings  # noqa: PLC0415
    from windpipe.catalog.api.server import start_catalog_server  # noqa: PLC0415
    from windpipe.services.logging import configure_logging  # noqa: PLC0415
    from windpipe.services.storage.store import StorageOptions  # noqa: PLC0415

    directory = Path(args.directory).resolve()
    if not (directory / DATABASE_FILE).is_file():
        msg = (f"no catalog at {directory} (it has no {DATABASE_FILE}): give the data_dir "
               "of windpipe.embedded(...) or of windpipe serve")
        raise CliError(msg)
    check_database_file(directory)
    settings = embedded_settings(directory).model_copy(update={"port": args.port})
    _check_port("127.0.0.1", args.port, flag="--port", variable="WINDPIPE_PORT")
    configure_logging(level=settings.log_level, json=settings.log_json)
    storage = dataclasses.replace(StorageOptions.from_settings(settings), allowed=None)
    server = start_catalog_server(settings, storage=storage)
    try:
        print(f"windpipe ui ready at {server.url}/ui", flush=True)
        _wait_for_stop()
    finally:
        server.stop(grace_s=settings.shutdown_grace_s)
        print("windpipe stopped", flush=True)
    return 0
