"""A JSON request body read the way FastAPI reads one, off the event loop.

FastAPI decodes a declared body (``json.loads``) and validates it on the event loop,
before the endpoint runs. A registration of a few hundred thousand inline rows (tens of
MiB) spends seconds there, and every other call, ``/healthz`` included, waits. A route
of a :class:`JsonBodyRoute` class reads its body itself: the route decodes it in a worker
thread (:func:`decode_json`) where FastAPI decodes a declared one, before the
dependencies, and the endpoint, which declares no body, validates it in a worker thread
too (:func:`decoded_body`). The answers are FastAPI's: the same ``json_invalid`` error
(``body.<offset>``), the same 400 for bytes that decode to no text, the same ``missing``
error for an empty body, raw bytes (refused by the model) unless the content type is
``application/json`` or ``*+json``, pydantic's errors with ``body`` before each
location, and, when FastAPI refuses the path before the endpoint runs, the body's
errors listed after the path's.

A worker thread still shares the GIL. ``json.loads`` is one C call that would hold it
for the whole body; with an ``object_hook`` it calls back into Python once per object,
and there the thread gives the GIL up to the event loop when it asks (every 5 ms). For
the same reason a body done with is emptied a slice at a time (:func:`release`).

FastAPI leaves an undeclared body out of ``/openapi.json``: :func:`json_body_openapi` is
the route's ``openapi_extra`` (the ``requestBody`` FastAPI writes for a declared one) and
:func:`document_json_bodies` adds the models' schemas to the document's components, as
FastAPI generates them.
"""

from __future__ import annotations

import copy
import email.message
import functools
import inspect
import json
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Final, TypeVar

import anyio.to_thread
from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

__all__ = [
    "NO_BODY",
    "JsonBodyRoute",
    "decode_json",
    "decoded_body",
    "document_json_bodies",
    "json_body_openapi",
    "release",
    "take_json_body",
    "validate_json",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

_SLICE = 2048
_DECODED = "windpipe.json_body"
NO_BODY: Final = object()
"""What :func:`decode_json` returns for an empty body (FastAPI's "missing")."""


def _is_json(content_type: str | None) -> bool:
    """FastAPI's test: ``application/json`` or ``application/*+json`` (parameters
    allowed); no content type is not JSON."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def decode_json(raw: bytes, *, content_type: str | None) -> Any:
    """``raw`` decoded as FastAPI would (:data:`NO_BODY` when empty, the bytes themselves
    unless the content type is JSON); a ``RequestValidationError`` (``json_invalid``) for
    bad JSON, an ``HTTPException`` (400) for bytes that decode to no text."""
    if not raw:
        return NO_BODY
    if not _is_json(content_type):
        return raw
    try:
        return json.loads(raw, object_hook=_same)
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{
            "type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
            "input": {}, "ctx": {"error": exc.msg},
        }]) from exc
    except Exception as exc:  # FastAPI's answer to any other failure
        raise HTTPException(status_code=400,
                            detail="There was an error parsing the body") from exc


def validate_json(model: type[ModelT], value: Any) -> ModelT:
    """``value`` (from :func:`decode_json`) as ``model``, validated as FastAPI validates a
    required body; a ``RequestValidationError`` with pydantic's errors under ``body``."""
    if value is NO_BODY:
        raise RequestValidationError([{
            "type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        raise RequestValidationError([
            {**error, "loc": ("body", *error["loc"])}
            for error in exc.errors(include_url=False)]) from None


def release(value: Any) -> None:
    """Empty ``value`` (a list, or a decoded object's lists) a slice at a time, when it
    is done with: freed at once, hundreds of thousands of rows hold the GIL for
    50-100 ms, wherever their last reference goes."""
    if isinstance(value, dict):
        for item in value.values():
            release(item)
    elif isinstance(value, list):
        while value:
            del value[-_SLICE:]


def _validated(model: type[ModelT], value: Any) -> ModelT:
    try:
        return validate_json(model, value)
    finally:
        release(value)


def take_json_body(request: Request) -> Any:
    """The body the request's :class:`JsonBodyRoute` decoded (the request keeps no
    reference to it): for :func:`validate_json`, in a worker thread."""
    return request.scope.pop(_DECODED)


async def decoded_body(request: Request, model: type[ModelT]) -> ModelT:
    """The body the request's :class:`JsonBodyRoute` decoded, validated as ``model`` in
    a worker thread."""
    return await anyio.to_thread.run_sync(_validated, model, take_json_body(request))


class JsonBodyRoute(APIRoute):
    """A route whose JSON body (a ``body_model``: subclass to name it) is decoded in a
    worker thread before FastAPI's handler runs; its endpoint declares no body and takes
    it with :func:`decoded_body` (or :func:`take_json_body`)."""

    body_model: ClassVar[type[BaseModel]]

    def read_json(self, request: Request, body: bytes) -> Any:
        """``body`` decoded (in a worker thread)."""
        return decode_json(body, content_type=request.headers.get("content-type"))

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler behind the decoding (the body is read once: Starlette
        keeps it for the handler)."""
        handler = super().get_route_handler()

        async def decoded(request: Request) -> Response:
            request.scope[_DECODED] = await anyio.to_thread.run_sync(
                self.read_json, request, await request.body())
            try:
                return await handler(request)
            except RequestValidationError as exc:
                if _DECODED not in request.scope:  # the endpoint's own: it took the body
                    raise
                try:
                    await decoded_body(request, self.body_model)
                except RequestValidationError as body:
                    raise RequestValidationError([*exc.errors(), *body.errors()]) from None
                raise
            finally:
                request.scope.pop(_DECODED, None)

        return decoded


@functools.cache
def _declared(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI document FastAPI writes for one route that declares ``model`` as its
    body."""
    def endpoint(body: Any) -> None:
        del body

    signature = inspect.Signature([inspect.Parameter(
        "body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=model)],
        return_annotation=None)
    endpoint.__signature__ = signature  # type: ignore[attr-defined]
    router = APIRouter()
    router.add_api_route("/", endpoint, methods=["POST"])
    return get_openapi(title="body", version="0", routes=router.routes)


def json_body_openapi(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra`` for a required JSON body of ``model``: the
    ``requestBody`` FastAPI writes when the endpoint declares it."""
    return {"requestBody": copy.deepcopy(_declared(model)["paths"]["/"]["post"]["requestBody"])}


def document_json_bodies(app: FastAPI, *models: type[BaseModel]) -> None:
    """Have ``app.openapi()`` hold each model's schemas (and those they refer to) in its
    components, as for a declared body."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            for name, schema in _declared(model)["components"]["schemas"].items():
                schemas.setdefault(name, copy.deepcopy(schema))
        document["components"]["schemas"] = dict(sorted(schemas.items()))
        return document

    app.openapi = openapi  # type: ignore[method-assign]
