"""OpenTelemetry traces from the SDK through the catalog to the Flight server, off by default.

A slow batch crosses three processes: the training client asks the catalog (REST) and
streams from a Flight server, which may ask the catalog for the plan. With tracing on,
each hop opens a span and hands its W3C ``traceparent`` to the next (an HTTP header on
the SDK's and the Flight server's ``httpx`` requests, a gRPC header on Flight calls),
so one trace shows where the time went; the JSON log lines written inside a span carry
its ``trace_id`` and ``span_id`` (:func:`add_trace_ids`, a structlog processor), so a
trace leads to its lines.

Off unless asked (:func:`tracing_requested`): ``WINDPIPE_OTEL=1``, or the standard
variables (``OTEL_TRACES_EXPORTER`` other than ``none``, an ``OTEL_EXPORTER_OTLP_*``
endpoint); ``WINDPIPE_OTEL=0`` or ``OTEL_SDK_DISABLED=true`` keep it off. Off, nothing
imports ``opentelemetry`` (the ``otel`` extra need not be installed) and every hook is
one flag test: :func:`start_span` answers :data:`NO_SPAN`, whose methods do nothing.

Library code here uses only the OpenTelemetry API, the convention for libraries: the
process that owns the spans chooses where they go. ``windpipe serve`` calls
:func:`configure_tracing` (the SDK's ``TracerProvider`` with the exporter
``OTEL_TRACES_EXPORTER`` names: ``otlp`` by default, ``console``); a training script
configures its own provider, or calls :func:`configure_tracing` too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

__all__ = [
    "NO_SPAN",
    "Span",
    "SpanKind",
    "add_trace_ids",
    "configure_tracing",
    "continued",
    "enable_tracing",
    "start_span",
    "trace_headers",
    "tracing_enabled",
    "tracing_requested",
]

SpanKind = Literal["client", "server", "internal"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_on: bool | None = None  # decided at the first question (tracing_requested), or set


def tracing_requested(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: ``WINDPIPE_OTEL`` when set (1/0), else
    the standard ``OTEL_*`` variables (an exporter or an OTLP endpoint named, the SDK
    not disabled)."""
    env = os.environ if env is None else env
    own = env.get("WINDPIPE_OTEL", "").strip().lower()
    if own in _TRUE:
        return True
    if own in _FALSE or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracing_enabled() -> bool:
    """Whether spans are made and propagated in this process (the environment's answer,
    read once, unless :func:`enable_tracing` said otherwise)."""
    global _on  # noqa: PLW0603 - one process-wide switch, read on every hook
    if _on is None:
        _on = tracing_requested() and _installed()
    return _on


def _installed() -> bool:
    """Whether the OpenTelemetry API can be imported; asked for without it, tracing stays
    off with one warning instead of failing every request."""
    try:
        import opentelemetry.trace  # noqa: F401, PLC0415
    except ImportError:
        logging.getLogger("windpipe.tracing").warning(
            "tracing was asked for (WINDPIPE_OTEL or OTEL_*) but OpenTelemetry is not "
            "installed: pip install 'windpipe[otel]'; tracing stays off")
        return False
    return True


def enable_tracing(on: bool = True) -> None:  # noqa: FBT001, FBT002 - a switch
    """Turn tracing on (or off) in this process whatever the environment says; a server
    reads the switch when it starts."""
    global _on  # noqa: PLW0603
    _on = bool(on)


def _api() -> Any:
    from opentelemetry import trace  # noqa: PLC0415 - only with tracing on

    return trace


def configure_tracing(*, service_name: str) -> bool:
    """With tracing on and no tracer provider set yet, install the OpenTelemetry SDK's,
    named ``service_name`` (``OTEL_SERVICE_NAME`` wins), exporting in batches to the
    exporter ``OTEL_TRACES_EXPORTER`` names (``otlp``, the default: OTLP over HTTP to
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``console``). Whether a provider of ours was
    installed: False when tracing is off or the application set its own."""
    if not tracing_enabled():
        return False
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return False  # the application's own (or a test's)
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower()
    exporter: SpanExporter
    if kind == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True


def _carrier(headers: Mapping[str, Any]) -> dict[str, str]:
    """Header names lowercased, one text value each (gRPC metadata gives lists, ASGI
    bytes): what the W3C propagator reads."""
    out: dict[str, str] = {}
    for key, value in headers.items():
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        first = value[0] if isinstance(value, (list, tuple)) and value else value
        if isinstance(first, bytes):
            first = first.decode("latin-1")
        if isinstance(first, str):
            out[name.lower()] = first
    return out


