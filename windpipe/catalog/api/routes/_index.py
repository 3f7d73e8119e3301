"""An index frame as a JSON page or a whole Arrow IPC stream (shared by versions and
splits): the query both index routes take (:data:`IndexQuery`), their documented
answers (:data:`INDEX_RESPONSES`) and the answer itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import polars as pl
import polars.selectors as cs
from fastapi import Depends, Response
from fastapi.responses import JSONResponse

from windpipe.catalog.api.deps import PageSize, PageToken
from windpipe.catalog.api.routes.common import next_offset_token, page_offset
from windpipe.catalog.api.schemas import DEFAULT_PAGE_SIZE
from windpipe.catalog.index import index_to_arrow_ipc

__all__ = ["ARROW_STREAM", "INDEX_RESPONSES", "IndexFormat", "IndexPage", "IndexQuery"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
IndexFormat = Literal["json", "arrow"]
INDEX_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "JSON page of index rows, or the Arrow IPC stream with format=arrow",
        "content": {ARROW_STREAM: {}},
    }
}


@dataclass(frozen=True)
class IndexPage:
    """What an index route was asked for: the format, and for JSON the page."""

    format: IndexFormat
    page_size: int
    page_token: str | None

    def answer(self, frame: pl.DataFrame) -> Response:
        """``frame`` (the whole index) as asked: Arrow IPC, or ``{"items",
        "next_page_token"}`` (rows in index order; NaN as null)."""
        if self.format == "arrow":
            return Response(content=index_to_arrow_ipc(frame), media_type=ARROW_STREAM)
        start = min(page_offset(self.page_token), frame.height)  # past the end: empty, last
        end = min(start + self.page_size, frame.height)
        page = frame.slice(start, end - start).with_columns(cs.float().fill_nan(None))
        return JSONResponse({"items": page.to_dicts(),
                             "next_page_token": next_offset_token(end, frame.height)})


def _index_page(format: IndexFormat = "json", page_size: PageSize = DEFAULT_PAGE_SIZE,
                page_token: PageToken = None) -> IndexPage:
    return IndexPage(format=format, page_size=page_size, page_token=page_token)


IndexQuery = Annotated[IndexPage, Depends(_index_page)]
