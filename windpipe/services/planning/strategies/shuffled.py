"""``shuffled``: a pure function of ``(plan, seed, epoch)`` (SEMANTICS 3b and 7).

Each epoch cuts every stream at a phase of its own (``phase_shift``), permutes the
segments of each protocol (one class under chain), cuts them into groups of B and
permutes all groups. The draws are the contract's (``docs/semantics-notes.md``):

- phase: ``hash64("phase", seed, [group key values], epoch) % min(T, N-1)``;
- segments of a class: ``rng_for("segments", seed, epoch, protocol).permutation``
  (``None`` for the chained class);
- groups: ``rng_for("groups", seed, epoch).permutation``.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.contract.identity import canonical_json, hash64_each, rng_for
from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.groups import Segments, segmented_schedule
from windpipe.services.planning.rules import OrderRules, WindowTable
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.streams import Streams

__all__ = ["epoch_phases", "schedule"]

_I64 = np.int64


def epoch_phases(streams: Streams, windows: WindowTable, rules: OrderRules,
                 epoch: int) -> np.ndarray:
    """Phase of each stream in ``epoch``: all 0 unless ``rules.phase_shift``."""
    phases = np.zeros(streams.count, dtype=_I64)
    if not rules.phase_shift:
        return phases
    # hash64("phase", seed, list(group key), epoch), each key encoded once (the artifact's)
    cut = np.flatnonzero(streams.n_rows >= 2)
    span = np.minimum(windows.seq_len[streams.protocol[cut]].astype(_I64),
                      streams.n_rows[cut].astype(_I64) - 1)
    keys = streams.group_key_json
    hashes = hash64_each((canonical_json("phase"), canonical_json(rules.seed)),
                         [keys[s].encode() for s in cut.tolist()], (canonical_json(epoch),))
    phases[cut] = (hashes % span.astype(np.uint64)).astype(_I64)
    return phases


def _groups(segments: Segments, *, class_of: np.ndarray, class_keys: list[str | None],
            seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Segments permuted per class and cut into groups of B; then all groups permuted."""
    seg_class = class_of[segments.protocol]
    perms: list[np.ndarray] = []
    group_of: list[np.ndarray] = []
    n_groups = 0
    for c, key in enumerate(class_keys):
        members = np.flatnonzero(seg_class == c)
        if members.shape[0] == 0:
            continue
        members = members[rng_for("segments", seed, epoch, key).permutation(members.shape[0])]
        big_b = int(segments.batch_size[members[0]])
        g = np.arange(members.shape[0], dtype=_I64) // big_b
        perms.append(members)
        group_of.append(g + n_groups)
        n_groups += int(g[-1]) + 1
    if not perms:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    segs = np.concatenate(perms)
    sizes = np.bincount(np.concatenate(group_of), minlength=n_groups).astype(_I64)
    starts = np.cumsum(sizes) - sizes
    order = rng_for("groups", seed, epoch).permutation(n_groups)
    owner, pos = expand_counts(sizes[order])
    new_sizes = sizes[order]
    return segs[starts[order][owner] + pos], np.cumsum(new_sizes) - new_sizes


def schedule(streams: Streams, windows: WindowTable, rules: OrderRules, epoch: int) -> Schedule:
    """The batches of ``epoch``: phases, segment and group permutations of that epoch."""
    phase = epoch_phases(streams, windows, rules, epoch)
    ordered = rules.ordered_protocols
    if rules.chain:
        class_of = np.zeros(len(streams.protocols), dtype=_I64)
        class_keys: list[str | None] = [None]
    else:
        class_of = np.asarray([ordered.index(p) for p in streams.protocols], dtype=_I64)
        class_keys = list(ordered)

    def form_groups(segments: Segments) -> tuple[np.ndarray, np.ndarray]:
        return _groups(segments, class_of=class_of, class_keys=class_keys, seed=rules.seed,
                       epoch=epoch)

    return segmented_schedule(streams, windows, rules, epoch=epoch, phase=phase,
                              form_groups=form_groups)
