"""What the browser tests of ``/ui`` share (not fixtures): a real catalog with real data
and a plan, a Flight server it knows, tokens, and Debian's Chromium driven by
Playwright (never a downloaded browser).

:func:`build_site` registers a synthetic dataset (``lab``: long cycling segments, one
cell without ``temperature_c``, a description that is markup), a second dataset
(``other``, for scope checks) and a dataset named ``<script>alert(1)</script>`` (the
REST API refuses such a name; the service layer under it does not, so it is written
there, as an older client or a direct database write could have), a split of ``lab``,
its stored statistics and a plan that scales ``voltage_v`` with a scaling fitted on the
train side's statistics; a split and a plan of the markup-named dataset; and two
registration jobs of ``other`` written into the jobs table as a catalog writes them
(one running with a fresh heartbeat, one whose heartbeat stopped long ago).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page

from tests.catalog.api_support import write_small_dataset
from tests.fixtures.servers import free_port, run_catalog_server
from windpipe._serving import serve_flight
from windpipe.catalog import service
from windpipe.catalog.context import CatalogContext
from windpipe.catalog.models import RegistrationJob, utcnow
from windpipe.services.contract.scaling import ScalingSpec
from windpipe.services.contract.stats import SplitStatsData
from windpipe.services.database import create_engine, session_scope
from windpipe.services.settings import Settings
from windpipe.services.synth import write_synthetic_dataset

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ADMIN = "ui-test-admin-token"
XSS_NAME = "<script>alert(1)</script>"
XSS_DESCRIPTION = "<img src=x onerror=alert(2)> described"
PLAN = {"default_window": {"batch_size": 4, "seq_len": 64},
        "inputs": {"cycling": ["current_a", "voltage_v"]},
        "targets": {"cycling": ["voltage_v"]}}


@dataclass
class Site:
    """The running catalog and what was registered in it."""

    url: str
    database_url: str
    root: Path
    flight_location: str
    dead_location: str
    version_id: str
    split_id: str
    plan_id: str
    other_version_id: str
    other_split_id: str
    other_plan_id: str
    scoped_token: str
    xss_version_id: str = ""
    xss_split_id: str = ""
    xss_plan_id: str = ""
    ids: dict[str, Any] = field(default_factory=dict)

    def api(self, token: str = ADMIN) -> httpx.Client:
        """A REST client of the catalog with ``token``."""
        return httpx.Client(base_url=self.url, timeout=120,
                            headers={"authorization": f"Bearer {token}"})


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


@contextmanager
def build_site(base: Path) -> Iterator[Site]:
    """The catalog (SQLite under ``base``, bootstrap token :data:`ADMIN`) with the data of
    the module docstring, a live Flight server and a dead location; stops both on exit."""
    data = write_synthetic_dataset(base / "lab", cells=3, cycles=3, rows_per_cycle=6000,
                                   seed=3, split_fraction=0.0, missing_channel="temperature_c",
                                   missing_cells=1, row_group_rows=4096)
    other_root = base / "other"
    other_manifest = write_small_dataset(other_root)
    url = f"sqlite:///{base / 'catalog.db'}"
    settings = Settings(database_url=url, data_dir=base / "state", log_level="WARNING",
                        admin_token=ADMIN)
    dead = f"grpc://127.0.0.1:{free_port()}"
    with ExitStack() as stack:
        flight = serve_flight(settings.model_copy(update={"flight_port": 0,
                                                          "flight_host": "127.0.0.1"}))
        stack.callback(flight.stop, grace_s=5.0)
        served = settings.model_copy(update={"flight_locations": (flight.location, dead)})
        catalog_url = stack.enter_context(run_catalog_server(served))
        with httpx.Client(base_url=catalog_url, timeout=120,
                          headers={"authorization": f"Bearer {ADMIN}"}) as api:
            version = _ok(api.post("/v1/datasets/lab/versions", json={
                "root": str(data.path), "manifest": data.manifest_path.name,
                "description": XSS_DESCRIPTION}))
            split = _ok(api.post(f"/v1/versions/{version['id']}/splits",
                                 json={"strategy": "sample", "fraction": 0.34, "seed": 1}))
            stats = [_ok(api.post(f"/v1/splits/{split['id']}/stats", json={"side": side}))
                     for side in ("train", "val")]
            fitted = ScalingSpec.from_stats(SplitStatsData.model_validate(stats[0]),
                                            "voltage_v", kind="standard", protocol="cycling")
            plan = _ok(api.post(f"/v1/splits/{split['id']}/plans", json={
                **PLAN, "scaling": [fitted.model_dump(mode="json")]}))
            other = _ok(api.post("/v1/datasets/other/versions", json={
                "root": str(other_root), "manifest": other_manifest.name}))
            other_split = _ok(api.post(f"/v1/versions/{other['id']}/splits",
                                       json={"strategy": "sample", "fraction": 0.5}))
            other_plan = _ok(api.post(f"/v1/splits/{other_split['id']}/plans", json={
                "default_window": {"batch_size": 2, "seq_len": 8},
                "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}))
            scoped = _ok(api.post("/v1/tokens", json={"name": "lab-reader", "role": "reader",
                                                      "datasets": "lab"}))
        xss_version = _register_markup_name(url, other_root)
        with httpx.Client(base_url=catalog_url, timeout=120,
                          headers={"authorization": f"Bearer {ADMIN}"}) as api:
            xss_split = _ok(api.post(f"/v1/versions/{xss_version}/splits",
                                     json={"strategy": "sample", "fraction": 0.5}))
            xss_plan = _ok(api.post(f"/v1/splits/{xss_split['id']}/plans", json={
                "default_window": {"batch_size": 2, "seq_len": 8}, "split": "val"
                if xss_split["counts"]["train"]["manifest_rows"] == 0 else "train",
                "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}))
        _write_jobs(url)
        yield Site(url=catalog_url, database_url=url, root=base, flight_location=flight.location,
                   dead_location=dead, version_id=version["id"], split_id=split["id"],
                   plan_id=plan["id"], other_version_id=other["id"],
                   other_split_id=other_split["id"], other_plan_id=other_plan["id"],
                   scoped_token=scoped["token"], xss_version_id=xss_version,
                   xss_split_id=xss_split["id"], xss_plan_id=xss_plan["id"])


def _register_markup_name(database_url: str, root: Path) -> str:
    """A version of dataset :data:`XSS_NAME` through the service layer: one manifest row
    (a cell named with markup too) of ``root``, other content than ``other``'s; its id."""
    engine = create_engine(database_url)
    try:
        ctx = CatalogContext.from_engine(engine)
        rows = [{"set_id": "x", "cell_id": "<b>cell</b>", "cidx": 0, "protocol": "cycling",
                 "segment_path": "seg/c0/0/cycling.parquet"}]
        return service.register_version(ctx, XSS_NAME, root=str(root), rows=rows).value.id
    finally:
        engine.dispose()


