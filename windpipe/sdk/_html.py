"""Tiny helpers for notebook reprs (``_repr_html_``) and readable text reprs."""

from __future__ import annotations

import html
import importlib.util
from collections.abc import Iterable
from typing import Any

__all__ = [
    "bar_disabled", "html_table", "human_bytes", "human_count", "progress_bar", "text_table",
]


def human_bytes(n: float | None) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_count(n: float | None) -> str:
    """``1234567`` -> ``'1.23M'``."""
    if n is None:
        return "-"
    value = float(n)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.4g}" if not value.is_integer() else str(int(value))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    return str(value)


def text_table(title: str, rows: Iterable[tuple[str, Any]]) -> str:
    """A two-column aligned text block under ``title``."""
    items = [(k, _cell(v)) for k, v in rows]
    width = max((len(k) for k, _ in items), default=0)
    lines = [title] + [f"  {k.ljust(width)}  {v}" for k, v in items]
    return "\n".join(lines)


def html_table(title: str, rows: Iterable[tuple[str, Any]]) -> str:
    """A two-column HTML table under a bold ``title``."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th>"
        f"<td style='text-align:left'>{html.escape(_cell(v))}</td></tr>"
        for k, v in rows
    )
    return f"<div><b>{html.escape(title)}</b><table>{body}</table></div>"


def progress_bar() -> Any:
    """``tqdm.auto.tqdm`` (a widget in Jupyter), or the text bar when ipywidgets is not
    installed: ``tqdm.auto`` would fall back too, with a warning in every notebook."""
    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm  # noqa: PLC0415

        return tqdm
    from tqdm.auto import tqdm as auto  # noqa: PLC0415

    return auto


def bar_disabled(*, progress: bool | None) -> bool | None:
    """tqdm's ``disable`` for a ``progress`` option: False hides the bar, True draws it,
    None leaves it to tqdm (drawn on a terminal, not in a pipe)."""
    return True if progress is False else None if progress is None else False
