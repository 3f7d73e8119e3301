"""An index frame as a JSON page or a whole Arrow IPC stream (shared by versions and splits)."""

from __future__ import annotations

from typing import Literal

import polars as pl
import polars.selectors as cs
from fastapi import Response
from fastapi.responses import JSONResponse

from catalog.index import index_to_arrow_ipc
from catalog.repository import decode_page_token, encode_page_token

__all__ = ["ARROW_STREAM", "IndexFormat", "index_response"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
IndexFormat = Literal["json", "arrow"]


def index_response(
    frame: pl.DataFrame, *, fmt: IndexFormat, page_size: int, page_token: str | None
) -> Response:
    """``{"items", "next_page_token"}`` (rows in index order; NaN as null) or Arrow IPC."""
    if fmt == "arrow":
        return Response(content=index_to_arrow_ipc(frame), media_type=ARROW_STREAM)
    key = decode_page_token(page_token, shape=(int,))  # a bounded int (0 .. 2**63-1)
    start = min(key[0], frame.height) if key else 0  # past the end: an empty last page
    end = min(start + page_size, frame.height)
    token = encode_page_token([end]) if end < frame.height else None
    page = frame.slice(start, end - start).with_columns(cs.float().fill_nan(None))
    return JSONResponse({"items": page.to_dicts(), "next_page_token": token})
