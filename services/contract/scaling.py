"""``ScalingSpec``: a column from physical units into model space (SEMANTICS section 6).

The one definition of the map: the Flight server scales every chunk with
:meth:`ScalingSpec.forward`, and users invert model outputs with
:meth:`ScalingSpec.inverse` (numpy arrays and torch tensors alike).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Self, TypeVar

import numpy as np
from pydantic import Field, model_validator

from services.contract.frozen import Frozen

__all__ = ["ScalingSpec", "torch_log1p_or_nan"]

_ArrayT = TypeVar("_ArrayT")


class ScalingSpec(Frozen):
    """Maps a column from physical units into model space (SEMANTICS section 6)."""

    column: str = Field(min_length=1)
    input_min: float
    input_max: float
    output_min: float = -1.0
    output_max: float = 1.0
    clip: bool = False
    transform: Literal["linear", "log1p"] = "linear"

    @model_validator(mode="after")
    def _check(self) -> Self:
        bounds = (self.input_min, self.input_max, self.output_min, self.output_max)
        if not all(math.isfinite(b) for b in bounds):
            msg = f"scaling of {self.column!r}: bounds must be finite, got {bounds}"
            raise ValueError(msg)
        if self.input_max == self.input_min:
            msg = f"scaling of {self.column!r}: input_max equals input_min ({self.input_min})"
            raise ValueError(msg)
        if self.output_max == self.output_min:
            msg = f"scaling of {self.column!r}: output_max equals output_min"
            raise ValueError(msg)
        if self.transform == "log1p" and min(self.input_min, self.input_max) <= -1.0:
            msg = f"scaling of {self.column!r}: log1p needs input bounds above -1"
            raise ValueError(msg)
        lo, hi = self._bounds()
        span, out_span = hi - lo, self.output_max - self.output_min
        gain = out_span / span if span else math.inf
        if not (math.isfinite(span) and math.isfinite(out_span) and math.isfinite(gain)
                and gain != 0.0):
            msg = (f"scaling of {self.column!r}: the map from [{lo}, {hi}]"
                   f"{' (after log1p)' if self.transform == 'log1p' else ''} to "
                   f"[{self.output_min}, {self.output_max}] is degenerate in float64 "
                   "(bounds too close together or too far apart)")
            raise ValueError(msg)
        return self

    def _bounds(self) -> tuple[float, float]:
        if self.transform == "log1p":
            return math.log1p(self.input_min), math.log1p(self.input_max)
        return self.input_min, self.input_max

    def forward(self, x: _ArrayT) -> _ArrayT:
        """Physical units -> model space; works on numpy arrays and torch tensors.

        The one definition of the map: the Flight server scales every chunk with it.
        Non-finite inputs stay non-finite (NaN stays NaN) and, for ``log1p``, values
        ``<= -1`` come out NaN. Float inputs keep their dtype; others become float64
        (numpy) or float32 (torch).
        """
        lo, hi = self._bounds()
        out_span = self.output_max - self.output_min
        if _is_torch(x):
            t: Any = x
            v = t.to(dtype=t.dtype if t.is_floating_point() else _torch_float())
            if self.transform == "log1p":
                v = torch_log1p_or_nan(v)
            y = self.output_min + (v - lo) * out_span / (hi - lo)
            if self.clip:
                y = y.clamp(min(self.output_min, self.output_max),
                            max(self.output_min, self.output_max))
            return y  # type: ignore[no-any-return]
        arr = np.asarray(x)
        v_np = arr if np.issubdtype(arr.dtype, np.floating) else arr.astype(np.float64)
        if self.transform == "log1p":
            with np.errstate(invalid="ignore", divide="ignore"):
                v_np = np.where(v_np > -1.0, np.log1p(np.where(v_np > -1.0, v_np, 0.0)), np.nan)
        y_np = (self.output_min + (v_np - lo) * out_span / (hi - lo)).astype(
            v_np.dtype, copy=False)
        if self.clip:
            lo_o, hi_o = sorted((self.output_min, self.output_max))
            y_np = np.clip(y_np, lo_o, hi_o)
        return y_np  # type: ignore[return-value]

    def inverse(self, y: _ArrayT) -> _ArrayT:
        """Model space -> physical units (clipped values map to the clip bounds)."""
        lo, hi = self._bounds()
        gain = (hi - lo) / (self.output_max - self.output_min)
        if _is_torch(y):
            t: Any = y
            v = lo + (t - self.output_min) * gain
            return (v.expm1() if self.transform == "log1p" else v)  # type: ignore[no-any-return]
        arr = np.asarray(y)
        v_np = lo + (arr - self.output_min) * gain
        return (np.expm1(v_np) if self.transform == "log1p" else v_np)  # type: ignore[return-value]


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch")


def _torch_float() -> Any:
    import torch  # noqa: PLC0415 - torch only when a tensor is passed

    return torch.float32


def torch_log1p_or_nan(v: Any) -> Any:
    """``log1p`` that maps ``v <= -1`` to NaN (torch)."""
    import torch  # noqa: PLC0415

    return torch.where(v > -1.0, torch.log1p(v.clamp(min=-1.0 + 1e-7)), torch.nan)
