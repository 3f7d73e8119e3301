"""windpipe: register time-series datasets, split them without leakage, stream windowed batches.

The one documented import::

    from windpipe import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig

Every public name is the SDK's (:mod:`sdk`), loaded on first use so that ``import
windpipe`` alone stays cheap (the CLI's ``--help`` and the servers never pay for the
client, torch or polars), and ``embedded`` (:mod:`windpipe._embedded`: a ``Catalog``
whose catalog runs in this process, no server; it needs ``windpipe[server]``). The
``windpipe`` command lives in :mod:`windpipe.cli`.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

import services  # noqa: F401  (first: sets Arrow's allocator options, services.runtime)

if TYPE_CHECKING:
    from sdk import (
        AlignedBatch,
        Batch,
        BatchSegmentRef,
        BatchState,
        Catalog,
        Conflict,
        DatasetInfo,
        DatasetProtocolId,
        DatasetVersion,
        DataWarning,
        DeviceLoader,
        Forbidden,
        InternalError,
        InvalidConfig,
        InvalidManifest,
        InvalidRequest,
        InvalidTicket,
        LoaderConfig,
        LoaderOptions,
        LoaderStats,
        MlDatasetIndex,
        NotFound,
        Plan,
        PlanReport,
        PlanSpec,
        RegistrationWarning,
        ResourceExhausted,
        ScalingSpec,
        SegmentChanged,
        SegmentError,
        Transient,
        Split,
        SplitStats,
        Unauthenticated,
        Unavailable,
        ValidationConfig,
        WindowConfig,
        WindpipeError,
        WindpipeIterableDataset,
        batch_from_arrow,
        resolve_device,
    )
    from windpipe._embedded import embedded

try:
    __version__ = metadata.version("windpipe")
except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"

__all__ = [
    "AlignedBatch",
    "Batch",
    "BatchSegmentRef",
    "BatchState",
    "Catalog",
    "Conflict",
    "DataWarning",
    "DatasetInfo",
    "DatasetProtocolId",
    "DatasetVersion",
    "DeviceLoader",
    "Forbidden",
    "InternalError",
    "InvalidConfig",
    "InvalidManifest",
    "InvalidRequest",
    "InvalidTicket",
    "LoaderConfig",
    "LoaderOptions",
    "LoaderStats",
    "MlDatasetIndex",
    "NotFound",
    "Plan",
    "PlanReport",
    "PlanSpec",
    "RegistrationWarning",
    "ResourceExhausted",
    "ScalingSpec",
    "SegmentChanged",
    "SegmentError",
    "Transient",
    "Split",
    "SplitStats",
    "Unauthenticated",
    "Unavailable",
    "ValidationConfig",
    "WindowConfig",
    "WindpipeError",
    "WindpipeIterableDataset",
    "__version__",
    "batch_from_arrow",
    "embedded",
    "resolve_device",
]
_PUBLIC = frozenset(__all__) - {"__version__"}
_HOMES = {"embedded": "windpipe._embedded"}  # the rest are the SDK's
_SERVER_PACKAGES = frozenset({"alembic", "fastapi", "fastapi_offline", "sqlalchemy"})


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'windpipe' has no attribute {name!r}")
    try:
        module = import_module(_HOMES.get(name, "sdk"))
    except ModuleNotFoundError as exc:
        if name not in _HOMES or exc.name not in _SERVER_PACKAGES:
            raise
        msg = (f"windpipe.{name} runs the catalog in this process and needs its packages "
               f"({exc.name} is missing): pip install 'windpipe[server]'")
        raise ModuleNotFoundError(msg, name=exc.name) from exc
    value = getattr(module, name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