class Span:
    """One span, or none (:data:`NO_SPAN`, tracing off): the same calls either way, so
    a hook never tests the switch itself."""

    def __init__(self, span: Any = None) -> None:
        self._span = span
        self._ended = False

    def __bool__(self) -> bool:
        return self._span is not None

    def headers(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``) naming this span as the parent, for the
        next hop's request; empty without a span."""
        if self._span is None:
            return {}
        from opentelemetry import propagate  # noqa: PLC0415

        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=_api().set_span_in_context(self._span))
        return carrier

    def log_fields(self) -> dict[str, str]:
        """``trace_id`` and ``span_id`` in hex, for a log line written outside the span's
        context (a stream's generator); empty without a span."""
        if self._span is None:
            return {}
        ctx = self._span.get_span_context()
        return _ids(ctx) if ctx.is_valid else {}

    def set(self, **attributes: Any) -> None:
        """Attributes of the span (plain values: ids, counts, names)."""
        if self._span is not None:
            self._span.set_attributes(
                {k: v for k, v in attributes.items() if isinstance(v, (str, int, float, bool))})

    def rename(self, name: str) -> None:
        """The span's name, known only later (an HTTP route matched after the request)."""
        if self._span is not None:
            self._span.update_name(name)

    def failed(self, error: BaseException | str) -> None:
        """Mark the span failed, with the error's type (the message may hold details a
        trace backend should not keep)."""
        if self._span is None:
            return
        trace = _api()
        kind = error if isinstance(error, str) else type(error).__name__
        self._span.set_attribute("error.type", getattr(getattr(error, "type", None), "value",
                                                       kind))
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, kind))

    def end(self) -> None:
        """End the span (once; later calls do nothing)."""
        if self._span is not None and not self._ended:
            self._ended = True
            self._span.end()

    @contextmanager
    def current(self) -> Iterator[Span]:
        """The span as the current one while the block runs (in this thread or task:
        log lines get its ids, :func:`trace_headers` names it)."""
        if self._span is None:
            yield self
            return
        from opentelemetry import context  # noqa: PLC0415

        token = context.attach(_api().set_span_in_context(self._span))
        try:
            yield self
        finally:
            context.detach(token)


NO_SPAN = Span()


def start_span(name: str, *, kind: SpanKind = "internal",
               parent: Mapping[str, Any] | None = None,
               attributes: Mapping[str, Any] | None = None) -> Span:
    """A started span (end it with :meth:`Span.end`), :data:`NO_SPAN` with tracing off.

    Its parent is the span the request ``parent`` headers name (``traceparent``: a
    server's incoming call), else the current span; ``kind`` is OpenTelemetry's
    (``client`` for a call made, ``server`` for a call answered)."""
    if not tracing_enabled():
        return NO_SPAN
    trace = _api()
    ctx = None
    if parent is not None:
        from opentelemetry import propagate  # noqa: PLC0415

        ctx = propagate.extract(_carrier(parent))
    otel_kind = {"client": trace.SpanKind.CLIENT, "server": trace.SpanKind.SERVER,
                 "internal": trace.SpanKind.INTERNAL}[kind]
    span = Span(trace.get_tracer("windpipe").start_span(name, context=ctx, kind=otel_kind))
    if attributes:
        span.set(**attributes)
    return span


@contextmanager
def continued(headers: Mapping[str, Any]) -> Iterator[None]:
    """The trace the request ``headers`` name as the current context while the block
    runs, without a span of its own: a call a server makes before its handler's span
    exists (a token check) stays in its caller's trace. Nothing with tracing off."""
    if not tracing_enabled():
        yield
        return
    from opentelemetry import context, propagate  # noqa: PLC0415

    token = context.attach(propagate.extract(_carrier(headers)))
    try:
        yield
    finally:
        context.detach(token)


def trace_headers() -> dict[str, str]:
    """``traceparent`` of the current span for an outgoing request; empty with tracing
    off or no span current."""
    if not tracing_enabled():
        return {}
    from opentelemetry import propagate  # noqa: PLC0415

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _ids(ctx: Any) -> dict[str, str]:
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def add_trace_ids(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the current span's ``trace_id`` and ``span_id`` on the line
    (tracing on, a span current, the event naming none of its own)."""
    if not tracing_enabled() or "trace_id" in event:
        return event
    ctx = _api().get_current_span().get_span_context()
    if ctx.is_valid:
        event.update(_ids(ctx))
    return event
