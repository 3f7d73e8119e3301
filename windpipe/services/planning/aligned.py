"""The aligned multi-protocol schedule (SEMANTICS section 9): B alignment keys per batch,
every protocol's window of each key side by side.

The planning core of ``align_by="alignment_key"``: which key each lane is, and per
protocol which stream and source row each lane reads, per step of each group of
keys, for one epoch. :mod:`windpipe.services.planning.strategies.aligned` lays it out as an ordinary
:class:`~services.planning.schedule.Schedule` (one part batch per protocol), which the
materializer, the wire and the SDK read; ``tests/reference/aligned_ref.py`` is its
plain-loop reference. Everything here is vectorized over keys and lanes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from windpipe.services.contract.configs import PlanSpec
from windpipe.services.contract.errors import InvalidConfig, WindpipeError
from windpipe.services.contract.identity import rng_for
from windpipe.services.contract.ranks import check_rank
from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.streams import Streams

__all__ = [
    "AlignedSchedule", "aligned_epoch", "aligned_keys", "aligned_rank_batches",
    "aligned_schedule",
]

_I64 = np.int64


def _invalid(message: str, **details: Any) -> WindpipeError:
    return InvalidConfig(message, details=details)


@dataclass(frozen=True, eq=False)
class AlignedSchedule:
    """One epoch of an aligned plan in global order.

    Keys (length K, index order): ``keys``, ``key_stream`` ``[K, P]`` (the key's stream
    of each protocol, -1 for none), ``key_windows`` ``[K, P]`` (its lane windows).
    Batches (NB): ``batch_group``, ``batch_step``, ``batch_steps``, ``batch_lane_ptr``
    (NB+1). Lanes (NL): ``lane_key``; ``lane_stream`` / ``lane_offset`` ``[P, NL]``
    (offset -1: padding; stream -1: the key has no data of that protocol).
    Units: ``unit_batch_ptr`` (a unit is one group of keys). ``dropped_groups``: groups
    with a window that ``drop_incomplete_batches`` left out (a group whose keys have no
    window yields nothing and is not counted: its streams are ``short_streams``);
    ``dropped_group_batches``: the batches they would have yielded.
    """

    epoch: int
    protocols: tuple[str, ...]
    keys: tuple[tuple[Any, ...], ...]
    key_stream: np.ndarray
    key_windows: np.ndarray
    batch_group: np.ndarray
    batch_step: np.ndarray
    batch_steps: np.ndarray
    batch_lane_ptr: np.ndarray
    lane_key: np.ndarray
    lane_stream: np.ndarray
    lane_offset: np.ndarray
    unit_batch_ptr: np.ndarray
    dropped_groups: int
    dropped_group_batches: int = 0

    @property
    def n_batches(self) -> int:
        """Batches of the epoch over all ranks."""
        return int(self.batch_group.shape[0])

    @property
    def n_units(self) -> int:
        """Groups of keys (what ranks are dealt)."""
        return int(self.unit_batch_ptr.shape[0] - 1)

    def has_data(self, batch: int) -> np.ndarray:
        """bool ``[P, B]``: the batch's keys that have a lane window in each protocol."""
        lo, hi = int(self.batch_lane_ptr[batch]), int(self.batch_lane_ptr[batch + 1])
        return self.key_windows[self.lane_key[lo:hi]].T > 0


def aligned_keys(streams: Streams) -> tuple[tuple[tuple[Any, ...], ...], np.ndarray]:
    """The plan's keys in index order (of their first stream) and ``key_stream [K, P]``;
    ``invalid_config`` when a key has two streams of one protocol."""
    index: dict[tuple[Any, ...], int] = {}
    stream_key = np.fromiter(
        (index.setdefault(tuple(k), len(index)) for k in streams.alignment_keys),
        dtype=_I64, count=streams.count)
    n_protocols = len(streams.protocols)
    code = streams.protocol.astype(_I64)
    cell = stream_key * n_protocols + code
    if np.unique(cell).shape[0] != streams.count:
        raise _invalid(
            "align_by needs at most one stream per alignment key and protocol; the "
            "group_key splits some key's rows of one protocol over several streams",
        )
    key_stream = np.full((len(index), n_protocols), -1, dtype=_I64)
    key_stream[stream_key, code] = np.arange(streams.count, dtype=_I64)
    return tuple(index), key_stream


