"""windpipe SDK: register, split and plan in a notebook; stream torch batches in training.

```python
from windpipe.sdk import Catalog, ValidationConfig, WindowConfig, LoaderConfig, ScalingSpec

cat = Catalog("http://127.0.0.1:8000")
ver = cat.register("demo", root="file:///data/demo", manifest="manifest.parquet")
split = ver.split(ValidationConfig.sample(fraction=0.2, group_by=("set_id", "cell_id")))
plan = split.plan(LoaderConfig(inputs=..., targets=...))
for batch in plan.loader(device="auto"):
    ...
```

See ``docs/sdk.md``. Errors are the tree in ``windpipe.sdk._exceptions``.
``import windpipe.sdk`` needs no torch: registering, splitting, planning and reports work
without it, and what needs it (batches, ``plan.loader``, ``WindpipeIterableDataset``)
imports it on first use (``windpipe.sdk._torch_import``; without torch it raises a
``ModuleNotFoundError`` saying what to install).
"""

from typing import TYPE_CHECKING, Any

from windpipe.sdk._aligned import AlignedBatch
from windpipe.sdk._batch import Batch, BatchSegmentRef, BatchState, batch_from_arrow
from windpipe.sdk._catalog import Catalog
from windpipe.sdk._exceptions import (
    Conflict,
    DataWarning,
    Forbidden,
    InternalError,
    InvalidConfig,
    InvalidManifest,
    InvalidRequest,
    InvalidTicket,
    NotFound,
    RegistrationWarning,
    ResourceExhausted,
    SegmentChanged,
    SegmentError,
    Transient,
    Unauthenticated,
    Unavailable,
    WindpipeError,
)
from windpipe.sdk._handles import DatasetVersion, Plan, Split
from windpipe.sdk._loader import DeviceLoader, resolve_device
from windpipe.sdk._models import DatasetInfo, MlDatasetIndex, PlanReport
from windpipe.sdk._split_stats import SplitStats
from windpipe.sdk._stats import LoaderStats
from windpipe.sdk._torch_import import torch_support
from windpipe.services.contract.configs import (
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

if TYPE_CHECKING:
    from windpipe.sdk._torch import WindpipeIterableDataset

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
    "DeviceOptions",
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
    "SourceOptions",
    "Split",
    "SplitStats",
    "Transient",
    "Unauthenticated",
    "Unavailable",
    "ValidationConfig",
    "WindowConfig",
    "WindpipeError",
    "WindpipeIterableDataset",
    "WorkerOptions",
    "batch_from_arrow",
    "resolve_device",
]


def __getattr__(name: str) -> Any:
    if name == "WindpipeIterableDataset":  # subclasses torch's IterableDataset
        value = torch_support().WindpipeIterableDataset
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sdk' has no attribute {name!r}")
