"""windpipe: register time-series datasets, split them without leakage, stream windowed batches.

The one documented import::

    from windpipe import Catalog, LoaderConfig, ScalingSpec, ValidationConfig, WindowConfig

Every public name is the SDK's (:mod:`sdk`), loaded on first use so that ``import
windpipe`` alone stays cheap (the CLI's ``--help`` and the servers never pay for the
client, torch or polars). The ``windpipe`` command lives in :mod:`windpipe.cli`.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

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
        Split,
        Unauthenticated,
        Unavailable,
        ValidationConfig,
        WindowConfig,
        WindpipeError,
        WindpipeIterableDataset,
        batch_from_arrow,
        resolve_device,
    )

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
    "Split",
    "Unauthenticated",
    "Unavailable",
    "ValidationConfig",
    "WindowConfig",
    "WindpipeError",
    "WindpipeIterableDataset",
    "__version__",
    "batch_from_arrow",
    "resolve_device",
]
_PUBLIC = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'windpipe' has no attribute {name!r}")
    value = getattr(import_module("sdk"), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
