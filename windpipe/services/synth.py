"""A deterministic synthetic battery dataset (demos, tests, benchmarks).

Cells (spread over ``sets``) age over ``cycles`` cycles. Every cycle has a
``cycling`` stream (CC-CV charge, rest, dynamic discharge, rest); every
``hppc_every``-th cycle (default 5, from 0) an ``hppc`` stream (discharge/charge
pulses at SOC 90..10 %); every ``eis_every``-th cycle (default 2) an ``eis``
spectrum (40-60 points of R0 + (R1||C1) + Warburg + lead inductance; resistances
grow and capacity fades with the cycle index).
Current is positive on charge. Float columns are float32 (``time_s`` float64),
written without dictionary encoding; some values are null (NaN in zarr).

With ``missing_channel`` and ``missing_cells``, the last ``missing_cells`` cells
have no such sensor: their cycling and hppc segments lack that column (a real
collection's cell without a thermocouple). With ``missed_tests`` each scheduled hppc
or eis test is left out with that probability (a lab that skipped a check-up), so
those protocols cover an irregular subset of cycles.

Streams are split over 2-3 segments with probability ``split_fraction`` and each
segment is a zarr v3 group with probability ``zarr_fraction``, else parquet. The
root holds ``manifest.parquet`` and ``dataset.json``. Every random draw is a pure
function of ``(seed, what, identity)``: the same arguments give byte-identical files.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr
import zarr.storage

from windpipe.services.contract.identity import rng_for

__all__ = ["PROTOCOL_COLUMNS", "UNITS", "SynthResult", "write_synthetic_dataset"]

PROTOCOL_COLUMNS: dict[str, tuple[str, ...]] = {
    "cycling": ("time_s", "dt_s", "current_a", "voltage_v", "temperature_c", "soc_pct"),
    "hppc": ("time_s", "dt_s", "current_a", "voltage_v", "temperature_c", "soc_pct"),
    "eis": ("freq_hz", "z_real_ohm", "z_imag_ohm"),
}
UNITS: dict[str, str] = {
    "time_s": "s", "dt_s": "s", "current_a": "A", "voltage_v": "V", "temperature_c": "degC",
    "soc_pct": "%", "freq_hz": "Hz", "z_real_ohm": "ohm", "z_imag_ohm": "ohm",
}
_NULLABLE = {"current_a", "voltage_v", "temperature_c", "z_real_ohm", "z_imag_ohm"}
_FLOAT64 = {"time_s"}
_CHEMISTRY: dict[str, dict[str, float]] = {
    "nmc": {"v_lo": 3.0, "v_hi": 4.2, "cap": 3.0, "r0": 0.030, "curv": 0.06},
    "lfp": {"v_lo": 2.5, "v_hi": 3.6, "cap": 2.5, "r0": 0.022, "curv": 0.03},
    "nca": {"v_lo": 2.8, "v_hi": 4.2, "cap": 3.4, "r0": 0.035, "curv": 0.07},
}
_AMBIENTS = (25.0, 35.0, 45.0, 15.0)


@dataclass(frozen=True, slots=True)
class SynthResult:
    """Where the dataset went and how big it is."""

    path: Path
    manifest_path: Path
    n_rows: int
    n_segments: int


@dataclass(frozen=True, slots=True)
class _Cell:
    set_id: str
    cell_id: str
    chemistry: str
    capacity_ah: float
    ambient_c: float
    r0: float
    fade: float
    growth: float


def _cell(seed: int, index: int, sets: int) -> _Cell:
    rng = rng_for(seed, "cell", index)
    chem = ("nmc", "lfp", "nca")[int(rng.integers(0, 3))]
    params = _CHEMISTRY[chem]
    set_idx = index % sets
    return _Cell(
        set_id=f"set_{set_idx:02d}",
        cell_id=f"cell_{index:03d}",
        chemistry=chem,
        capacity_ah=float(params["cap"]),
        ambient_c=_AMBIENTS[set_idx % len(_AMBIENTS)],
        r0=float(params["r0"] * rng.uniform(0.9, 1.1)),
        fade=float(rng.uniform(0.0008, 0.002)),
        growth=float(rng.uniform(0.003, 0.008)),
    )


def _ocv(cell: _Cell, soc: np.ndarray) -> np.ndarray:
    p = _CHEMISTRY[cell.chemistry]
    s = np.clip(soc, 0.005, 0.995)
    if cell.chemistry == "lfp":
        base = 3.3 + 0.06 * (s - 0.5)
    else:
        base = p["v_lo"] + 0.2 + (p["v_hi"] - p["v_lo"] - 0.35) * (0.75 * s + 0.25 * s**3)
    return base + p["curv"] * np.log(s / (1.0 - s))


def _smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Causal moving average over ``window`` rows (O(n))."""
    if window <= 1 or x.size == 0:
        return x
    c = np.cumsum(x)
    out = c.copy()
    out[window:] = c[window:] - c[:-window]
    return out / np.minimum(np.arange(1, x.size + 1), window)


