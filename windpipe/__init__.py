"""windpipe: register time-series datasets, split them without leakage, stream windowed batches.

The one documented import::

    from windpipe import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig

Every public name is the SDK's (:mod:`windpipe.sdk`), loaded on first use so that ``import
windpipe`` alone stays cheap (the CLI's ``--help`` and the servers never pay for the
client, torch or polars), and ``embedded`` (:mod:`windpipe._embedded`: a ``Catalog``
whose catalog runs in this process, no server; it needs ``windpipe[server]``). The
list of names is ``sdk.__all__``'s: ``__all__`` here is made from it on first use, and
type checkers read it through ``from windpipe.sdk import *``. The ``windpipe`` command lives in
:mod:`windpipe.cli`.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

from windpipe.services.contract.extras import install_hint as _install_hint

if TYPE_CHECKING:  # what type checkers see: every name of sdk.__all__, and ours
    from windpipe._embedded import embedded as embedded
    from windpipe.sdk import *  # noqa: F403

try:
    __version__ = metadata.version("windpipe")
except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"

_OWN = {"embedded": "windpipe._embedded"}  # the public names that are not the SDK's
_SERVER_PACKAGES = frozenset({"alembic", "fastapi", "fastapi_offline", "sqlalchemy"})


def _sdk_names() -> list[str]:
    """``sdk.__all__``, the list of the SDK's public names (importing the SDK)."""
    names: list[str] = import_module("windpipe.sdk").__all__
    return names


def _own(name: str) -> Any:
    try:
        module = import_module(_OWN[name])
    except ModuleNotFoundError as exc:
        if exc.name not in _SERVER_PACKAGES:
            raise
        msg = (f"windpipe.{name} runs the catalog in this process and needs its packages "
               f"({exc.name} is missing): {_install_hint('server')}")
        raise ModuleNotFoundError(msg, name=exc.name) from exc
    return getattr(module, name)


def __getattr__(name: str) -> Any:
    """The public names on first use: ``__all__`` (``sdk.__all__``, ``embedded`` and
    ``__version__``), the SDK's names and ours."""
    if name == "__all__":
        value: Any = [*_sdk_names(), *_OWN, "__version__"]
    elif name in _OWN:
        value = _own(name)
    elif not name.startswith("_") and name in _sdk_names():
        value = getattr(import_module("windpipe.sdk"), name)
    else:
        raise AttributeError(f"module 'windpipe' has no attribute {name!r}")
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_sdk_names(), *_OWN})
