"""The ``__main__`` guard that ``spawn`` DataLoader workers need, checked in the parent.

A ``spawn`` (or ``forkserver``) worker starts a fresh interpreter and imports the main
script again. A script that starts its DataLoader at module level, outside
``if __name__ == "__main__":``, would have every worker start the training again;
torch then only says that a worker "exited unexpectedly". :func:`check_main_guard`
looks, before any worker starts, at the line of the main script that is running (the
outermost module-level frame of ``__main__``) and raises :class:`InvalidConfig` with
what to change when that line is not inside such a guard. A notebook or an
interactive ``__main__`` (no ``__file__``) is never re-imported, so it passes.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from pathlib import Path
from typing import Any

from windpipe.sdk._exceptions import InvalidConfig

__all__ = ["check_main_guard", "unguarded_main_line"]

_REIMPORTING = ("spawn", "forkserver")


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def unguarded_main_line() -> tuple[str, int] | None:
    """``(path, line)`` of the main script's module-level line now running when it is
    outside every ``if __name__ == "__main__":`` block; None when it is inside one, or
    when ``__main__`` is not a script (a notebook, ``python -c``, the REPL)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py"):
        return None
    line = None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    if line is None:
        return None
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    for node in ast.walk(tree):
        if _is_main_guard(node) and isinstance(node, ast.If) and node.body and (
                node.body[0].lineno <= line <= (node.end_lineno or node.lineno)):
            return None
    return path, line


def _method(context: Any) -> str | None:
    if context is None:
        return multiprocessing.get_start_method(allow_none=True) or None
    if isinstance(context, str):
        return context
    get = getattr(context, "get_start_method", None)
    return str(get()) if callable(get) else None


def check_main_guard(context: Any) -> None:
    """Raise :class:`InvalidConfig` when DataLoader workers started with ``context``
    (a start method name, a multiprocessing context or None: the default) would import
    the main script again and the running line of it is outside the ``__main__`` guard."""
    method = _method(context)
    if method not in _REIMPORTING:
        return
    where = unguarded_main_line()
    if where is None:
        return
    path, line = where
    msg = (f"{path}:{line} starts DataLoader workers with {method!r} outside "
           "`if __name__ == \"__main__\":`. Each such worker imports this script again and "
           "would run its training code itself (torch would only say that a worker "
           "exited unexpectedly): put the training code under "
           "`if __name__ == \"__main__\":` (or in a main() called from there), or use "
           "num_workers=0")
    raise InvalidConfig(msg, details={"path": path, "line": line,
                                      "multiprocessing_context": method})