RUNNING_JOB = "j-ui-running"
STALE_JOB = "j-ui-stale"


def _write_jobs(database_url: str) -> None:
    """Two registration jobs of ``other`` as the jobs table holds them: :data:`RUNNING_JOB`
    checking 3 of 10 segments, its heartbeat fresh for the whole module (an hour ahead),
    and :data:`STALE_JOB`, "running" but silent for an hour (its server died; past
    ``job_stale_s``, within ``job_retention_s``: a day, after which it is pruned)."""
    engine = create_engine(database_url)
    now = utcnow()
    try:
        with session_scope(CatalogContext.from_engine(engine).sessions) as session:
            for job_id, heard in ((RUNNING_JOB, now + timedelta(hours=1)),
                                  (STALE_JOB, now - timedelta(hours=1))):
                session.add(RegistrationJob(
                    id=job_id, dataset="other", request_key=job_id.ljust(64, "0"),
                    principal="ui-test", state="running", phase="checking", checked=3,
                    profiled=0, total=10, created_at=heard, updated_at=heard))
    finally:
        engine.dispose()


class Watched:
    """A page with every console error, page error and dialog it raised recorded."""

    def __init__(self, browser: Browser) -> None:
        self.context = browser.new_context()
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def _dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, url: str, *, status: int = 200) -> Page:
        """Go to ``url``; the final answer has ``status``; nothing logged an error (but,
        for an error page, the browser's one line about the document's own status)."""
        self.errors.clear()
        response = self.page.goto(url, wait_until="load")
        assert response is not None
        assert response.status == status, (url, response.status)
        if status >= 400:
            own = ("console: Failed to load resource: the server responded with a status "
                   f"of {status}")
            self.errors = [e for e in self.errors if not e.startswith(own)]
        assert not self.errors, self.errors
        return self.page

    def close(self) -> None:
        self.context.close()
