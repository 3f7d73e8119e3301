"""torch, imported when a batch first needs it: the SDK itself imports without torch.

Registering, splitting, planning and reports need no torch (a plain ``pip install
windpipe`` has none); batches as tensors, the device loader and the torch dataset do.
The SDK's modules name ``torch`` through :data:`torch` here, a stand-in that imports
the real module on its first attribute access and raises :class:`TorchMissing`
(a ``ModuleNotFoundError``) saying what to install when it cannot. Type checkers see
the real module. :func:`torch_support` loads ``windpipe.sdk._torch``, whose classes subclass
torch's and so need torch to be defined at all.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from windpipe.services.contract.extras import install_hint

__all__ = ["PIN_MEMORY_NEEDS_CUDA", "TORCH_HINT", "TorchMissing", "require_torch", "torch",
           "torch_support"]

TORCH_HINT = ("windpipe's torch batches need torch: install your torch build, or "
              f"{install_hint('torch')}")
# batch.pin_memory(), plan.loader(pin_memory=True) on a machine without CUDA
PIN_MEMORY_NEEDS_CUDA = (
    "pin_memory needs CUDA: page-locked memory only speeds up copies to a GPU, and this "
    "machine has none (torch.cuda.is_available() is False); leave pin_memory unset (None: "
    "on with CUDA, off without) and use batch.to(device), which works on either")


class TorchMissing(ModuleNotFoundError):  # noqa: N818 - an ImportError, named as one
    """torch cannot be imported, and what was asked for needs it."""


def require_torch() -> ModuleType:
    """The torch module, or :class:`TorchMissing` saying how to install it."""
    loaded = sys.modules.get("torch")
    if loaded is not None:  # imported already: every pass asks (importlib costs ~10 us)
        return loaded
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise TorchMissing(f"{TORCH_HINT} ({exc})", name="torch") from exc


def torch_support() -> ModuleType:
    """``windpipe.sdk._torch`` (``WindpipeIterableDataset``, ``WindpipeDataLoader``, ...), imported
    on first use: its classes subclass torch's."""
    require_torch()
    return importlib.import_module("windpipe.sdk._torch")


class _LazyTorch:
    """Stands for the torch module; each attribute is looked up once, then kept."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__version__":
            raise AttributeError(name)  # introspection (inspect, doctest) needs no torch
        value = getattr(require_torch(), name)
        self.__dict__[name] = value  # later lookups skip __getattr__
        return value

    def __repr__(self) -> str:
        return "<torch, imported on first use>"


if TYPE_CHECKING:
    import torch
else:
    torch = _LazyTorch()
