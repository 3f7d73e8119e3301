"""The HTTP transport of the catalog client: token, retries, error envelopes, pages.

An attempt that fails with a :class:`~services.contract.errors.Transient` error is tried
again with backoff: a connection that never reached the server (any method is safe) and
an answer of the transient branch (``unavailable``: a database outage is 503, a proxy's
502/503/504 without an envelope), for every method, because every windpipe POST is
idempotent by content (register, split, plan). Retries stop after ``retries`` of them
or when the next one would start past ``retry_deadline_s``; the pause before retry ``n``
(from 1) is ``backoff_s * 2 ** (n - 1)``. A read timeout is not retried (the call may
still be running on the server). Any other non-2xx answer raises the SDK exception of
its error envelope at once.

The retry policy is `tenacity <https://tenacity.readthedocs.io>`_'s (stop after N
attempts or before a deadline, exponential wait, retry on an exception class), not a
loop of our own. tenacity rather than stamina: stamina always adds jitter and keeps a
process-wide switch for tests, whereas the SDK's schedule is exact and per client
(``Catalog(retries=..)``), which tenacity states in three declarative lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from windpipe.sdk._exceptions import Transient, Unavailable, error_from_envelope
from windpipe.services.contract.auth import http_headers
from windpipe.services.tracing import start_span

__all__ = ["RestClient"]


class RestClient:
    """A thin ``httpx.Client`` wrapper that speaks the catalog's conventions."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        retry_deadline_s: float = 15.0,
        http_transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"accept": "application/json", "user-agent": "windpipe-sdk",
                   **http_headers(token)}
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.retry_deadline_s = retry_deadline_s
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout,
            transport=http_transport,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        accept: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Send a request; retry what is safe to retry; raise the SDK error of a failure."""
        headers = {**(headers or {}), **({"accept": accept} if accept else {})} or None
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1) | stop_before_delay(self.retry_deadline_s),
            wait=wait_exponential(multiplier=self.backoff_s, exp_base=2),
            retry=retry_if_exception_type(Transient),
            reraise=True,  # the last attempt's own error, not tenacity's RetryError
        )
        try:
            return retrying(self._attempt, method, path, params=clean, json=json,
                            headers=headers)
        except httpx.TimeoutException as exc:
            msg = f"the catalog at {self.base_url} did not answer {method} {path} in time"
            raise Unavailable(msg) from exc
        except httpx.TransportError as exc:
            msg = f"{method} {path} to {self.base_url} failed: {exc}"
            raise Unavailable(msg) from exc

    def _attempt(self, method: str, path: str, *, params: dict[str, Any], json: Any,
                 headers: dict[str, str] | None) -> httpx.Response:
        """One try: the answer if 2xx, else its error (``Transient`` when worth another);
        a transport failure past connecting leaves as httpx's own, so it is not retried.
        With tracing on (``services.tracing``) the try is a client span whose
        ``traceparent`` the catalog continues."""
        # named by the method alone (OpenTelemetry's HTTP convention: the path holds ids)
        span = start_span(method, kind="client",
                          attributes={"http.request.method": method, "url.path": path})
        try:
            if span:
                headers = {**(headers or {}), **span.headers()}
            try:
                response = self._client.request(
                    method, path, params=params, json=json, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                msg = f"cannot reach the catalog at {self.base_url}: {exc}"
                raise Unavailable(msg) from exc
            span.set(**{"http.response.status_code": response.status_code})
            if response.is_success:
                return response
            raise _error_of(response)
        except BaseException as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    def get_json(self, path: str, **params: Any) -> Any:
        """GET a JSON document."""
        return self.request("GET", path, params=params).json()

    def post_json(self, path: str, body: Any, *,
                  headers: dict[str, str] | None = None) -> tuple[Any, int]:
        """POST a JSON body; returns the answer and its status (201 new, 200 existing,
        202 a job still running)."""
        response = self.request("POST", path, json=body, headers=headers)
        return response.json(), response.status_code

    def pages(self, path: str, *, page_size: int = 500, **params: Any) -> Iterator[Any]:
        """Every item of a keyset-paginated list, following ``next_page_token``."""
        token: str | None = None
        while True:
            body = self.get_json(path, page_size=page_size, page_token=token, **params)
            yield from body.get("items", [])
            token = body.get("next_page_token")
            if not token:
                return


def _error_of(response: httpx.Response) -> Exception:
    try:
        envelope = response.json()
    except ValueError:
        envelope = None
    return error_from_envelope(
        envelope, status=response.status_code, fallback=response.text
    )
