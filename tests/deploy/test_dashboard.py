"""deploy/grafana/windpipe.json against what the processes export: every metric a panel's
PromQL names is on a real catalog's or a real Flight server's ``/metrics`` (both started
here, on loopback, the catalog knowing the server; a family shows its name before its
first sample, so no traffic is needed), every panel docs/operations.md names is on the
dashboard, and the Kubernetes pod templates carry the scrape annotations on a port their
container opens."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.servers import run_catalog_server
from tests.flight_server.helpers import start_server
from windpipe.services.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "windpipe.json"
# series Prometheus makes itself for every target, not exported by a process
PROMETHEUS_SERIES = frozenset({"up"})
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                              "_created"),
             "summary": ("_count", "_sum", "_created"), "gauge": ("",), "info": ("_info",)}
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                       "and", "or", "unless", "offset"})


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are neither a
    function (followed by ``(``), a keyword, a label (inside ``{}`` or a ``by``/
    ``without``/``on``/``ignoring`` list), a duration nor a Grafana variable."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values, regexes
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)
    names = set()
    for found in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[found.end():].lstrip()
        word = found.group(0)
        if rest.startswith("(") or word in _KEYWORDS:
            continue
        names.add(word)
    return names


def exported(page: str) -> set[str]:
    """Every series name a ``/metrics`` page can carry: each family's names by its type
    (a labelled family shows its HELP and TYPE before its first sample), and the
    samples' own names."""
    names: set[str] = set()
    for family in text_string_to_metric_families(page):
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def test_metric_names_are_read_from_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, route) (rate(windpipe_x_bucket'
            '{job=~"$job", route="/v1/{a}"}[$__rate_interval]))) / on (instance) '
            'group_left() up + changes(process_start_time_seconds[1h])')
    assert metric_names(expr) == {"windpipe_x_bucket", "up", "process_start_time_seconds"}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The ``/metrics`` text of a Flight server with a tier (and its fill) and of a
    catalog that lists it."""
    tmp = tmp_path_factory.mktemp("dashboard")
    flight = start_server({}, tier_dir=tmp / "tier", flight_metrics_port=0,
                          data_dir=tmp / "flight")
    try:
        assert flight.metrics is not None
        flight_page = httpx.get(flight.metrics.url, timeout=30).text
        settings = Settings(data_dir=tmp / "catalog", log_level="WARNING",
                            flight_locations=(flight.location,))
        with run_catalog_server(settings) as url:
            catalog_page = httpx.get(f"{url}/metrics", timeout=30).text
    finally:
        flight.stop(grace_s=5)
    return catalog_page, flight_page


def test_every_panel_reads_metrics_the_processes_export(pages: tuple[str, str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    catalog, flight = (exported(page) for page in pages)
    assert {"windpipe_http_request_duration_seconds_bucket", "process_open_fds",
            "windpipe_storage_read_seconds_bucket"} <= catalog
    assert {"windpipe_flight_batch_send_seconds_bucket", "windpipe_flight_stream_seconds_bucket",
            "windpipe_flight_tier_used_bytes", "process_resident_memory_bytes"} <= flight
    read = set().union(*(metric_names(e) for e in _exprs(dashboard)))
    assert sorted(read - catalog - flight - PROMETHEUS_SERIES) == []
    # each process's own figures are on the dashboard: latency, errors, resources
    for needed in ("windpipe_http_request_duration_seconds_bucket",
                   "windpipe_http_requests_total", "windpipe_flight_batch_build_seconds_bucket",
                   "windpipe_flight_batch_send_seconds_bucket",
                   "windpipe_flight_stream_seconds_bucket", "windpipe_storage_read_seconds_bucket",
                   "windpipe_flight_errors_total", "windpipe_flight_tier_used_bytes",
                   "windpipe_flight_cache_hits_total", "process_resident_memory_bytes",
                   "process_open_fds"):
        assert needed in read, needed


def test_the_docs_name_only_panels_of_the_dashboard() -> None:
    titles = {p["title"] for p in _panels(json.loads(DASHBOARD.read_text()))}
    section = (ROOT / "docs" / "operations.md").read_text().split("## Dashboard", 1)[1]
    section = section.split("\n## ", 1)[0]
    named = set(re.findall(r"\*([^*\n]+)\*", section))
    assert named, "docs/operations.md 'Dashboard' names no panel"
    assert sorted(named - titles) == []


@pytest.mark.parametrize("name", ["catalog.yaml", "flight.yaml"])
def test_pod_templates_carry_scrape_annotations(name: str) -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / name).read_text())
            if d and d["kind"] in ("Deployment", "DaemonSet")]
    assert docs
    for doc in docs:
        template = doc["spec"]["template"]
        notes = template["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert notes["prometheus.io/path"] == "/metrics"
        ports = {p["containerPort"] for c in template["spec"]["containers"]
                 for p in c.get("ports", [])}
        assert int(notes["prometheus.io/port"]) in ports
