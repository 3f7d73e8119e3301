"""A plain-loop reference of SEMANTICS section 9 (aligned multi-protocol batches).

Written from the section's text, never calling ``windpipe.services.planning``; only the key
permutation
of ``shuffled`` is shared, because it *is* the definition:
``rng_for("aligned-keys", seed, epoch).permutation(n_keys)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.reference.schedule_ref import RefStream
from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.contract.identity import rng_for

__all__ = ["AlignedBatch", "reference_aligned", "reference_aligned_rank"]


@dataclass(frozen=True)
class AlignedBatch:
    """One aligned batch: its group, step, steps and keys; per protocol, per lane,
    ``(stream, offset)`` (offset -1: padding; stream -1: no stream of that protocol),
    and ``has_data`` per protocol and lane."""

    group: int
    step: int
    steps: int
    keys: tuple[tuple[Any, ...], ...]
    lanes: dict[str, tuple[tuple[int, int], ...]]
    has_data: dict[str, tuple[bool, ...]]


def _windows(n: int, t: int, *, drop_incomplete: bool) -> list[int]:
    out = []
    o = 0
    while o <= n - 2:
        if not drop_incomplete or o + t + 1 <= n:
            out.append(o)
        o += t
    return out


def reference_aligned(streams: list[RefStream], config: LoaderConfig,
                      epoch: int) -> list[AlignedBatch]:
    """Every aligned batch of ``epoch`` in global order."""
    protocols = config.ordered_protocols()
    keys: list[tuple[Any, ...]] = []
    stream_of: dict[tuple[tuple[Any, ...], str], int] = {}
    for s, st in enumerate(streams):
        if st.alignment_key not in keys:
            keys.append(st.alignment_key)
        stream_of[(st.alignment_key, st.protocol)] = s
    windows: dict[tuple[int, str], list[int]] = {}
    for k, key in enumerate(keys):
        for p in protocols:
            s = stream_of.get((key, p), -1)
            w = config.window_for(p)
            windows[(k, p)] = [] if s < 0 else _windows(
                streams[s].n_rows, w.seq_len, drop_incomplete=w.drop_incomplete)
    order = list(range(len(keys)))
    if config.strategy == "shuffled":
        order = [int(i) for i in rng_for("aligned-keys", config.seed, epoch).permutation(
            len(keys))]
    b = config.window_for(protocols[0]).batch_size
    groups = [order[i:i + b] for i in range(0, len(order), b)]
    out: list[AlignedBatch] = []
    group_idx = 0
    for members in groups:
        if config.drop_incomplete_batches and len(members) < b:
            continue
        steps = max(len(windows[(k, p)]) for k in members for p in protocols)
        if steps == 0:
            continue
        for j in range(steps):
            lanes = {}
            has = {}
            for p in protocols:
                row = []
                for k in members:
                    s = stream_of.get((keys[k], p), -1)
                    offs = windows[(k, p)]
                    row.append((s, offs[j] if j < len(offs) else -1))
                lanes[p] = tuple(row)
                has[p] = tuple(len(windows[(k, p)]) > 0 for k in members)
            out.append(AlignedBatch(group=group_idx, step=j, steps=steps,
                                    keys=tuple(keys[k] for k in members), lanes=lanes,
                                    has_data=has))
        group_idx += 1
    return out


def reference_aligned_rank(streams: list[RefStream], config: LoaderConfig, epoch: int, *,
                           rank: int, world_size: int) -> list[AlignedBatch]:
    """Rank ``rank``'s pass: groups ``rank, rank + W, ...``, trimmed to the smallest rank
    with ``drop_incomplete_distributed``."""
    per_rank: list[list[AlignedBatch]] = [[] for _ in range(world_size)]
    for batch in reference_aligned(streams, config, epoch):
        per_rank[batch.group % world_size].append(batch)
    mine = per_rank[rank]
    if config.drop_incomplete_distributed:
        mine = mine[: min(len(r) for r in per_rank)]
    return mine
