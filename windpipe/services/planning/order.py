"""Stream order (SEMANTICS 7) and the order of lane windows in sequences (3b, 4).

Sequential order is index order, grouped by protocol first when ``protocol_order``
is given. Under chain, the streams sharing an alignment key form one sequence, in
``protocol_order`` then index order.
"""

from __future__ import annotations

import numpy as np

from windpipe.services.planning.arrays import expand_counts
from windpipe.services.planning.rules import OrderRules
from windpipe.services.planning.streams import Streams

__all__ = ["protocol_rank", "stream_order", "window_sequences"]

_I64 = np.int64


def protocol_rank(streams: Streams, ordered_protocols: tuple[str, ...]) -> np.ndarray:
    """Position of each stream's protocol in ``ordered_protocols``."""
    pos = np.asarray([ordered_protocols.index(p) for p in streams.protocols], dtype=_I64)
    return pos[streams.protocol] if streams.count else np.zeros(0, _I64)


def stream_order(streams: Streams, rules: OrderRules) -> np.ndarray:
    """Streams in sequential order."""
    idx = np.arange(streams.count, dtype=_I64)
    if not rules.by_protocol:
        return idx
    return np.lexsort((idx, protocol_rank(streams, rules.ordered_protocols)))


def _chain_sequences(streams: Streams) -> np.ndarray:
    """Sequence id of each stream under chain: alignment key, in first-occurrence order."""
    ids: dict[tuple[object, ...], int] = {}
    return np.asarray(
        [ids.setdefault(k, len(ids)) for k in streams.alignment_keys], dtype=_I64
    )


def window_sequences(
    streams: Streams, rules: OrderRules, n_windows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows in sequence order: ``(stream, index in stream, sequence rank)``.

    ``n_windows`` is the lane window count of each stream. A sequence is a stream, or
    under chain the chained streams of one alignment key.
    """
    idx = np.arange(streams.count, dtype=_I64)
    if rules.chain:
        seq = _chain_sequences(streams)
        order = np.lexsort((idx, protocol_rank(streams, rules.ordered_protocols), seq))
        seq_o = seq[order]
    else:
        order = stream_order(streams, rules)
        seq_o = np.arange(streams.count, dtype=_I64)
    owner, w_idx = expand_counts(n_windows[order])
    return order[owner], w_idx, seq_o[owner]
