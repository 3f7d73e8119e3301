"""``Catalog()`` takes the URL and token from ``WINDPIPE_URL`` / ``WINDPIPE_TOKEN``:
arguments win, the variable's token goes only to the variable's URL, and
with no URL at all the error says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.servers import run_catalog_server
from windpipe.sdk import Catalog, InvalidConfig, Unauthenticated
from windpipe.services.settings import Settings

TOKEN = "env-token-for-the-test"


@pytest.fixture
def url(tmp_path: Path) -> str:
    settings = Settings(data_dir=tmp_path / "catalog", admin_token=TOKEN, log_level="WARNING")
    with run_catalog_server(settings) as base:
        yield base


def test_the_url_and_token_come_from_the_environment(url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WINDPIPE_URL", url + "/")
    monkeypatch.setenv("WINDPIPE_TOKEN", TOKEN)
    with Catalog() as cat:
        assert cat.url == url
        assert cat.datasets() == []  # the token was sent
    with Catalog(url) as cat:  # the variable's URL given by hand: its token still goes
        assert cat.datasets() == []
    with Catalog(token="not-the-token") as cat, pytest.raises(Unauthenticated):
        cat.datasets()  # an argument wins over its variable


def test_the_variables_token_never_goes_to_another_catalog(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WINDPIPE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WINDPIPE_TOKEN", TOKEN)
    with Catalog(url) as cat, pytest.raises(Unauthenticated):
        cat.datasets()
    with Catalog(url, token=TOKEN) as cat:
        assert cat.datasets() == []


def test_no_url_anywhere_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WINDPIPE_URL", raising=False)
    monkeypatch.setenv("WINDPIPE_TOKEN", TOKEN)
    with pytest.raises(InvalidConfig, match=r"WINDPIPE_URL.*windpipe\.embedded\("):
        Catalog()