def aligned_schedule(streams: Streams, spec: PlanSpec, epoch: int) -> AlignedSchedule:
    """One epoch of ``spec`` over ``streams`` aligned by key (SEMANTICS section 9)."""
    return aligned_epoch(streams, WindowTable.for_protocols(spec, streams.protocols),
                         OrderRules.from_spec(spec), epoch)


def aligned_epoch(streams: Streams, windows: WindowTable, rules: OrderRules,
                  epoch: int) -> AlignedSchedule:
    """:func:`aligned_schedule` over the narrow inputs of
    :mod:`windpipe.services.planning.rules`."""
    protocols = streams.protocols
    if np.unique(windows.batch_size).shape[0] > 1:
        raise _invalid("align_by needs one batch_size for every protocol, got "
                       + ", ".join(f"{p}: {b}" for p, b in zip(
                           protocols, windows.batch_size.tolist(), strict=True)))
    b = int(windows.batch_size[0]) if protocols else 1
    keys, key_stream = aligned_keys(streams)
    t = windows.seq_len.astype(_I64)
    drop = windows.drop_incomplete.astype(np.bool_)
    n = np.where(key_stream >= 0, streams.n_rows[np.maximum(key_stream, 0)], 0).astype(_I64)
    some = np.where(n >= 2, (n - 2) // t + 1, 0)
    complete = np.where(n >= 1, (n - 1) // t, 0)
    key_windows = np.where(drop, complete, some).astype(_I64)

    n_keys = len(keys)
    order = (rng_for("aligned-keys", rules.seed, epoch).permutation(n_keys).astype(_I64)
             if rules.shuffled else np.arange(n_keys, dtype=_I64))
    group_of = np.arange(n_keys, dtype=_I64) // b
    n_groups = -(-n_keys // b)
    group_size = np.bincount(group_of, minlength=n_groups).astype(_I64)
    most = key_windows[order].max(axis=1) if n_keys else np.zeros(0, _I64)
    steps = np.zeros(n_groups, dtype=_I64)
    np.maximum.at(steps, group_of, most)
    keep = steps > 0  # a group whose keys have no window yields nothing: not a drop
    if rules.drop_incomplete_batches:
        keep &= group_size == b
    dropped = int(((steps > 0) & ~keep).sum())  # what drop_incomplete_batches left out
    dropped_batches = int(steps[~keep].sum())
    group_lo = np.concatenate([[0], np.cumsum(group_size)])[:-1][keep]
    group_size, steps = group_size[keep], steps[keep]

    batch_group, batch_step = expand_counts(steps)
    lanes_per_batch = group_size[batch_group]
    batch_lane_ptr = np.concatenate([[0], np.cumsum(lanes_per_batch)]).astype(_I64)
    lane_batch, lane_pos = expand_counts(lanes_per_batch)
    lane_key = order[group_lo[batch_group[lane_batch]] + lane_pos]
    step = batch_step[lane_batch]
    live = step[None, :] < key_windows[lane_key].T
    lane_offset = np.where(live, step[None, :] * t[:, None], -1).astype(_I64)
    lane_stream = key_stream[lane_key].T.copy()
    return AlignedSchedule(
        epoch=epoch, protocols=protocols, keys=keys, key_stream=key_stream,
        key_windows=key_windows, batch_group=batch_group.astype(np.int32),
        batch_step=batch_step.astype(np.int32),
        batch_steps=steps[batch_group].astype(np.int32), batch_lane_ptr=batch_lane_ptr,
        lane_key=lane_key, lane_stream=lane_stream, lane_offset=lane_offset,
        unit_batch_ptr=np.concatenate([[0], np.cumsum(steps)]).astype(_I64),
        dropped_groups=dropped, dropped_group_batches=dropped_batches,
    )


def aligned_rank_batches(schedule: AlignedSchedule, *, rank: int, world_size: int,
                         drop_incomplete_distributed: bool) -> np.ndarray:
    """Global batches of rank ``rank``'s pass: units ``r, r+W, ...`` (SEMANTICS 7), trimmed
    to the smallest rank with ``drop_incomplete_distributed``."""
    check_rank(rank, world_size)
    sizes = np.diff(schedule.unit_batch_ptr)
    units = np.arange(rank, schedule.n_units, world_size, dtype=_I64)
    owner, pos = expand_counts(sizes[units])
    out = schedule.unit_batch_ptr[units][owner] + pos
    if drop_incomplete_distributed:
        per_rank = np.bincount(np.arange(sizes.shape[0]) % world_size, weights=sizes,
                               minlength=world_size)
        out = out[: int(per_rank.min())]
    return out
