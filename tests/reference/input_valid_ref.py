"""The reference of ``input_valid`` (SEMANTICS 5b), by plain loops over values read
straight from the files: nothing of ``services`` but the config types.

``input_valid[b, t, c]`` is True iff lane b is real, its input row ``o + t`` exists,
the lane's protocol names channel c, its stream has the column, the value is not null,
NaN or infinite, and its scaled value is finite as float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from windpipe.services.contract.configs import LoaderConfig, ScalingSpec

__all__ = ["reference_input_valid", "scaled_input", "value_is_valid"]


def scaled_input(x: float, spec: ScalingSpec | None) -> float:
    """SEMANTICS 6 written out: the model-space value of ``x`` (NaN for a value a
    transform treats as null; an infinite ``x`` stays infinite)."""
    if spec is None or math.isnan(x) or math.isinf(x):
        return x
    if spec.transform == "standard":
        assert spec.mean is not None
        assert spec.std is not None
        return (x - spec.mean) / spec.std
    assert spec.input_min is not None
    assert spec.input_max is not None
    lo, hi, v = spec.input_min, spec.input_max, x
    if spec.transform == "log1p":
        if x <= -1.0:
            return math.nan
        lo, hi, v = math.log1p(lo), math.log1p(hi), math.log1p(x)
    y = spec.output_min + (v - lo) * (spec.output_max - spec.output_min) / (hi - lo)
    if spec.clip:
        y = min(max(y, min(spec.output_min, spec.output_max)),
                max(spec.output_min, spec.output_max))
    return y


def value_is_valid(x: float, spec: ScalingSpec | None) -> bool:
    """Whether a source value (NaN for null) is a real input once scaled: finite, and
    finite as float32."""
    if not math.isfinite(x):
        return False
    y = scaled_input(x, spec)
    with np.errstate(over="ignore"):
        return math.isfinite(y) and bool(np.isfinite(np.float32(y)))


def reference_input_valid(batch: Any, streams: list[Any], data: list[Mapping[str, np.ndarray]],
                          config: LoaderConfig) -> np.ndarray:
    """``input_valid (B, T, C_in)`` of a reference batch (``tests.reference.schedule_ref``'s
    ``RefBatch``): ``data[s][column]`` is stream ``s``'s column (float64, NaN for null), a
    column absent from it one the stream lacks."""
    in_cols = config.input_columns(batch.protocol)
    out = np.zeros((len(batch.lanes), batch.seq_len, len(in_cols)), dtype=bool)
    for b, lane in enumerate(batch.lanes):
        if lane is None:
            continue
        s, o = lane
        protocol = streams[s].protocol
        for c, col in enumerate(in_cols):
            if col not in config.inputs[protocol] or col not in data[s]:
                continue
            values = data[s][col]
            spec = config.scaling_for(col)
            for t in range(batch.seq_len):
                row = o + t
                if row < streams[s].n_rows:
                    out[b, t, c] = value_is_valid(float(values[row]), spec)
    return out
