"""A scoped admin stays inside its scope on the token and audit routes.

One real catalog per database with a bootstrap admin; an admin scoped to ``lab-*``
tries to mint wider tokens, lists and revokes tokens and reads the audit trail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.scopes import scope_within
from windpipe.services.settings import Settings

BOOT = "boot-secret-token"
SPLIT = {"strategy": "sample", "fraction": 0.25, "seed": 1}
PLAN = {"default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _mint(client: httpx.Client, by: str, name: str, role: str,
          datasets: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {"name": name, "role": role}
    if datasets is not None:
        body["datasets"] = datasets
    return client.post("/v1/tokens", json=body, headers=_auth(by))


def _resources(client: httpx.Client, root: Path, name: str) -> dict[str, str]:
    write_small_dataset(root)
    version = client.post(f"/v1/datasets/{name}/versions", headers=_auth(BOOT),
                          json={"root": root.as_uri(), "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    split = client.post(f"/v1/versions/{version.json()['id']}/splits", json=SPLIT,
                        headers=_auth(BOOT))
    assert split.status_code == 201, split.text
    plan = client.post(f"/v1/splits/{split.json()['id']}/plans", json=PLAN,
                       headers=_auth(BOOT))
    assert plan.status_code == 201, plan.text
    return {"name": name, "version_id": version.json()["id"],
            "split_id": split.json()["id"], "plan_id": plan.json()["id"]}


@pytest.fixture
def served(database_url: str, tmp_path: Path):
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_a_scoped_admin_mints_lists_and_revokes_only_inside_its_scope(
    served: httpx.Client,
) -> None:
    client = served
    made = _mint(client, BOOT, "lab-admin", "admin", "lab-*")
    assert made.status_code == 201, made.text
    lab = made.json()["token"]
    for name, datasets in (("other-reader", "other*"), ("all-reader", None),
                           ("lab-a-reader", "lab-a")):
        assert _mint(client, BOOT, name, "reader", datasets).status_code == 201

    # wider than lab-*: no scope at all, everything, a shorter prefix, an overlapping glob
    for datasets in (None, "*", "l*", "la?-*", "*-a", "lab[-]*", "other"):
        error = assert_error(_mint(client, lab, "wide", "admin", datasets), 403, "forbidden")
        assert "within" in error["message"], error
        assert error["details"]["scope"] == "lab-*"
    # a scoped token created without a scope is not an unscoped one either
    refused = _mint(client, lab, "wide", "reader")
    assert_error(refused, 403, "forbidden")
    everyone = {t["name"] for t in client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]}
    assert "wide" not in everyone

    # within lab-*: the same glob, a narrower one, a name it matches
    inside = {"lab-admin-2": "lab-*", "lab-x-writer": "lab-x*", "lab-b-reader": "lab-b"}
    for name, datasets in inside.items():
        created = _mint(client, lab, name, "admin" if name.endswith("2") else "reader",
                        datasets)
        assert created.status_code == 201, created.text
        assert created.json()["datasets"] == datasets
        assert created.json()["created_by"] == "lab-admin"

    listed = client.get("/v1/tokens", headers=_auth(lab))
    assert listed.status_code == 200, listed.text
    names = {t["name"] for t in listed.json()["items"]}
    assert names == {"lab-admin", "lab-a-reader", *inside}
    assert {t["name"] for t in client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]
            } == {"lab-admin", "other-reader", "all-reader", "lab-a-reader", *inside}

    # revoking: a token outside the scope and a missing one answer alike
    answers = []
    for name in ("other-reader", "all-reader", "no-such-token"):
        error = assert_error(client.delete(f"/v1/tokens/{name}", headers=_auth(lab)),
                             403, "forbidden")
        answers.append(error["message"].replace(name, "NAME"))
    assert len(set(answers)) == 1
    assert client.delete("/v1/tokens/lab-a-reader", headers=_auth(lab)).status_code == 204
    assert_error(client.delete("/v1/tokens/lab-a-reader", headers=_auth(lab)), 404,
                 "not_found")
    active = {t["name"] for t in client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]
              if t["revoked_at"] is None}
    assert {"other-reader", "all-reader"} <= active
    # the unscoped admin keeps full power
    assert client.delete("/v1/tokens/other-reader", headers=_auth(BOOT)).status_code == 204
    assert _mint(client, BOOT, "root-2", "admin").json()["datasets"] is None


def test_a_scoped_admin_reads_only_the_audit_of_what_it_can_see(
    served: httpx.Client, tmp_path: Path,
) -> None:
    client = served
    lab_ids = _resources(client, tmp_path / "a", "lab-a")
    other_ids = _resources(client, tmp_path / "b", "other")
    lab = _mint(client, BOOT, "lab-admin", "admin", "lab-*").json()["token"]
    assert _mint(client, BOOT, "other-reader", "reader", "other").status_code == 201
    assert _mint(client, BOOT, "lab-b-reader", "reader", "lab-b").status_code == 201
    assert client.delete("/v1/tokens/other-reader", headers=_auth(BOOT)).status_code == 204
    assert client.delete("/v1/tokens/lab-b-reader", headers=_auth(BOOT)).status_code == 204
    assert client.delete(f"/v1/plans/{other_ids['plan_id']}",
                         headers=_auth(BOOT)).status_code < 300
    assert_error(client.post("/v1/datasets/other/versions", headers=_auth(lab),
                             json={"root": (tmp_path / "b").as_uri(),
                                   "manifest": "manifest.parquet"}), 403, "forbidden")

    everything = _audit(client, BOOT)
    seen = _audit(client, lab)
    assert set(seen) < set(everything)
    visible = {f"name={lab_ids['name']}", f"version_id={lab_ids['version_id']}",
               f"split_id={lab_ids['split_id']}", "token_name=lab-b-reader",
               "name=other"}  # the last: its own refused attempt
    assert {target for _, target in seen} == visible
    assert all(principal == "lab-admin" for principal, target in seen
               if target == "name=other")
    for value in other_ids.values():  # nothing about the other dataset but its own attempt
        assert not any(target and value in target for principal, target in seen
                       if principal != "lab-admin")
    assert "token_name=other-reader" not in {t for _, t in seen}


def _audit(client: httpx.Client, token: str) -> list[tuple[str, str | None]]:
    """Every audit event the token may read, two per page (pages followed to the end)."""
    events: list[dict[str, Any]] = []
    page_token: str | None = None
    while True:
        params: dict[str, Any] = {"page_size": 2}
        if page_token is not None:
            params["page_token"] = page_token
        resp = client.get("/v1/audit", params=params, headers=_auth(token))
        assert resp.status_code == 200, resp.text
        events += resp.json()["items"]
        if not (page_token := resp.json()["next_page_token"]):
            break
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))
    return [(e["principal"], e["target"]) for e in events]


@pytest.mark.parametrize(("inner", "outer", "within"), [
    ("lab-*", None, True), (None, None, True), (None, "lab-*", False),
    ("lab-*", "lab-*", True), ("lab-a", "lab-*", True), ("lab-a*", "lab-*", True),
    ("lab-?", "lab-*", True), ("lab-[ab]", "lab-*", True), ("lab-a", "lab-a", True),
    ("l*", "lab-*", False), ("*", "lab-*", False), ("*-a", "lab-*", False),
    ("lab-a", "lab-?", True), ("lab-?", "lab-[ab]", False), ("lab-a*", "lab-?", False),
    ("ml-*", "lab-*", False), ("lab-a", "*-a", True), ("lab-*", "*", True),
])
def test_scope_within_is_conservative(inner: str | None, outer: str | None,
                                      within: bool) -> None:
    assert scope_within(inner, outer) is within
