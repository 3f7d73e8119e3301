"""Stopping the catalog server ends even while a request's body is still arriving.

uvicorn alone waits on such a request for its whole graceful timeout (here a minute),
and a forced exit alone leaves its connection open: ``CatalogServer.stop(grace_s=...)``
must return with the thread ended, the client's connection closed, whatever the
server's own ``shutdown_grace_s``.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from windpipe.catalog.api.server import start_catalog_server
from windpipe.services.settings import Settings

PARTIAL_REQUEST = (
    b"POST /v1/datasets/d/versions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    b'{"root": '  # 9 of the 1,000 bytes announced; the rest never comes
)


def test_stop_returns_while_a_request_body_is_still_arriving(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "c", host="127.0.0.1", log_level="CRITICAL",
                        shutdown_grace_s=60.0)
    server = start_catalog_server(settings, port=0)
    with socket.create_connection((server.host, server.port)) as client:
        client.sendall(PARTIAL_REQUEST)
        while not server.server.server_state.tasks:  # until the app holds the request
            time.sleep(0.02)
        server.stop(grace_s=1.0)
        assert not server.thread.is_alive()
        client.settimeout(60)
        received = b""
        while chunk := client.recv(4096):  # the server closed its side
            received += chunk
    assert b"201 Created" not in received
