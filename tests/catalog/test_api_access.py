"""Roles and dataset scopes on every REST route, the audit trail, and tokens' lifecycle.

One real catalog per database with a bootstrap admin token; tokens of each role (and
two scoped ones) are minted through the API, then every route is called with each.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from tests.catalog.api_support import assert_error, write_small_dataset
from tests.fixtures.servers import run_catalog_server
from windpipe.catalog.api.app import create_app
from windpipe.services.settings import Settings

BOOT = "boot-secret-token"
PLAN = {"default_window": {"batch_size": 2, "seq_len": 8},
        "inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}
SPLIT = {"strategy": "sample", "fraction": 0.25, "seed": 1}
_names = itertools.count()


@dataclass(frozen=True)
class Call:
    method: str
    template: str  # the OpenAPI path
    role: str  # reader, writer, admin, any
    scoped: bool  # touches one dataset (lab-a)


CALLS = [
    Call("GET", "/v1/config", "reader", False),
    Call("GET", "/v1/datasets", "reader", False),
    Call("GET", "/v1/datasets/{name}", "reader", True),
    Call("POST", "/v1/datasets/{name}/versions", "writer", True),
    Call("GET", "/v1/datasets/{name}/versions", "reader", True),
    Call("GET", "/v1/jobs/{job_id}", "reader", True),
    Call("GET", "/v1/versions/{version_id}", "reader", True),
    Call("GET", "/v1/versions/{version_id}/index", "reader", True),
    Call("GET", "/v1/versions/{version_id}/segments", "reader", True),
    Call("POST", "/v1/versions/{version_id}/splits", "writer", True),
    Call("GET", "/v1/splits/{split_id}", "reader", True),
    Call("GET", "/v1/splits/{split_id}/index", "reader", True),
    Call("POST", "/v1/splits/{split_id}/plans", "writer", True),
    Call("POST", "/v1/splits/{split_id}/stats", "writer", True),  # computes them, then:
    Call("GET", "/v1/splits/{split_id}/stats", "reader", True),
    Call("GET", "/v1/plans/{plan_id}", "reader", True),
    Call("GET", "/v1/plans/{plan_id}/artifact", "reader", True),
    Call("GET", "/v1/plans/{plan_id}/report", "reader", True),
    Call("GET", "/v1/plans/{plan_id}/schedule", "reader", True),
    Call("GET", "/v1/flight/stats", "reader", False),
    Call("GET", "/metrics", "reader", False),
    Call("GET", "/v1/whoami", "any", False),
    Call("POST", "/v1/tokens", "admin", False),
    Call("GET", "/v1/tokens", "admin", False),
    Call("DELETE", "/v1/tokens/{token_name}", "admin", False),
    Call("GET", "/v1/audit", "admin", False),
    # last: retiring refuses new splits and plans of what it retires
    Call("DELETE", "/v1/plans/{plan_id}", "admin", True),
    Call("DELETE", "/v1/splits/{split_id}", "admin", True),
    Call("DELETE", "/v1/versions/{version_id}", "admin", True),
]
RANK = {"any": -1, "reader": 0, "writer": 1, "admin": 2}


def test_every_route_is_classified(tmp_path: Path) -> None:
    spec = create_app(Settings(data_dir=tmp_path)).openapi()
    served = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops
              if p not in ("/healthz", "/readyz")}
    assert served == {(c.method, c.template) for c in CALLS}


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _mint(client: httpx.Client, role: str, datasets: str | None = None) -> str:
    body: dict[str, Any] = {"name": f"t{next(_names)}-{role}", "role": role}
    if datasets:
        body["datasets"] = datasets
    resp = client.post("/v1/tokens", json=body, headers=_auth(BOOT))
    assert resp.status_code == 201, resp.text
    assert resp.json()["token"].startswith("wpk_")
    return str(resp.json()["token"])


def _resources(client: httpx.Client, root: Path, name: str) -> dict[str, str]:
    write_small_dataset(root)
    body = {"root": root.as_uri(), "manifest": "manifest.parquet"}
    version = client.post(f"/v1/datasets/{name}/versions", json=body, headers=_auth(BOOT))
    assert version.status_code == 201, version.text
    job = client.post(f"/v1/datasets/{name}/versions", json=body,
                      headers={**_auth(BOOT), "Prefer": "respond-async"})
    assert job.status_code == 202, job.text
    split = client.post(f"/v1/versions/{version.json()['id']}/splits", json=SPLIT,
                        headers=_auth(BOOT))
    assert split.status_code == 201, split.text
    plan = client.post(f"/v1/splits/{split.json()['id']}/plans", json=PLAN, headers=_auth(BOOT))
    assert plan.status_code == 201, plan.text
    return {"name": name, "version_id": version.json()["id"], "split_id": split.json()["id"],
            "plan_id": plan.json()["id"], "root": root.as_uri(), "job_id": job.json()["id"]}


def _do(client: httpx.Client, call: Call, ids: dict[str, str], token: str | None
        ) -> httpx.Response:
    params = dict(ids)
    if call.template == "/v1/tokens/{token_name}":
        params["token_name"] = f"victim{next(_names)}"
        client.post("/v1/tokens", json={"name": params["token_name"], "role": "reader"},
                    headers=_auth(BOOT))
    path = call.template.format(**params)
    body: Any = None
    if call.template.endswith("/versions") and call.method == "POST":
        body = {"root": ids["root"], "manifest": "manifest.parquet"}
    elif call.template.endswith("/splits"):
        body = SPLIT
    elif call.template.endswith("/plans"):
        body = PLAN
    elif call.template.endswith("/stats") and call.method == "POST":
        body = {"side": "train"}
    elif call.template == "/v1/tokens" and call.method == "POST":
        body = {"name": f"n{next(_names)}", "role": "reader"}
    return client.request(call.method, path, json=body, headers=_auth(token))


@pytest.fixture
def served(database_url: str, tmp_path: Path):
    settings = Settings(database_url=database_url, data_dir=tmp_path / "state",
                        admin_token=SecretStr(BOOT), log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_roles_and_scopes_on_every_route(served: httpx.Client, tmp_path: Path) -> None:
    client = served
    lab = _resources(client, tmp_path / "a", "lab-a")
    other = _resources(client, tmp_path / "b", "other")
    tokens = {role: _mint(client, role) for role in ("reader", "writer", "admin")}
    scoped_writer = _mint(client, "writer", "lab-*")
    for call in CALLS:
        resp = _do(client, call, lab, None)
        assert_error(resp, 401, "unauthenticated")
        assert_error(_do(client, call, lab, "wpk_not-a-token"), 401, "unauthenticated")
        for role, token in tokens.items():
            resp = _do(client, call, lab, token)
            if RANK[role] >= RANK[call.role]:
                assert resp.status_code < 300, (call, role, resp.text)
            else:
                error = assert_error(resp, 403, "forbidden")
                assert error["details"]["required_role"] == call.role, call
        # The scoped writer: its own datasets as a writer, nothing of another dataset.
        resp = _do(client, call, lab, scoped_writer)
        assert (resp.status_code < 300) == (RANK[call.role] <= RANK["writer"]), (call, resp.text)
        if call.scoped:
            assert_error(_do(client, call, other, scoped_writer), 403, "forbidden")
    # listing datasets shows a scoped token only its own (names are information too),
    # across pages
    _resources(client, tmp_path / "c", "lab-c")
    seen, token = [], None
    while True:
        page = client.get("/v1/datasets", params={"page_size": 1, "page_token": token},
                          headers=_auth(scoped_writer)).json()
        seen += [d["name"] for d in page["items"]]
        if not (token := page["next_page_token"]):
            break
    assert seen == ["lab-a", "lab-c"]
    everyone = client.get("/v1/datasets", headers=_auth(tokens["reader"])).json()["items"]
    assert [d["name"] for d in everyone] == ["lab-a", "lab-c", "other"]


def test_audit_of_a_register_split_plan_sequence(served: httpx.Client, tmp_path: Path) -> None:
    client = served
    writer, reader = _mint(client, "writer"), _mint(client, "reader")
    write_small_dataset(tmp_path / "d")
    body = {"root": (tmp_path / "d").as_uri(), "manifest": "manifest.parquet"}
    assert_error(client.post("/v1/datasets/d/versions", json=body), 401, "unauthenticated")
    assert_error(client.post("/v1/datasets/d/versions", json=body, headers=_auth(reader)),
                 403, "forbidden")
    version = client.post("/v1/datasets/d/versions", json=body, headers=_auth(writer)).json()
    split = client.post(f"/v1/versions/{version['id']}/splits", json=SPLIT,
                        headers=_auth(writer)).json()
    plan = client.post(f"/v1/splits/{split['id']}/plans", json=PLAN, headers=_auth(writer))
    assert plan.status_code == 201
    bad = client.post(f"/v1/splits/{split['id']}/plans", json={**PLAN, "split": "nope"},
                      headers=_auth(writer))
    assert bad.status_code == 422
    assert_error(client.get("/v1/audit", headers=_auth(writer)), 403, "forbidden")
    events = client.get("/v1/audit", params={"page_size": 100}, headers=_auth(BOOT)).json()
    rows = [(e["principal"], e["action"], e["target"], e["status"], e["outcome"])
            for e in events["items"] if e["action"] != "create_token"]
    minted = [e for e in events["items"] if e["action"] == "create_token"]
    assert [(e["principal"], e["status"]) for e in minted] == [("bootstrap", 201)] * 2
    names = {t["role"]: t["name"]
             for t in client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]}
    writer_name, reader_name = names["writer"], names["reader"]
    assert rows == [
        ("anonymous", "register_version", "name=d", 401, "refused"),
        (reader_name, "register_version", "name=d", 403, "refused"),
        (writer_name, "register_version", "name=d", 201, "ok"),
        (writer_name, "create_split", f"version_id={version['id']}", 201, "ok"),
        (writer_name, "create_plan", f"split_id={split['id']}", 201, "ok"),
        (writer_name, "create_plan", f"split_id={split['id']}", 422, "error"),
    ]
    assert all(e["request_id"] for e in events["items"])
    assert plan.headers["x-request-id"] in {e["request_id"] for e in events["items"]}


def test_revoked_token_is_refused_at_once(served: httpx.Client) -> None:
    client = served
    token = _mint(client, "reader")
    assert client.get("/v1/whoami", headers=_auth(token)).json()["role"] == "reader"
    listed = client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    name = listed[0]["name"]
    assert client.delete(f"/v1/tokens/{name}", headers=_auth(BOOT)).status_code == 204
    assert_error(client.get("/v1/datasets", headers=_auth(token)), 401, "unauthenticated")
    assert_error(client.delete(f"/v1/tokens/{name}", headers=_auth(BOOT)), 404, "not_found")
    dup = client.post("/v1/tokens", json={"name": name, "role": "reader"}, headers=_auth(BOOT))
    assert_error(dup, 409, "conflict")
    assert_error(client.post("/v1/tokens", json={"name": "x", "role": "root"},
                             headers=_auth(BOOT)), 422, "invalid_request")


def test_a_token_past_its_expiry_is_refused(served: httpx.Client, database_url: str) -> None:
    client = served
    body = {"name": "short-lived", "role": "reader", "expires_in_s": 3600}
    created = client.post("/v1/tokens", json=body, headers=_auth(BOOT))
    assert created.status_code == 201, created.text
    token, expires = created.json()["token"], created.json()["expires_at"]
    at = datetime.fromisoformat(expires)
    now = datetime.now(UTC)
    assert timedelta(minutes=59) < (at if at.tzinfo else at.replace(tzinfo=UTC)) - now \
        <= timedelta(hours=1)
    assert client.get("/v1/whoami", headers=_auth(token)).json()["name"] == "short-lived"
    listed = {t["name"]: t for t in client.get("/v1/tokens", headers=_auth(BOOT)).json()["items"]}
    assert listed["short-lived"]["expires_at"] == expires
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:  # the clock moves past it
        conn.execute(sa.text("UPDATE api_tokens SET expires_at = :at WHERE name = :n"),
                     {"at": now - timedelta(seconds=1), "n": "short-lived"})
    engine.dispose()
    error = assert_error(client.get("/v1/whoami", headers=_auth(token)), 401,
                         "unauthenticated")
    assert "expired" in error["message"]
    for bad in (5, 20 * 365 * 86400, "soon"):
        resp = client.post("/v1/tokens", json={**body, "name": "x", "expires_in_s": bad},
                           headers=_auth(BOOT))
        assert_error(resp, 422, "invalid_request")
    # an expired token still closes the loopback's open access: nothing falls back to open
    assert_error(client.get("/v1/datasets"), 401, "unauthenticated")


def test_loopback_without_tokens_is_the_local_admin(database_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=database_url, data_dir=tmp_path, log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url) as client:
        assert client.get("/v1/whoami").json() == {"name": "local", "role": "admin",
                                                   "datasets": None}
        made = client.post("/v1/tokens", json={"name": "first", "role": "reader"})
        assert made.status_code == 201
        # Once a token exists, the catalog is no longer open.
        assert_error(client.get("/v1/datasets"), 401, "unauthenticated")
        token = made.json()["token"]
        assert client.get("/v1/datasets", headers=_auth(token)).status_code == 200
