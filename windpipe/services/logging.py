"""One log format for everything a windpipe process logs, quiet unless configured.

windpipe's own events are structlog events; uvicorn, alembic and any other library
log through the standard library. Both end in the standard library's ``logging``:

* unconfigured (a notebook, a script, the test fixtures, ``windpipe demo``: servers
  started in the process of someone who did not ask for logs) a windpipe event is
  rendered by structlog into one line and handed to its standard-library logger,
  which prints nothing below WARNING (Python's last-resort handler, or whatever
  handlers the application set up), so an INFO line never lands between a
  notebook's outputs;
* :func:`configure_logging` (``windpipe serve``) installs one handler on the root
  logger whose formatter renders structlog events and every library's records alike
  (``structlog.stdlib.ProcessorFormatter``): the same timestamp, level and logger
  columns, or one JSON object per line, for windpipe, uvicorn and alembic.

The catalog's uvicorn server is started without uvicorn's own logging setup
(``log_config=None``), so its lines take this path too. With tracing on
(:mod:`windpipe.services.tracing`) a line written inside a span carries its
``trace_id`` and ``span_id``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from windpipe.services.tracing import add_trace_ids

__all__ = ["configure_logging", "get_logger", "shared_processors"]

_HANDLER_NAME = "windpipe"
# libraries whose loggers may have been given handlers of their own (uvicorn's default
# config does so): they are routed to the root handler instead
_LIBRARY_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "alembic")


def _one_line(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """An event message on one line (alembic logs revision docstrings with newlines)."""
    text = event.get("event")
    if isinstance(text, str) and "\n" in text:
        event["event"] = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return event


def shared_processors() -> list[Any]:
    """What every line gets, windpipe's events and other libraries' records alike."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        _one_line,
        add_trace_ids,  # the current span's ids, with tracing on (services.tracing)
    ]


def _renderer(*, json: bool) -> Any:
    if json:
        return structlog.processors.JSONRenderer()
    # a plain traceback: structlog's default draws it with rich, every frame's locals
    # included, which costs seconds of CPU per logged exception (a server stopping with
    # a request's body pending waited on one for most of a minute on a busy machine)
    return structlog.dev.ConsoleRenderer(colors=False,
                                         exception_formatter=structlog.dev.plain_traceback)


def _configure_structlog(final: Any) -> None:
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared_processors(), final],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def _configure_default() -> None:
    """Events rendered to one line and handed to the standard library (quiet below
    WARNING unless the application configured logging)."""
    _configure_structlog(_renderer(json=False))


def configure_logging(*, level: str = "INFO", json: bool = False) -> None:
    """Route windpipe's events and every library's records (uvicorn, alembic) through
    one formatter on stderr at ``level`` (``json``: one JSON object per line)."""
    _configure_structlog(structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    _renderer(json=json)],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in _LIBRARY_LOGGERS:
        lib = logging.getLogger(name)
        lib.handlers.clear()
        lib.propagate = True
    # alembic announces each of its plugins at INFO on every start: only when debugging
    logging.getLogger("alembic.runtime.plugins").setLevel(
        logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A named structured logger (quiet below WARNING until :func:`configure_logging`)."""
    if not structlog.is_configured():
        _configure_default()
    return structlog.get_logger(name)  # type: ignore[no-any-return]
