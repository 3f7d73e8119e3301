"""``windpipe token create|list|revoke`` against a real database, then a real catalog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import sqlalchemy as sa

from tests.fixtures.servers import run_catalog_server
from windpipe.services.database import create_engine
from windpipe.services.settings import Settings

WINDPIPE = [sys.executable, "-m", "windpipe.cli"]


def _run(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WINDPIPE_DATABASE_URL"}
    return subprocess.run([*WINDPIPE, "token", *args, "--database-url", database_url],
                          check=False, capture_output=True, text=True, env=env, timeout=120)


def test_token_commands(database_url: str, tmp_path: Path) -> None:
    made = _run("create", "--role", "writer", "--name", "ci-bot", "--datasets", "lab-*",
                "--create", database_url=database_url)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("wpk_")
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT token_hash FROM api_tokens")).scalars().all()
    finally:
        engine.dispose()
    assert len(stored) == 1
    assert token not in stored[0]  # only a hash is kept
    dup = _run("create", "--role", "reader", "--name", "ci-bot", database_url=database_url)
    assert dup.returncode == 1
    assert "exists" in dup.stderr
    listed = _run("list", database_url=database_url)
    assert listed.stdout.split() == ["ci-bot", "writer", "lab-*", "active"]
    assert token not in listed.stdout

    settings = Settings(database_url=database_url, data_dir=tmp_path, log_level="WARNING")
    with run_catalog_server(settings) as url, httpx.Client(base_url=url) as client:
        auth = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/whoami", headers=auth).json() == {
            "name": "ci-bot", "role": "writer", "datasets": "lab-*"}
        assert client.get("/v1/whoami").status_code == 401  # tokens exist: no open access
        revoked = _run("revoke", "ci-bot", database_url=database_url)
        assert revoked.returncode == 0, revoked.stderr
        assert client.get("/v1/whoami", headers=auth).status_code == 401
    assert "revoked" in _run("list", database_url=database_url).stdout
    assert _run("revoke", "ci-bot", database_url=database_url).returncode == 1


def test_token_create_with_an_expiry(database_url: str) -> None:
    made = _run("create", "--role", "reader", "--name", "temp", "--expires-in", "2h",
                "--create", database_url=database_url)
    assert made.returncode == 0, made.stderr
    assert "expires 20" in made.stdout
    listed = _run("list", database_url=database_url).stdout
    assert "temp\treader\t*\tactive, expires 20" in listed
    bad = _run("create", "--role", "reader", "--name", "t2", "--expires-in", "soon",
               database_url=database_url)
    assert bad.returncode == 2
    assert "not a duration" in bad.stderr
    short = _run("create", "--role", "reader", "--name", "t3", "--expires-in", "5s",
                 database_url=database_url)
    assert short.returncode == 1
    assert "between 60 and" in short.stderr


def test_token_commands_in_the_wrong_directory_make_no_catalog(tmp_path: Path) -> None:
    """In the wrong directory (or with a typo in --data-dir), a token command names where
    it looked, in one line, and leaves no new database behind (no database URL involved:
    run once, not once per database)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINDPIPE_")}
    wrong = tmp_path / "not-the-catalog"
    for args in (("list",), ("revoke", "x"), ("create", "--role", "reader", "--name", "a")):
        out = subprocess.run([*WINDPIPE, "token", *args], cwd=tmp_path, env=env, check=False,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr
        assert "no catalog database at" in out.stderr
        assert str((tmp_path / ".windpipe" / "catalog.db").resolve()) in out.stderr
        listed = subprocess.run([*WINDPIPE, "token", *args, "--data-dir", str(wrong)],
                                env=env, check=False, capture_output=True, text=True,
                                timeout=120)
        assert listed.returncode == 2
        assert str((wrong / "catalog.db").resolve()) in listed.stderr
    assert not (tmp_path / ".windpipe").exists()
    assert not wrong.exists()


def test_token_commands_never_make_a_catalog_unasked(database_url: str) -> None:
    """An empty database (PostgreSQL: it exists, but holds no catalog) is refused like a
    missing one; ``--create`` makes one."""
    empty = _run("list", database_url=database_url)
    assert empty.returncode == 2, empty
    assert "no catalog" in empty.stderr
    assert "--create" in empty.stderr
    made = _run("create", "--role", "reader", "--name", "a", "--create",
                database_url=database_url)
    assert made.returncode == 0, made.stderr
    assert _run("list", database_url=database_url).stdout.split()[:2] == ["a", "reader"]
