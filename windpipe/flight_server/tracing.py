"""The Flight server's side of a trace: the caller's ``traceparent`` and a span per stream.

A Flight call's headers reach the server's middleware (``start_call``), not the
``do_get`` handler, so with tracing on (:mod:`windpipe.services.tracing`) the server
installs :class:`TraceHeadersFactory`, which keeps the trace headers of each call;
:func:`stream_span` starts the ``do_get`` span as their child. The span lives as long
as the stream's generator (gRPC resumes it batch after batch, on its own threads), so
it is started and ended explicitly, never left current across a ``yield``; the
stream's log lines name it (:meth:`~windpipe.services.tracing.Span.log_fields`).
``GetFlightInfo`` is traced the same way (:func:`call_span`), so the plan fetches a
server makes for either call stay in the caller's trace.
With tracing off no middleware is installed and :func:`stream_span` answers
:data:`~windpipe.services.tracing.NO_SPAN`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow.flight as fl

from windpipe.services.contract.wire import error_from_flight
from windpipe.services.tracing import NO_SPAN, Span, start_span, tracing_enabled

__all__ = [
    "TRACE_MIDDLEWARE", "TraceHeadersFactory", "call_span", "stream_span", "trace_middleware",
]

TRACE_MIDDLEWARE = "windpipe-trace"
_HEADERS = ("traceparent", "tracestate")


class _TraceHeaders(fl.ServerMiddleware):  # type: ignore[misc]
    def __init__(self, headers: dict[str, Any]) -> None:
        self.headers = headers


class TraceHeadersFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Keeps each call's W3C trace headers for its handler."""

    def start_call(self, info: Any, headers: dict[str, Any]) -> _TraceHeaders:
        return _TraceHeaders({k: v for k, v in headers.items() if k.lower() in _HEADERS})


def trace_middleware() -> dict[str, fl.ServerMiddlewareFactory]:
    """The middleware to install: the trace headers' keeper with tracing on, else none."""
    return {TRACE_MIDDLEWARE: TraceHeadersFactory()} if tracing_enabled() else {}


def stream_span(context: Any, name: str, **attributes: Any) -> Span:
    """A server span ``name`` whose parent is the call's ``traceparent`` (a root span
    without one); :data:`NO_SPAN` with tracing off."""
    if not tracing_enabled():
        return NO_SPAN
    kept = context.get_middleware(TRACE_MIDDLEWARE)
    headers = kept.headers if isinstance(kept, _TraceHeaders) else {}
    return start_span(name, kind="server", parent=headers, attributes=attributes)


@contextmanager
def call_span(context: Any, name: str) -> Iterator[Span]:
    """:func:`stream_span` for a call answered within the block (``GetFlightInfo``):
    current while it runs, marked with the windpipe error type of a failure, ended."""
    span = stream_span(context, name)
    with span.current():
        try:
            yield span
        except BaseException as exc:
            span.failed(error_from_flight(exc).type.value)
            raise
        finally:
            span.end()
