"""Who is looking at a ``/ui`` page, and what every ``/ui`` answer carries.

The pages accept the tokens the REST API accepts, with the same rules
(:func:`windpipe.catalog.principals.authenticate`: stored tokens, the bootstrap token, and the
tokenless ``local`` admin of a loopback catalog for a caller on its host). A browser
cannot send an ``Authorization`` header when it follows a link, so a page also reads
the token from a cookie: ``/ui?token=...`` sets it (``HttpOnly``, so no script can read
it; ``SameSite=Strict``, so no other site's page can make the browser send it; ``Path=/ui``,
so the REST API never takes it: a cookie there would expose the write routes to
cross-site requests) and redirects to the same address without the token, so it leaves
the address bar and the history. The pages are read-only (GET), so a request a cookie
carries can change nothing.

A dataset the caller's token does not cover is answered exactly as one that does not
exist (404): a scoped token learns nothing about other datasets from the pages.

:class:`UiHeaders` puts the security headers on every ``/ui`` answer, error pages and
static files included: a Content-Security-Policy that runs no script at all (the pages
are server-rendered, their plots server-drawn SVG) and loads styles only from the
catalog itself, no framing, no sniffing, no referrer, no caching; and a
``Server-Timing: page;dur=MS`` (the time until the page was rendered, which
``bench/ui.py`` reads: the server's share of a page's time, without the network's).
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from windpipe.catalog import principals
from windpipe.catalog.context import CatalogContext
from windpipe.services.contract.auth import AUTH_HEADER, bearer_token
from windpipe.services.contract.errors import NotFound, WindpipeError
from windpipe.services.contract.principals import Principal, Role
from windpipe.services.exposure import is_local_peer
from windpipe.services.settings import Settings, is_loopback

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "TOKEN_COOKIE",
    "UI_PREFIX",
    "UiHeaders",
    "check_dataset",
    "check_owner",
    "token_redirect",
    "ui_principal",
]

UI_PREFIX = "/ui"
TOKEN_COOKIE = "windpipe_ui_token"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; "
    "font-src 'none'; connect-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)


class UiHeaders:
    """ASGI middleware: the security headers on every answer under ``/ui``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != UI_PREFIX and not path.startswith(UI_PREFIX + "/"):
            await self.app(scope, receive, send)
            return

        start = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                took = f"page;dur={(time.perf_counter() - start) * 1e3:.1f}".encode()
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in _HEADERS if h[0] not in names),
                                      (b"server-timing", took)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def token_redirect(request: Request) -> RedirectResponse | None:
    """For a request with ``?token=``: the redirect to the same page without it, setting
    the cookie (see the module docstring); None for any other request."""
    token = request.query_params.get("token")
    if token is None:
        return None
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict",
                        path=UI_PREFIX, secure=request.url.scheme == "https")
    return response


def ui_principal(request: Request) -> Principal:
    """The caller of a page: the bearer header, else the cookie (``unauthenticated``
    when neither holds a token this catalog knows, unless it is the open loopback one)."""
    settings: Settings = request.app.state.settings
    ctx: CatalogContext = request.app.state.catalog
    token = bearer_token(request.headers.get(AUTH_HEADER)) or request.cookies.get(TOKEN_COOKIE)
    peer = request.client.host if request.client is not None else None
    principal = principals.authenticate(
        ctx, token or None, bootstrap=settings.admin_token_text(),
        loopback=(is_loopback(settings.host) or settings.insecure) and is_local_peer(peer))
    if not principal.may(Role.READER):
        raise NotFound("nothing to show to this token", details={})
    request.state.principal = principal
    return principal


def _hidden(kind: str, key: str) -> WindpipeError:
    return NotFound(f"{kind} {key!r} does not exist", details={kind: key})


def check_dataset(principal: Principal, name: str) -> None:
    """``not_found`` for a dataset outside ``principal``'s scope (as for no dataset)."""
    if not principal.may(Role.READER, name):
        raise _hidden("dataset", name)


def check_owner(ctx: CatalogContext, principal: Principal, kind: str, key: str) -> str:
    """The dataset of a ``version``, ``split`` or ``plan``; ``not_found`` for an unknown
    id and for one of a dataset outside ``principal``'s scope alike."""
    dataset = principals.dataset_of(ctx, kind, key)
    if dataset is None or not principal.may(Role.READER, dataset):
        raise _hidden(kind, key)
    return dataset
