"""Which channels each stream has (SEMANTICS section 5, "Missing channels").

A registered version records, per protocol and column, the manifest rows whose
segments lack the column. A stream has a column when every manifest row it
concatenates has it; where it lacks one of a plan's columns, the materializer
fills that channel as absent (inputs -2.0, targets NaN), ``has_channel`` is False
and, for a target channel, the lane's mask is False. This is one boolean matrix
per plan, computed once when the catalog plans and stored in the plan artifact.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.planning.streams import Streams

__all__ = [
    "absent_channel_problems", "lacks_target", "missing_by_column", "stream_channels",
]


def missing_by_column(schema: Mapping[str, Any]) -> dict[str, dict[str, list[int]]]:
    """``{protocol: {column: [manifest_row_id, ...]}}`` of the columns some rows lack, from a
    version's stored schema (``{protocol: [{"name", ..., "missing"?}]}``)."""
    out: dict[str, dict[str, list[int]]] = {}
    for protocol, columns in schema.items():
        for col in columns:
            ids = col.get("missing") if isinstance(col, Mapping) else None
            if ids:
                out.setdefault(str(protocol), {})[str(col["name"])] = [int(i) for i in ids]
    return out


def stream_channels(
    streams: Streams, spec: PlanSpec, missing: Mapping[str, Mapping[str, Collection[int]]],
) -> np.ndarray | None:
    """bool ``[S, C]`` over ``spec.columns()``: stream ``s`` has column ``c`` (every manifest
    row of the stream has it). ``None`` when every stream has every column."""
    columns = spec.columns()
    has = np.ones((streams.count, len(columns)), dtype=np.bool_)
    piece_protocol = streams.protocol[streams.piece_stream]
    for code, protocol in enumerate(streams.protocols):
        lacking = missing.get(protocol, {})
        for c, name in enumerate(columns):
            ids = lacking.get(name)
            if not ids:
                continue
            hit = np.isin(streams.piece_manifest_row_id, np.fromiter(ids, dtype=np.int64))
            hit &= piece_protocol == code
            if hit.any():
                has[np.unique(streams.piece_stream[hit]), c] = False
    return None if bool(has.all()) else has


def lacks_target(streams: Streams, spec: PlanSpec, has: np.ndarray | None) -> np.ndarray:
    """bool ``[S]``: stream ``s`` lacks a target column its own protocol names, so every
    lane of it has its mask all False (SEMANTICS 5a). ``has``: :func:`stream_channels`."""
    out = np.zeros(streams.count, dtype=np.bool_)
    if has is None:
        return out
    columns = {name: c for c, name in enumerate(spec.columns())}
    for code, protocol in enumerate(streams.protocols):
        targets = [columns[name] for name in spec.targets.get(protocol, ())]
        if targets:
            mine = streams.protocol == code
            out[mine] = ~has[mine][:, targets].all(axis=1)
    return out


def absent_channel_problems(
    streams: Streams, spec: PlanSpec, has: np.ndarray | None
) -> list[dict[str, Any]]:
    """The channels a plan names that no stream of their protocol has (each a 422 problem)."""
    if has is None:
        return []
    columns = {name: c for c, name in enumerate(spec.columns())}
    problems: list[dict[str, Any]] = []
    for code, protocol in enumerate(streams.protocols):
        mine = streams.protocol == code
        if not mine.any():
            continue
        for role, table in (("inputs", spec.inputs), ("targets", spec.targets)):
            for name in table.get(protocol, ()):
                if not has[mine, columns[name]].any():
                    problems.append({
                        "protocol": protocol, "role": role, "column": name,
                        "problem": f"no stream of {protocol!r} in this split has it",
                    })
    return problems
