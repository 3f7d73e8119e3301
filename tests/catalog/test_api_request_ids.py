"""Request ids over real HTTP: every answer names one in ``X-Request-ID``, an id a caller
or a proxy sent is kept when it looks like one and replaced when not, and the log lines
written while the request runs carry it as ``request_id``."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import httpx
import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from structlog.testing import capture_logs

from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.api.audit import LogRequestId, request_id_middleware
from windpipe.services.logging import get_logger
from windpipe.services.settings import Settings

_OURS = re.compile(r"[0-9a-f]{16}")


def test_request_ids_are_given_kept_or_replaced(sqlite_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=sqlite_url, data_dir=tmp_path / "state",
                        log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        first, second = (client.get("/healthz").headers["x-request-id"] for _ in range(2))
        assert _OURS.fullmatch(first)
        assert _OURS.fullmatch(second)
        assert first != second
        theirs = str(uuid.uuid4())
        assert client.get("/healthz", headers={"x-request-id": theirs}).headers[
            "x-request-id"] == theirs
        assert client.get("/healthz", headers={"x-request-id": "ab" * 16}).headers[
            "x-request-id"] == "ab" * 16
        for bad in ("x" * 16, "1234", "0" * 33, "-" * 16, "abc def 0123456789"):
            given = client.get("/healthz", headers={"x-request-id": bad})
            assert _OURS.fullmatch(given.headers["x-request-id"]), bad
        missing = client.get("/v1/no/such/route")  # an error answer names its id too
        assert _OURS.fullmatch(missing.headers["x-request-id"])


def test_log_lines_of_a_request_carry_its_id() -> None:
    """The catalog's two request-id middlewares around a two-route app: a line logged by an
    async endpoint and by a sync one (run in a worker thread) both carry the id."""
    log = get_logger("tests.request_ids")

    async def on_loop(_request: Request) -> PlainTextResponse:
        log.warning("on.loop")
        return PlainTextResponse("ok")

    def in_thread(_request: Request) -> PlainTextResponse:
        log.warning("in.thread")
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/loop", on_loop), Route("/thread", in_thread)],
                    middleware=[Middleware(request_id_middleware), Middleware(LogRequestId)])

    async def ask() -> dict[str, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return {path: (await client.get(path)).headers["x-request-id"]
                    for path in ("/loop", "/thread")}

    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        ids = asyncio.run(ask())
    assert {e["event"]: e.get("request_id") for e in logs} == {
        "on.loop": ids["/loop"], "in.thread": ids["/thread"]}