def _split_rows(n: int, fractions: tuple[float, ...]) -> list[int]:
    counts = [max(1, int(n * f)) for f in fractions]
    counts[-1] = max(1, n - sum(counts[:-1]))
    return counts


def _electrical(
    cell: _Cell, cidx: int, current: np.ndarray, dt: np.ndarray, *, soc0: float,
    rng: np.random.Generator, cv_mask: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Voltage, temperature and SOC for a current profile (A, positive on charge)."""
    capacity = cell.capacity_ah * (1.0 - cell.fade * cidx**0.9)
    r0 = cell.r0 * (1.0 + cell.growth * cidx)
    r1 = 0.6 * r0
    n = current.size
    soc = soc0 + np.cumsum(current * dt) / (capacity * 3600.0)
    volt = _ocv(cell, soc) + current * r0 + r1 * _smooth(current, max(1, n // 60))
    p = _CHEMISTRY[cell.chemistry]
    if cv_mask is not None:
        volt = np.where(cv_mask, p["v_hi"], volt)
    volt = np.clip(volt, p["v_lo"] - 0.3, p["v_hi"] + 0.15) + rng.normal(0.0, 0.001, n)
    heat = current**2 * (r0 + r1)
    temp = cell.ambient_c + 6.0 * _smooth(heat, max(1, n // 12)) + rng.normal(0.0, 0.05, n)
    time = np.cumsum(dt) - dt[0]
    return {
        "time_s": time, "dt_s": dt, "current_a": current + rng.normal(0.0, 0.002, n),
        "voltage_v": volt, "temperature_c": temp, "soc_pct": 100.0 * soc,
    }


def _cycling(cell: _Cell, cidx: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cc, cv, rest1, dis, rest2 = _split_rows(n, (0.35, 0.15, 0.05, 0.40, 0.05))
    q = cell.capacity_ah
    u_cv = np.linspace(0.0, 1.0, cv, endpoint=False)
    u_dis = np.linspace(0.0, 1.0, dis, endpoint=False)
    blocks = rng.uniform(-0.25, 0.6, size=max(1, dis // 8 + 1))
    pulses = np.repeat(blocks, 8)[:dis]
    dynamic = -q * np.clip(0.55 + 0.3 * np.sin(2 * np.pi * 7.0 * u_dis) + pulses, 0.05, 2.0)
    cur_cc = np.full(cc, 0.5 * q)
    cur_cv = 0.5 * q * np.exp(-3.0 * u_cv)
    soc0 = 0.08 + 0.04 * float(rng.random())
    # each phase's sampling interval moves the SOC by the intended amount
    dts = [
        0.68 * q * 3600.0 / cur_cc.sum(),
        0.17 * q * 3600.0 / cur_cv.sum(),
        600.0 / rest1,
        0.88 * q * 3600.0 / -dynamic.sum(),
        600.0 / rest2,
    ]
    current = np.concatenate([cur_cc, cur_cv, np.zeros(rest1), dynamic, np.zeros(rest2)])
    dt = np.repeat(np.array(dts), [cc, cv, rest1, dis, rest2])
    cv_mask = np.zeros(n, dtype=bool)
    cv_mask[cc : cc + cv] = True
    return _electrical(cell, cidx, current, dt, soc0=soc0, rng=rng, cv_mask=cv_mask)


def _hppc(cell: _Cell, cidx: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    q = cell.capacity_ah
    levels = 5
    per_level = _split_rows(n, (1.0 / levels,) * levels)
    counts: list[int] = []
    currents: list[float] = []
    dts: list[float] = []
    for i, rows in enumerate(per_level):
        phases = _split_rows(rows, (0.15, 0.15, 0.2, 0.15, 0.1, 0.25))
        last = i == levels - 1
        plan = [(0.0, 60.0), (-1.0 * q, 10.0), (0.0, 40.0), (0.75 * q, 10.0), (0.0, 60.0),
                (0.0 if last else -0.5 * q, 600.0 if last else 0.2 * 3600.0 / 0.5)]
        for rows_k, (amps, seconds) in zip(phases, plan, strict=True):
            counts.append(rows_k)
            currents.append(amps)
            dts.append(seconds / rows_k)
    current = np.repeat(np.array(currents), counts)
    dt = np.repeat(np.array(dts), counts)
    return _electrical(cell, cidx, current, dt, soc0=0.9 + 0.01 * float(rng.random()), rng=rng)


def _eis(cell: _Cell, cidx: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = int(rng.integers(40, 61))
    freq = np.logspace(4.0, -2.0, n)
    omega = 2 * np.pi * freq
    r0 = cell.r0 * (1.0 + cell.growth * cidx)
    r1 = 0.5 * r0 * (1.0 + 1.5 * cell.growth * cidx)
    c1 = 1.5
    sigma = 0.004 * (1.0 + 0.01 * cidx)
    z = (r0 + r1 / (1.0 + 1j * omega * r1 * c1) + sigma * (1.0 - 1j) / np.sqrt(omega)
         + 1j * omega * 8e-8)
    noise = 1.0 + rng.normal(0.0, 0.002, (2, n))
    return {"freq_hz": freq, "z_real_ohm": z.real * noise[0], "z_imag_ohm": z.imag * noise[1]}


def _missed(seed: int, share: float, protocol: str, ident: tuple[Any, ...]) -> bool:
    """Whether the scheduled ``protocol`` test of ``ident`` was skipped (probability ``share``)."""
    return share > 0 and bool(rng_for(seed, "missed", *ident, protocol).random() < share)


def _pieces(n: int, rng: np.random.Generator, split_fraction: float) -> list[tuple[int, int]]:
    if n >= 8 and rng.random() < split_fraction:
        k = int(rng.integers(2, 4))
        cuts = np.unique(rng.integers(1, n, size=k - 1))
        bounds = [0, *cuts.tolist(), n]
        return list(itertools.pairwise(bounds))
    return [(0, n)]


def _write_parquet(path: Path, cols: dict[str, np.ndarray], nulls: dict[str, np.ndarray],
                   row_group_rows: int) -> None:
    arrays = {
        name: pa.array(values, mask=nulls.get(name)) for name, values in cols.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), path, row_group_size=row_group_rows, use_dictionary=False)


def _write_zarr(path: Path, cols: dict[str, np.ndarray], nulls: dict[str, np.ndarray],
                chunk_rows: int, protocol: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    group = zarr.open_group(zarr.storage.LocalStore(path), mode="w", zarr_format=3)
    group.attrs.update({"protocol": protocol, "columns": list(cols)})
    n = len(next(iter(cols.values())))
    for name, values in cols.items():
        data = values.copy() if name in nulls else values
        if name in nulls:
            data[nulls[name]] = np.nan
        arr = group.create_array(
            name, shape=(n,), chunks=(max(1, min(chunk_rows, n)),), dtype=data.dtype,
            fill_value=np.nan,
        )
        arr[:] = data


def write_synthetic_dataset(
    out_dir: Path,
    *,
    cells: int = 4,
    cycles: int = 6,
    rows_per_cycle: int = 600,
    seed: int = 0,
    zarr_fraction: float = 0.25,
    split_fraction: float = 0.3,
    null_fraction: float = 0.002,
    row_group_rows: int = 65536,
    sets: int = 2,
    hppc_every: int = 5,
    eis_every: int = 2,
    missing_channel: str | None = None,
    missing_cells: int = 0,
    missed_tests: float = 0.0,
) -> SynthResult:
    """Write the dataset under ``out_dir`` (created) and return its summary.

    ``rows_per_cycle`` is the length of a cycling stream (hppc streams get half);
    ``row_group_rows`` is the parquet row group size and zarr chunk length;
    ``hppc_every`` / ``eis_every``: those protocols are measured on every k-th cycle;
    the last ``missing_cells`` cells lack the column ``missing_channel``;
    ``missed_tests``: the probability that a scheduled hppc or eis test is left out.
    """
    if cells < 1 or cycles < 1 or sets < 1 or rows_per_cycle < 40 or row_group_rows < 1:
        raise ValueError("need cells, cycles, sets, row_group_rows >= 1 and rows_per_cycle >= 40")
    if hppc_every < 1 or eis_every < 1:
        raise ValueError("hppc_every and eis_every must be >= 1")
    if missing_cells and missing_channel not in PROTOCOL_COLUMNS["cycling"][1:]:
        raise ValueError(f"missing_channel must be one of {PROTOCOL_COLUMNS['cycling'][1:]}, "
                         f"got {missing_channel!r}")
    if not 0.0 <= missed_tests <= 1.0:
        raise ValueError(f"missed_tests must be in 0..1, got {missed_tests}")
    if not 0 <= missing_cells <= cells:
        raise ValueError(f"missing_cells must be in 0..{cells}, got {missing_cells}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, list[Any]] = {k: [] for k in (
        "set_id", "cell_id", "cidx", "protocol", "segment_path", "row_count",
        "chemistry", "nominal_capacity_ah", "ambient_temp_c")}
    n_rows = 0
    for index in range(cells):
        cell = _cell(seed, index, sets)
        for cidx in range(cycles):
            streams: list[tuple[str, dict[str, np.ndarray]]] = []
            ident = (cell.set_id, cell.cell_id, cidx)
            streams.append(("cycling", _cycling(
                cell, cidx, rows_per_cycle, rng_for(seed, "cycling", *ident))))
            if cidx % hppc_every == 0 and not _missed(seed, missed_tests, "hppc", ident):
                streams.append(("hppc", _hppc(
                    cell, cidx, max(60, rows_per_cycle // 2), rng_for(seed, "hppc", *ident))))
            if cidx % eis_every == 0 and not _missed(seed, missed_tests, "eis", ident):
                streams.append(("eis", _eis(cell, cidx, rng_for(seed, "eis", *ident))))
            for protocol, raw in streams:
                rng = rng_for(seed, "layout", *ident, protocol)
                lacks = missing_channel if index >= cells - missing_cells else None
                cols = {
                    c: raw[c].astype(np.float64 if c in _FLOAT64 else np.float32, copy=False)
                    for c in PROTOCOL_COLUMNS[protocol] if c != lacks
                }
                n = len(cols[PROTOCOL_COLUMNS[protocol][0]])
                nulls = {c: rng.random(n) < null_fraction for c in cols if c in _NULLABLE}
                for k, (lo, hi) in enumerate(_pieces(n, rng, split_fraction)):
                    as_zarr = bool(rng.random() < zarr_fraction)
                    rel = (f"segments/{cell.set_id}/{cell.cell_id}/cycle_{cidx:04d}/"
                           f"{protocol}_{k}.{'zarr' if as_zarr else 'parquet'}")
                    part = {c: v[lo:hi] for c, v in cols.items()}
                    part_nulls = {c: m[lo:hi] for c, m in nulls.items()}
                    if as_zarr:
                        _write_zarr(out / rel, part, part_nulls, row_group_rows, protocol)
                    else:
                        _write_parquet(out / rel, part, part_nulls, row_group_rows)
                    for key, value in (
                        ("set_id", cell.set_id), ("cell_id", cell.cell_id), ("cidx", cidx),
                        ("protocol", protocol), ("segment_path", rel), ("row_count", hi - lo),
                        ("chemistry", cell.chemistry),
                        ("nominal_capacity_ah", cell.capacity_ah),
                        ("ambient_temp_c", cell.ambient_c),
                    ):
                        manifest[key].append(value)
                    n_rows += hi - lo
    table = pa.table({
        "set_id": pa.array(manifest["set_id"], pa.string()),
        "cell_id": pa.array(manifest["cell_id"], pa.string()),
        "cidx": pa.array(manifest["cidx"], pa.int64()),
        "protocol": pa.array(manifest["protocol"], pa.string()),
        "segment_path": pa.array(manifest["segment_path"], pa.string()),
        "row_count": pa.array(manifest["row_count"], pa.int64()),
        "chemistry": pa.array(manifest["chemistry"], pa.string()),
        "nominal_capacity_ah": pa.array(manifest["nominal_capacity_ah"], pa.float64()),
        "ambient_temp_c": pa.array(manifest["ambient_temp_c"], pa.float64()),
    })
    manifest_path = out / "manifest.parquet"
    pq.write_table(table, manifest_path)
    info = {
        "name": "windpipe-synthetic",
        "generator": "windpipe.services.synth.write_synthetic_dataset",
        "seed": seed,
        "parameters": {
            "cells": cells, "cycles": cycles, "rows_per_cycle": rows_per_cycle, "sets": sets,
            "zarr_fraction": zarr_fraction, "split_fraction": split_fraction,
            "null_fraction": null_fraction, "row_group_rows": row_group_rows,
            "hppc_every": hppc_every, "eis_every": eis_every,
            "missing_channel": missing_channel if missing_cells else None,
            "missing_cells": missing_cells, "missed_tests": missed_tests,
        },
        "sign_convention": "current positive on charge",
        "units": UNITS,
        "protocols": {p: list(c) for p, c in PROTOCOL_COLUMNS.items()},
        "nulls": "null in parquet, NaN in zarr",
        "manifest": "manifest.parquet",
        "n_rows": n_rows,
        "n_segments": len(manifest["segment_path"]),
    }
    (out / "dataset.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return SynthResult(out, manifest_path, n_rows, len(manifest["segment_path"]))
