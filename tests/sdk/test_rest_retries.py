"""The SDK's retry policy (``windpipe.sdk._rest``): what is tried again, how often, and what is
raised at the end. Answers come from httpx's transport seam, counted per attempt; the
outage test against a real catalog is ``tests/catalog/test_api_outages.py``."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from windpipe.sdk._rest import RestClient
from windpipe.services.contract.errors import (
    ErrorType,
    InvalidRequest,
    ResourceExhausted,
    Unavailable,
    error_envelope,
)

Answer = Callable[[httpx.Request], httpx.Response]


def _client(answers: list[Answer], *, retries: int = 3,
            retry_deadline_s: float = 15.0) -> tuple[RestClient, list[str]]:
    """A client whose n-th attempt gets ``answers[n]`` (the last one again after them)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return answers[min(len(seen), len(answers)) - 1](request)

    client = RestClient("http://catalog.test", http_transport=httpx.MockTransport(handler),
                        backoff_s=0.001, retries=retries, retry_deadline_s=retry_deadline_s)
    return client, seen


def _error(kind: ErrorType, status: int) -> Answer:
    return lambda _r: httpx.Response(status, json=error_envelope(kind, f"{kind} now"))


def _ok(_request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def test_transient_answers_are_retried_until_one_succeeds() -> None:
    client, seen = _client([_error(ErrorType.UNAVAILABLE, 503),
                            lambda _r: httpx.Response(502, text="<html>proxy</html>"), _ok])
    assert client.get_json("/v1/datasets") == {"ok": True}
    assert len(seen) == 3


def test_the_budget_ends_with_the_last_answers_error() -> None:
    client, seen = _client([_error(ErrorType.UNAVAILABLE, 503)], retries=2)
    with pytest.raises(Unavailable, match="unavailable now"):
        client.get_json("/v1/datasets")
    assert len(seen) == 3  # the first try and two retries


def test_a_connection_never_made_is_retried_for_any_method() -> None:
    client, seen = _client([_refused, _refused, _ok])
    assert client.post_json("/v1/datasets/d/versions", {}) == ({"ok": True}, 200)
    assert len(seen) == 3
    client, seen = _client([_refused], retries=1)
    with pytest.raises(Unavailable, match="cannot reach the catalog"):
        client.get_json("/v1/datasets")
    assert len(seen) == 2


@pytest.mark.parametrize(("answer", "error"), [
    (_error(ErrorType.INVALID_REQUEST, 422), InvalidRequest),
    (_error(ErrorType.RESOURCE_EXHAUSTED, 503), ResourceExhausted),  # not transient
])
def test_other_errors_are_raised_at_once(answer: Answer, error: type[Exception]) -> None:
    client, seen = _client([answer])
    with pytest.raises(error):
        client.get_json("/v1/datasets")
    assert len(seen) == 1


def test_a_read_timeout_is_not_retried() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    client, seen = _client([slow])
    with pytest.raises(Unavailable, match="did not answer GET /v1/datasets in time"):
        client.get_json("/v1/datasets")
    assert len(seen) == 1


def test_no_retry_would_start_past_the_deadline() -> None:
    client, seen = _client([_error(ErrorType.UNAVAILABLE, 503)], retries=5,
                           retry_deadline_s=0.0)
    with pytest.raises(Unavailable):
        client.get_json("/v1/datasets")
    assert len(seen) == 1
