"""How to install one of windpipe's optional extras, in every message that asks for one.

windpipe installs from a checkout of its repository today (it is not on a package index
yet), so a message naming only ``pip install 'windpipe[plot]'`` sends a user to a
command that fails. Every such message takes its text from :func:`install_hint`.
"""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """The commands that install the optional extra ``extra`` (``torch``, ``jax``, ``plot``,
    ``ingest``, ``server``): from a checkout, and once published."""
    return (f"pip install -e '.[{extra}]' in a checkout of the windpipe repository "
            f"(pip install 'windpipe[{extra}]' once it is published)")
