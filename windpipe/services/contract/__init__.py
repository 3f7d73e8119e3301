"""The windpipe contract: public value types, error vocabulary, wire format."""

from windpipe.services.contract.configs import (
    DEFAULT_ALIGNMENT_KEY,
    DEFAULT_GROUP_BY,
    DEFAULT_GROUP_KEY,
    IDENTITY_COLUMNS,
    DatasetProtocolId,
    DeviceOptions,
    LoaderConfig,
    LoaderOptions,
    PlanSpec,
    ScalingSpec,
    SourceOptions,
    ValidationConfig,
    WindowConfig,
    WorkerOptions,
)
from windpipe.services.contract.errors import ERROR_TABLE, ErrorType, WindpipeError

__all__ = [
    "DEFAULT_ALIGNMENT_KEY",
    "DEFAULT_GROUP_BY",
    "DEFAULT_GROUP_KEY",
    "ERROR_TABLE",
    "IDENTITY_COLUMNS",
    "DatasetProtocolId",
    "DeviceOptions",
    "ErrorType",
    "LoaderConfig",
    "LoaderOptions",
    "PlanSpec",
    "ScalingSpec",
    "SourceOptions",
    "ValidationConfig",
    "WindowConfig",
    "WindpipeError",
    "WorkerOptions",
]
