"""The HTTP transport of the catalog client: token, retries, error envelopes, pages.

Connection failures are retried with backoff (the request never reached the
server, so any method is safe); 502/503/504 answers (a database outage is 503
``unavailable``) are retried for every method because every windpipe POST is
idempotent by content (register, split, plan). Retries stop after ``retries``
attempts or when the next one would start past ``retry_deadline_s``.
Any other non-2xx answer raises the SDK exception of its error envelope.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from sdk._exceptions import Unavailable, error_from_envelope
from services.contract.auth import http_headers

__all__ = ["RestClient"]

_RETRY_STATUS = frozenset({502, 503, 504})


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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"accept": "application/json", "user-agent": "windpipe-sdk",
                   **http_headers(token)}
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.retry_deadline_s = retry_deadline_s
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
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
        attempt = 0
        deadline = time.monotonic() + self.retry_deadline_s

        def again() -> bool:
            """Sleep before the next attempt if one is left within the deadline."""
            nonlocal attempt
            pause = self.backoff_s * 2 ** attempt
            if attempt >= self.retries or time.monotonic() + pause > deadline:
                return False
            attempt += 1
            time.sleep(pause)
            return True

        while True:
            try:
                response = self._client.request(
                    method, path, params=clean, json=json, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if again():
                    continue
                msg = f"cannot reach the catalog at {self.base_url}: {exc}"
                raise Unavailable(msg) from exc
            except httpx.TimeoutException as exc:
                msg = f"the catalog at {self.base_url} did not answer {method} {path} in time"
                raise Unavailable(msg) from exc
            except httpx.TransportError as exc:
                msg = f"{method} {path} to {self.base_url} failed: {exc}"
                raise Unavailable(msg) from exc
            if response.status_code in _RETRY_STATUS and again():
                continue
            if response.is_success:
                return response
            raise _error_of(response)

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
