"""The ``/ui`` pages in a real browser (Debian's Chromium through Playwright) against a
real catalog server with registered data, a split, its statistics and a plan.

Every page is opened with no console error (a Content-Security-Policy violation is one),
and what a person checks on it is read back from the rendered page and compared with the
REST API's answer: split counts, the plan's batch count, the index filter, the segment
plot's point bound and its window overlay, a missing channel, the Flight servers. Markup
in names stays text (no dialog ever opens), a scoped token sees only its datasets, and
every answer carries the security headers. A screenshot of each page goes to the test's
``tmp_path``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import polars as pl
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.catalog.api_support import get_all
from tests.catalog.ui.ui_support import (
    ADMIN,
    CHROMIUM,
    CHROMIUM_ARGS,
    RUNNING_JOB,
    STALE_JOB,
    XSS_DESCRIPTION,
    XSS_NAME,
    Site,
    Watched,
    build_site,
)
from windpipe.catalog.ui.access import TOKEN_COOKIE
from windpipe.catalog.ui.downsample import DEFAULT_MAX_POINTS
from windpipe.sdk import Catalog

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent: install Debian's chromium package (.ci/run does)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with build_site(tmp_path_factory.mktemp("ui-site")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def admin(site: Site, browser: Browser) -> Iterator[Watched]:
    """A browser tab signed in with the admin token (the ``?token=`` cookie)."""
    watched = Watched(browser)
    watched.open(f"{site.url}/ui?token={ADMIN}")
    assert "token" not in watched.page.url  # the redirect took it out of the address
    try:
        yield watched
    finally:
        watched.close()


def _shot(watched: Watched, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    watched.page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


def _no_internals(site: Site, html: str) -> None:
    """No host path, no connection string on a page."""
    assert str(site.root) not in html
    assert "sqlite://" not in html
    assert "postgresql://" not in html
    assert "file://" not in html


def _split_index(site: Site) -> list[dict[str, Any]]:
    with site.api() as api:
        return get_all(api, f"/v1/splits/{site.split_id}/index", page_size=500)


def test_datasets_dataset_and_version_pages(site: Site, admin: Watched, tmp_path: Path):
    page = admin.open(f"{site.url}/ui")
    names = page.locator("#datasets a.dataset").all_inner_texts()
    assert names == sorted(["lab", "other", XSS_NAME])
    _shot(admin, tmp_path, "datasets")
    page = admin.open(f"{site.url}/ui?q=LA")
    assert page.locator("#datasets a.dataset").all_inner_texts() == ["lab"]

    page = admin.open(f"{site.url}/ui/datasets/lab")
    with site.api() as api:
        version = api.get(f"/v1/versions/{site.version_id}").json()
    row = page.locator("#versions tbody tr").first
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == site.version_id
    assert (cells[2], cells[4]) == (f"{version['n_segments']:,}", f"{version['n_rows']:,}")
    assert cells[5] == ", ".join(sorted(version["schema"]))
    assert cells[7] == "-"  # not retired
    assert page.locator("table.jobs tbody tr").count() >= 1
    _no_internals(site, page.content())
    _shot(admin, tmp_path, "dataset")

    page = admin.open(f"{site.url}/ui/versions/{site.version_id}")
    assert page.locator("#splits a.split").all_inner_texts() == [site.split_id]
    assert page.locator("#plans a.plan").all_inner_texts() == [site.plan_id]
    jobs = page.locator("table.jobs tbody tr td a").all_inner_texts()
    assert jobs == [site.version_id]  # the registration job that made it
    _no_internals(site, page.content())
    _shot(admin, tmp_path, "version")

    index = _split_index(site)
    cell = index[-1]["cell_id"]
    want = [r for r in index if r["protocol"] == "hppc" and cell in r["cell_id"]]
    page = admin.open(f"{site.url}/ui/versions/{site.version_id}?protocol=hppc"
                      f"&cell={quote(cell)}&limit=500")
    assert page.locator("#index-total").inner_text().startswith(f"{len(want)} ")
    shown = page.locator("#index-rows tbody tr td:first-child").all_inner_texts()
    assert shown == [str(r["manifest_row_id"]) for r in want]
    page = admin.open(f"{site.url}/ui/versions/{site.version_id}?limit=5&offset=5")
    assert page.locator("#index-rows tbody tr").count() == 5
    assert page.locator(".pager a[rel=prev]").count() == 1


def test_split_page_counts_plot_histograms_and_scalings(site: Site, admin: Watched,
                                                        tmp_path: Path):
    catalog = Catalog(site.url, token=ADMIN)
    try:
        split = catalog.split(site.split_id)
        frame = split.index().frame
        train_stats = split.stats(side="train")
    finally:
        catalog.close()
    page = admin.open(f"{site.url}/ui/splits/{site.split_id}")
    groups = frame.group_by([*split.config.group_by, "split"]).len()
    for side in ("train", "val"):
        want = split.counts[side]
        for table in ("#counts", "#split-totals"):  # the stored counts, and the plot's own
            row = page.locator(f"{table} tr[data-side={side}]")
            assert int(row.locator(".groups").inner_text()) == want["groups"], table
            assert int(row.locator(".manifest-rows").inner_text()) == want["manifest_rows"]
            assert int(row.locator(".rows").inner_text()) == want["rows"], table
        assert want["groups"] == groups.filter(pl.col("split") == side).height
    plot = page.locator("#split-plot")
    assert int(plot.get_attribute("data-groups") or -1) == groups.height
    assert plot.locator(".bar.side-train").count() >= 1
    assert plot.locator(".bar.side-val").count() >= 1

    stats_rows = page.locator("table.stats[data-side=train] tbody tr")
    assert stats_rows.count() == len(train_stats.stats)
    for entry in train_stats.stats:
        if entry.histogram is None:
            continue
        cell = page.locator(f"table.stats[data-side=train] tr[data-column={entry.column}]"
                            f"[data-protocol={entry.protocol}] svg.histogram")
        assert int(cell.get_attribute("data-bins") or -1) == len(entry.histogram.counts)
        d = cell.locator("path.bars").get_attribute("d") or ""
        assert d.count("M") == sum(1 for c in entry.histogram.counts if c > 0)
    assert page.locator("table.stats[data-side=val] svg.histogram").count() >= 1

    scaling = page.locator("#scalings tr[data-column=voltage_v]")
    assert scaling.count() == 1
    fitted = train_stats.column_stats("voltage_v", "cycling")
    assert f"mean {fitted.mean:.4g}" in scaling.inner_text()
    assert page.locator("#plans a.plan").all_inner_texts() == [site.plan_id]
    _shot(admin, tmp_path, "split")


def test_plan_page_report_plot_and_preview(site: Site, admin: Watched, tmp_path: Path):
    catalog = Catalog(site.url, token=ADMIN)
    try:
        report = catalog.plan(site.plan_id).report()
    finally:
        catalog.close()
    with site.api() as api:
        first = api.get(f"/v1/plans/{site.plan_id}/schedule", params={"page_size": 8}).json()
    page = admin.open(f"{site.url}/ui/plans/{site.plan_id}")
    assert int(page.locator("#batches").get_attribute("data-batches") or -1) == report.batches
    assert page.locator("#strategy").inner_text().startswith(report.strategy)
    assert page.locator("#working-set").inner_text().split(" (")[0].endswith("B")
    assert page.locator("#shuffle-quality").count() == 1
    bars = page.locator("#protocol-bars rect.protocol-bar")
    assert sum(int(bars.nth(i).get_attribute("data-batches") or 0)
               for i in range(bars.count())) == report.batches
    plot = page.locator("#plan-plot")
    assert int(plot.get_attribute("data-windows") or -1) == report.lanes - report.padding_lanes
    assert plot.locator("path.windows").count() >= 1
    assert page.locator("section.batch").count() == min(8, report.batches)
    lanes = page.locator("section.batch").first.locator("table.lanes tbody tr")
    assert lanes.count() == len(first["items"][0]["lanes"])
    provenance = page.locator("a.provenance").first
    assert provenance.count() == 1
    _shot(admin, tmp_path, "plan")
    provenance.click()
    page.wait_for_load_state("load")
    assert "/segments/" in page.url
    assert f"plan={site.plan_id}" in page.url
    assert page.locator("svg.plot").count() >= 1
    assert not admin.errors, admin.errors


def test_segment_page_plot_is_bounded_and_overlays_windows(site: Site, admin: Watched,
                                                           tmp_path: Path):
    index = _split_index(site)
    train = [r for r in index if r["split"] == "train" and r["protocol"] == "cycling"]
    longest = max(train, key=lambda r: max(r["segment_rows"]))
    ordinal = longest["segment_rows"].index(max(longest["segment_rows"]))
    rows = longest["segment_rows"][ordinal]
    assert rows > DEFAULT_MAX_POINTS  # the page must downsample
    page = admin.open(f"{site.url}/ui/versions/{site.version_id}/segments/"
                      f"{longest['manifest_row_id']}/{ordinal}?plan={site.plan_id}")
    series = page.locator("path.series")
    assert series.count() >= 3
    for i in range(series.count()):
        points = int(series.nth(i).get_attribute("data-points") or 0)
        d = series.nth(i).get_attribute("d") or ""
        assert 0 < points <= DEFAULT_MAX_POINTS
        assert len(re.findall(r"[ML]", d)) == points  # what is drawn is what is counted
    windows = page.locator("svg.plot").first.locator("rect.window")
    assert windows.count() > 0
    assert "window" in page.locator("#windows-note").inner_text()
    _no_internals(site, page.content())
    _shot(admin, tmp_path, "segment")

    without = page.goto(f"{site.url}/ui/versions/{site.version_id}/segments/"
                        f"{longest['manifest_row_id']}/{ordinal}")
    assert without is not None
    assert without.status == 200
    assert page.locator("rect.window").count() == 0

    with site.api() as api:
        schema = api.get(f"/v1/versions/{site.version_id}").json()["schema"]["cycling"]
    lacking = next(c for c in schema if c["name"] == "temperature_c")["missing"]
    page = admin.open(f"{site.url}/ui/versions/{site.version_id}/segments/{lacking[0]}/0")
    missing = page.locator("figure.channel[data-missing=true]")
    assert missing.count() == 1
    assert missing.get_attribute("data-channel") == "temperature_c"
    assert "missing" in missing.inner_text()
    _shot(admin, tmp_path, "segment-missing-channel")


def test_servers_page_shows_the_live_server_and_the_dead(site: Site, admin: Watched,
                                                         tmp_path: Path):
    with site.api() as api:
        stats = api.get("/v1/flight/stats").json()["servers"]
    counters = next(s["stats"] for s in stats if s["location"] == site.flight_location)
    page = admin.open(f"{site.url}/ui/servers")
    live = page.locator(f"tr.server[data-location='{site.flight_location}']")
    dead = page.locator(f"tr.server[data-location='{site.dead_location}']")
    assert live.get_attribute("data-health") == "ok"
    assert live.locator("td.health").inner_text().startswith("ok")
    assert "configured" in live.inner_text()
    cache = live.locator("td.cache")
    assert int(cache.get_attribute("data-budget") or -1) == counters["budget_bytes"]
    assert int(cache.get_attribute("data-hits") or -1) >= counters["hits"]
    assert int(live.locator("td.streams").get_attribute("data-active") or -1) >= 0
    tier = live.locator("td.tier")
    assert tier.inner_text() != "-"  # the tier's use and budget, or "off"
    if tier.inner_text() != "off":
        assert int(tier.get_attribute("data-used") or -1) >= 0
        assert " / " in tier.inner_text()
    assert dead.get_attribute("data-health") == "unreachable"
    assert "unavailable" in dead.locator("td.error").inner_text()
    _shot(admin, tmp_path, "servers")
    page = admin.open(f"{site.url}/ui/servers")  # a second look has a rate
    assert "/s read" in live.locator("td.throughput").inner_text()


def test_registration_jobs_show_live_progress(site: Site, admin: Watched, tmp_path: Path):
    # the page reloads itself every 2 s while a job runs: read it once, at once
    page = admin.open(f"{site.url}/ui/versions/{site.other_version_id}")
    html = page.content()
    _shot(admin, tmp_path, "version-running-job")
    assert re.search(r'<meta http-equiv="refresh" content="2"', html)
    running = re.search(r'<tr class="job job-running" data-state="running" data-done="3" '
                        r'data-total="10">(.*?)</tr>', html, re.S)
    assert running is not None
    assert RUNNING_JOB in running.group(1)
    assert '<progress max="10" value="3">' in running.group(1)
    assert 'data-state="interrupted"' not in html  # a stale job of this dataset ...
    page = admin.open(f"{site.url}/ui/datasets/other")
    html = page.content()
    stale = re.search(r'<tr class="job job-interrupted"[^>]*>(.*?)</tr>', html, re.S)
    assert stale is not None  # ... reads as interrupted, as GET /v1/jobs/{id} reads it
    assert STALE_JOB in stale.group(1)
    assert "<progress" not in stale.group(1)
    # a page without a running job does not reload
    page = admin.open(f"{site.url}/ui/versions/{site.version_id}")
    assert page.locator("meta[http-equiv=refresh]").count() == 0


def test_markup_in_names_stays_text(site: Site, admin: Watched, tmp_path: Path):
    page = admin.open(f"{site.url}/ui")
    link = page.locator("#datasets a.dataset", has_text=XSS_NAME)
    assert link.count() == 1
    assert link.inner_text() == XSS_NAME
    assert page.locator("script").count() == 0  # no element came out of a name
    link.click()
    page.wait_for_load_state("load")
    assert page.locator("h1 .name").inner_text() == XSS_NAME
    page.locator("#versions a.version").first.click()
    page.wait_for_load_state("load")
    assert page.locator("#index-rows td.cell").all_inner_texts() == ["<b>cell</b>"]
    assert page.locator("#index-rows b").count() == 0
    page = admin.open(f"{site.url}/ui/datasets/lab")
    assert page.locator("td.description").first.inner_text() == XSS_DESCRIPTION
    assert page.locator("img").count() == 0
    for path in (f"/ui/splits/{site.xss_split_id}", f"/ui/plans/{site.xss_plan_id}"):
        page = admin.open(f"{site.url}{path}")  # the cell's name in the plots, as text
        assert "<b>cell</b>" in (page.locator("svg.plot").first.text_content() or ""), path
        assert page.locator("b").count() == 0, path
        assert page.locator("script").count() == 0, path
    _shot(admin, tmp_path, "markup-plan")
    page = admin.open(f"{site.url}/ui?q={quote('<img src=x onerror=alert(3)>')}")
    assert page.locator("q.query").inner_text() == "<img src=x onerror=alert(3)>"
    assert page.locator("img").count() == 0
    _shot(admin, tmp_path, "markup")
    assert admin.dialogs == []
    assert admin.errors == []


def test_a_scoped_token_sees_only_its_datasets(site: Site, browser: Browser, tmp_path: Path):
    watched = Watched(browser)
    try:
        page = watched.open(f"{site.url}/ui?token={site.scoped_token}")
        assert page.locator("#datasets a.dataset").all_inner_texts() == ["lab"]
        page = watched.open(f"{site.url}/ui?q=o")  # "other" would match
        assert page.locator("#datasets a.dataset").all_inner_texts() == []
        for path in ("/ui/datasets/other", f"/ui/versions/{site.other_version_id}",
                     f"/ui/splits/{site.other_split_id}", f"/ui/plans/{site.other_plan_id}",
                     f"/ui/versions/{site.version_id}/segments/0/0?plan={site.other_plan_id}",
                     f"/ui/datasets/{quote(XSS_NAME, safe='')}",
                     f"/ui/versions/{site.xss_version_id}", f"/ui/splits/{site.xss_split_id}",
                     f"/ui/plans/{site.xss_plan_id}"):
            page = watched.open(f"{site.url}{path}", status=404)
            assert page.locator("h1.error-title").inner_text().startswith("404"), path
            assert "does not exist" in page.locator("p.error-message").inner_text(), path
        page = watched.open(f"{site.url}/ui/versions/{site.version_id}")
        assert page.locator("#plans a.plan").all_inner_texts() == [site.plan_id]
        page = watched.open(f"{site.url}/ui/splits/{site.split_id}")  # its own: shown
        assert page.locator("#scalings a").all_inner_texts() == [site.plan_id]
        page = watched.open(f"{site.url}/ui/servers")  # no dataset on it: every reader's
        assert page.locator("tr.server").count() == 2
        page = watched.open(f"{site.url}/ui/datasets/lab")  # no job of another dataset
        assert RUNNING_JOB not in page.content()
        _shot(watched, tmp_path, "scoped")
    finally:
        watched.close()


def test_every_answer_carries_the_security_headers(site: Site):
    paths = ["/ui", "/ui?q=x", "/ui/datasets/lab", f"/ui/versions/{site.version_id}",
             f"/ui/splits/{site.split_id}", f"/ui/plans/{site.plan_id}", "/ui/servers",
             "/ui/static/style.css", "/ui/datasets/none", "/ui/no/such/page"]
    with site.api() as api:
        for path in paths:
            response = api.get(path)
            csp = response.headers.get("content-security-policy", "")
            assert "script-src 'none'" in csp, path
            assert "unsafe-inline" not in csp, path
            assert "default-src 'none'" in csp
            assert "frame-ancestors 'none'" in csp
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["referrer-policy"] == "no-referrer"
        assert api.get("/v1/datasets").headers.get("content-security-policy") is None


def test_tokens_cookie_and_refusals(site: Site):
    with httpx.Client(base_url=site.url, timeout=60) as anonymous:
        refused = anonymous.get("/ui")
        assert refused.status_code == 401
        assert "?token=" in refused.text
        assert anonymous.get("/ui", headers={"authorization": "Bearer wrong"}).status_code == 401
        sign_in = anonymous.get(f"/ui/datasets/lab?q=1&token={ADMIN}", follow_redirects=False)
        assert sign_in.status_code == 303
        assert sign_in.headers["location"] == "/ui/datasets/lab?q=1"
        cookie = sign_in.headers["set-cookie"]
        for part in (f"{TOKEN_COOKIE}=", "HttpOnly", "SameSite=strict", "Path=/ui"):
            assert part.lower() in cookie.lower(), cookie
    # the cookie is the pages', never the API's
    with httpx.Client(base_url=site.url, timeout=60, cookies={TOKEN_COOKIE: ADMIN}) as browser:
        assert browser.get("/ui").status_code == 200
        assert browser.get("/v1/datasets").status_code == 401
        # GET only: nothing on /ui takes a write
        assert browser.post("/ui").status_code == 405
    with site.api() as api:
        assert api.get("/ui").status_code == 200  # the bearer header, as the API takes it
        assert api.get("/ui?limit=100000").status_code == 200  # clamped, not refused
