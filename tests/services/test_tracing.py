"""OpenTelemetry traces (windpipe/services/tracing.py): one trace from the SDK through the
catalog to the Flight server and back to the catalog, its ids in the JSON logs, read from
a real run (``observed_run``: real servers, the SDK, the OpenTelemetry SDK's in-memory
exporter); off by default, and then no ``opentelemetry`` import at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.observed import ObservedRun
from windpipe.services.tracing import NO_SPAN, tracing_requested

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"WINDPIPE_OTEL": "1"}, True),
    ({"WINDPIPE_OTEL": "true", "OTEL_SDK_DISABLED": "true"}, True),  # ours is explicit
    ({"WINDPIPE_OTEL": "0", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
     False),
    ({"OTEL_SERVICE_NAME": "x"}, False),  # a name alone exports nothing
])
def test_what_turns_tracing_on(env: dict[str, str], on: bool) -> None:
    assert tracing_requested(env) is on


# the servers' and the SDK's modules (the catalog's FastAPI imports the OpenTelemetry API
# on its own, since FastAPI 0.142)
OFF = """
import sys
import windpipe, windpipe.sdk, windpipe.flight_server.server, windpipe.services.storage.segments
from windpipe.services.logging import configure_logging, get_logger
from windpipe.services.tracing import start_span, trace_headers, tracing_enabled
configure_logging(level="INFO", json=True)
get_logger("windpipe.test").info("hello")
span = start_span("x", kind="client")
print(tracing_enabled(), bool(span), span.headers(), trace_headers(),
      sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_off_by_default_nothing_imports_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WINDPIPE_", "OTEL_"))}
    proc = subprocess.run([sys.executable, "-c", OFF], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "False False {} {} []", proc.stderr
    assert "trace_id" not in proc.stderr
    assert '"event": "hello"' in proc.stderr  # the JSON line was written, without ids
    assert not NO_SPAN
    assert NO_SPAN.headers() == {}
    assert NO_SPAN.log_fields() == {}


CONSOLE = """
from opentelemetry import trace
from windpipe.services.tracing import configure_tracing, start_span
print(configure_tracing(service_name="windpipe-test"), configure_tracing(service_name="again"))
start_span("x", kind="server").end()
trace.get_tracer_provider().force_flush()
"""


def test_serve_installs_a_provider_once_with_the_exporter_the_environment_names() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WINDPIPE_", "OTEL_"))}
    proc = subprocess.run([sys.executable, "-c", CONSOLE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True,
                          env={**env, "PYTHONPATH": str(ROOT), "WINDPIPE_OTEL": "1",
                               "OTEL_TRACES_EXPORTER": "console"})
    first, rest = proc.stdout.split("\n", 1)
    assert first == "True False"  # the second call leaves the first provider
    assert '"name": "x"' in rest
    assert '"kind": "SpanKind.SERVER"' in rest
    assert '"service.name": "windpipe-test"' in rest


def _one(spans: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s["name"], s["kind"], s["scope"]) for s in spans])
    return found[0]


def test_one_trace_from_the_sdk_through_the_catalog_to_the_flight_server(
        observed_run: ObservedRun) -> None:
    spans, trace_id = observed_run.spans, observed_run.root_trace_id
    assert observed_run.batches > 0
    # every span of the step, the servers' included, is in the step's trace
    assert {s["trace_id"] for s in spans} == {trace_id}
    root = _one(spans, name="training step")
    assert root["parent_id"] is None
    by_id = {s["span_id"]: s for s in spans}

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        return by_id[span["parent_id"]]

    # SDK -> catalog: the plan request, a client span whose child is FastAPI's server span
    made = _one(spans, name="POST /v1/splits/{split_id}/plans", kind="server")
    assert made["scope"] == "fastapi"
    client = parent(made)
    assert (client["name"], client["kind"], client["scope"]) == ("POST", "client", "windpipe")
    assert client["attributes"]["http.response.status_code"] == 201
    assert parent(client) is root

    # SDK -> Flight server: GetFlightInfo and DoGet, each a client span and the server's
    for call in ("flight GetFlightInfo", "flight DoGet"):
        served = _one(spans, name=call, kind="server", scope="windpipe")
        asked = parent(served)
        assert (asked["name"], asked["kind"]) == (call, "client")
        assert parent(asked) is root
    stream = _one(spans, name="flight DoGet", kind="server")
    assert stream["attributes"]["windpipe.batches"] == observed_run.batches
    assert stream["attributes"]["windpipe.outcome"] == "completed"

    # Flight server -> catalog: the plan's liveness check of each call, the token check
    checks = [s for s in spans if s["name"] == "GET /v1/plans/{plan_id}" and s["kind"] == "server"]
    assert {parent(s)["name"] for s in checks} == {"flight GetFlightInfo", "flight DoGet"}
    assert all(parent(s)["kind"] == "server" for s in checks)
    whoami = [s for s in spans if s["name"] == "GET /v1/whoami" and s["kind"] == "server"]
    assert all(parent(s)["kind"] == "client" and parent(s)["name"].startswith("flight ")
               for s in whoami)

    # the Flight server's stream log lines name its span; the SDK's own lines the trace
    ended = [line for line in observed_run.logs if line.get("event") == "flight.stream.end"]
    assert len(ended) == 1
    assert (ended[0]["trace_id"], ended[0]["span_id"]) == (trace_id, stream["span_id"])
    assert ended[0]["outcome"] == "completed"
    in_step = [line for line in observed_run.logs if line.get("trace_id") == trace_id]
    assert {line["logger"] for line in in_step} >= {"windpipe.flight", "httpx"}
    assert all(len(line["trace_id"]) == 32 and len(line["span_id"]) == 16 for line in in_step)
