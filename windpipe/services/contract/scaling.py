"""``ScalingSpec``: a column from physical units into model space (SEMANTICS section 6).

The one definition of the map: the Flight server scales every chunk with
:meth:`ScalingSpec.forward`, and users invert model outputs with
:meth:`ScalingSpec.inverse` (numpy arrays and torch tensors alike).
:meth:`ScalingSpec.from_stats` fits one from a split side's statistics
(:class:`windpipe.services.contract.stats.SplitStatsData`): the fitted numbers are fields, so they
are part of a plan's identity and of every cache and tier key that digests the spec.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Self, TypeVar

import numpy as np
from pydantic import Field, model_validator

from windpipe.services.contract.errors import InvalidConfig
from windpipe.services.contract.frozen import Frozen
from windpipe.services.contract.stats import SplitStatsData

__all__ = ["FIT_KINDS", "FitKind", "ScalingSpec", "torch_log1p_or_nan"]

_ArrayT = TypeVar("_ArrayT")
FitKind = Literal["minmax", "standard", "robust"]
FIT_KINDS: tuple[FitKind, ...] = ("minmax", "standard", "robust")


def _unset(value: object) -> bool:
    """A field left None is not written: a spec without the fields added later dumps
    (and digests: plan ids, cache and tier keys) exactly as before they existed."""
    return value is None


class ScalingSpec(Frozen):
    """Maps a column from physical units into model space (SEMANTICS section 6).

    ``linear`` and ``log1p`` map ``[input_min, input_max]`` onto
    ``[output_min, output_max]``; ``standard`` is ``(x - mean) / std`` (bounds and
    ``clip`` do not apply). :meth:`from_stats` fits any of them from a split's
    statistics.
    """

    column: str = Field(min_length=1)
    input_min: float | None = Field(default=None, exclude_if=_unset)
    input_max: float | None = Field(default=None, exclude_if=_unset)
    output_min: float = -1.0
    output_max: float = 1.0
    clip: bool = False
    transform: Literal["linear", "log1p", "standard"] = "linear"
    mean: float | None = Field(default=None, exclude_if=_unset,
                               description="standard only: the fitted mean")
    std: float | None = Field(default=None, exclude_if=_unset,
                              description="standard only: the fitted standard deviation")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.transform == "standard":
            self._check_standard()
            return self
        if self.input_min is None or self.input_max is None:
            msg = (f"scaling of {self.column!r}: {self.transform} needs input_min and "
                   "input_max (or ScalingSpec.from_stats)")
            raise ValueError(msg)
        if self.mean is not None or self.std is not None:
            msg = f"scaling of {self.column!r}: mean and std belong to transform='standard'"
            raise ValueError(msg)
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

    def _check_standard(self) -> None:
        if self.mean is None or self.std is None:
            msg = (f"scaling of {self.column!r}: transform='standard' needs mean and std "
                   "(or ScalingSpec.from_stats(stats, column, kind='standard'))")
            raise ValueError(msg)
        if self.input_min is not None or self.input_max is not None or self.clip \
                or (self.output_min, self.output_max) != (-1.0, 1.0):
            msg = (f"scaling of {self.column!r}: transform='standard' is (x - mean) / std; "
                   "input bounds, output bounds and clip apply to linear and log1p")
            raise ValueError(msg)
        if not (math.isfinite(self.mean) and math.isfinite(self.std)):
            msg = f"scaling of {self.column!r}: mean and std must be finite, got " \
                  f"{(self.mean, self.std)}"
            raise ValueError(msg)
        gain = 1.0 / self.std if self.std > 0.0 else math.inf
        if not (math.isfinite(gain) and gain > 0.0):
            msg = (f"scaling of {self.column!r}: std must be positive (and not so small "
                   f"that 1/std overflows), got {self.std}")
            raise ValueError(msg)

    def _bounds(self) -> tuple[float, float]:
        lo, hi = float(self.input_min or 0.0), float(self.input_max or 0.0)
        if self.transform == "log1p":
            return math.log1p(lo), math.log1p(hi)
        return lo, hi

    @classmethod
    def from_stats(
        cls, stats: SplitStatsData, column: str, *, kind: FitKind = "standard",
        protocol: str | Sequence[str] | None = None, output_min: float = -1.0,
        output_max: float = 1.0,
    ) -> ScalingSpec:
        """The scaling of ``column`` fitted on a split side's statistics.

        ``kind``: ``"minmax"`` (``linear`` from ``[min, max]`` onto
        ``[output_min, output_max]``), ``"standard"`` (``(x - mean) / std``) or
        ``"robust"`` (``linear`` from ``[p1, p99]``, ``clip=True``: the 2 % of outliers
        land on the output bounds). ``protocol``: whose statistics, when several
        protocols have the column (several names pool minmax and standard exactly;
        quantiles do not pool). Raises ``invalid_config`` for a column without finite
        values or a constant one.
        """
        if kind not in FIT_KINDS:
            raise InvalidConfig(f"kind must be one of {list(FIT_KINDS)}, got {kind!r}",
                                details={"kind": kind, "kinds": list(FIT_KINDS)})
        entry = stats.column_stats(column, protocol)
        where = f"column {column!r} ({entry.protocol}) on the {stats.side} side of " \
                f"{stats.split_id}"
        if entry.count == 0 or entry.mean is None or entry.std is None:
            raise InvalidConfig(f"{where} has no finite value: nothing to fit",
                                details={"column": column, "protocol": entry.protocol})
        if kind == "robust" and (entry.p1 is None or entry.p99 is None):
            raise InvalidConfig(f"{where}: robust scaling needs one protocol's quantiles "
                                "(quantiles do not pool): pass protocol='<one name>'",
                                details={"column": column, "protocol": entry.protocol})
        lo, hi = {"minmax": (entry.min, entry.max), "robust": (entry.p1, entry.p99),
                  "standard": (entry.mean - entry.std, entry.mean + entry.std)}[kind]
        if lo is None or hi is None or not lo < hi:
            raise InvalidConfig(
                f"{where} is constant ({kind} bounds {lo} and {hi}): nothing to fit; "
                "leave it unscaled or give the bounds by hand",
                details={"column": column, "protocol": entry.protocol, "kind": kind})
        if kind == "standard":
            return cls(column=column, transform="standard", mean=entry.mean, std=entry.std)
        return cls(column=column, input_min=lo, input_max=hi, output_min=output_min,
                   output_max=output_max, clip=kind == "robust")

    def forward(self, x: _ArrayT) -> _ArrayT:
        """Physical units -> model space; works on numpy arrays and torch tensors.

        The one definition of the map: the Flight server scales every chunk with it.
        Non-finite inputs stay non-finite (NaN stays NaN) and, for ``log1p``, values
        ``<= -1`` come out NaN. Float inputs keep their dtype; others become float64
        (numpy) or float32 (torch).
        """
        if self.transform == "standard":
            return self._standardize(x)
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
        """Model space -> physical units (clipped values map to the clip bounds);
        ``standard``: ``y * std + mean``."""
        if self.transform == "standard":
            mean, std = float(self.mean or 0.0), float(self.std or 1.0)
            if _is_torch(y):
                t_y: Any = y
                return t_y * std + mean  # type: ignore[no-any-return]
            return np.asarray(y) * std + mean  # type: ignore[return-value]
        lo, hi = self._bounds()
        gain = (hi - lo) / (self.output_max - self.output_min)
        if _is_torch(y):
            t: Any = y
            v = lo + (t - self.output_min) * gain
            return (v.expm1() if self.transform == "log1p" else v)  # type: ignore[no-any-return]
        arr = np.asarray(y)
        v_np = lo + (arr - self.output_min) * gain
        return (np.expm1(v_np) if self.transform == "log1p" else v_np)  # type: ignore[return-value]


    def _standardize(self, x: _ArrayT) -> _ArrayT:
        mean, std = float(self.mean or 0.0), float(self.std or 1.0)
        if _is_torch(x):
            t: Any = x
            v = t.to(dtype=t.dtype if t.is_floating_point() else _torch_float())
            return (v - mean) / std  # type: ignore[no-any-return]
        arr = np.asarray(x)
        v_np = arr if np.issubdtype(arr.dtype, np.floating) else arr.astype(np.float64)
        return ((v_np - mean) / std).astype(v_np.dtype, copy=False)  # type: ignore[return-value]


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch")


def _torch_float() -> Any:
    import torch  # noqa: PLC0415 - torch only when a tensor is passed

    return torch.float32


def torch_log1p_or_nan(v: Any) -> Any:
    """``log1p`` that maps ``v <= -1`` to NaN (torch)."""
    import torch  # noqa: PLC0415

    return torch.where(v > -1.0, torch.log1p(v.clamp(min=-1.0 + 1e-7)), torch.nan)
