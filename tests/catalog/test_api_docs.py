"""``docs/api.md`` documents every REST operation and every error type."""

from __future__ import annotations

from pathlib import Path

from windpipe.catalog.api.app import create_app
from windpipe.services.contract.errors import ERROR_TABLE
from windpipe.services.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_api_doc_lists_every_operation_and_error_type(tmp_path: Path) -> None:
    text = DOC.read_text()
    spec = create_app(Settings(data_dir=tmp_path)).openapi()
    operations = {
        (method.upper(), path, op["operationId"])
        for path, ops in spec["paths"].items() for method, op in ops.items()
    }
    assert len(operations) >= 18
    for method, path, operation_id in operations:
        assert f"`{operation_id}`" in text, f"{method} {path} ({operation_id}) is not documented"
        assert f"`{path}`" in text, f"{method} {path} is not documented"
    for kind, info in ERROR_TABLE.items():
        assert f"| `{kind}` | {info.http_status} |" in text, f"error type {kind} is not documented"


def test_swagger_and_redoc_load_their_assets_from_the_server(catalog_server: str) -> None:
    import httpx  # noqa: PLC0415

    with httpx.Client(base_url=catalog_server, timeout=30) as client:
        for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
            html = client.get(page)
            assert html.status_code == 200
            assert "cdn.jsdelivr.net" not in html.text
            assert "unpkg.com" not in html.text
            src = f"/static-offline-docs/{asset}"
            assert src in html.text
            served = client.get(src)
            assert served.status_code == 200
            assert len(served.content) > 100_000
