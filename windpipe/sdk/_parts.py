"""An aligned plan's parts put back together, whatever a batch is made of.

The stream of an aligned plan (SEMANTICS section 9) carries one record per protocol of
each batch, in the plan's protocol order, all with the batch's ``batch_idx`` and
``meta.aligned`` (``docs/wire.md``). :func:`grouped_parts` turns a pass's records into
batches: each plain record as one, the parts of an aligned batch as one whole. torch
batches (``windpipe.sdk._aligned``) and numpy batches (``windpipe.sdk._arrays``) are both
made by it, so both check the parts' order and a stream cut inside a batch the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

from windpipe.sdk._exceptions import InternalError
from windpipe.services.contract.wire import BatchMetadata

__all__ = ["grouped_parts"]

Part = TypeVar("Part")
Has = TypeVar("Has")
Whole = TypeVar("Whole")


def grouped_parts(records: Iterable[tuple[Any, BatchMetadata]], *,
                  part: Callable[[Any, BatchMetadata], Part],
                  has_data: Callable[[np.ndarray], Has],
                  whole: Callable[[dict[str, Part], dict[str, Has], int], Whole],
                  ) -> Iterator[Part | Whole]:
    """Each record as ``part(record, meta)``, except that the parts of an aligned batch
    come out as one ``whole(parts, has_data, batch_idx)`` (``parts`` and ``has_data`` by
    protocol, ``has_data`` made by ``has_data`` from the bool ``(B,)`` array of the
    metadata); a part out of order or a stream ending inside a batch is an
    :class:`InternalError`."""
    parts: dict[str, Part] = {}
    has: dict[str, Has] = {}
    for record, meta in records:
        aligned = meta.aligned
        if aligned is None:
            yield part(record, meta)
            continue
        if aligned.part != len(parts):
            msg = (f"batch {meta.batch_idx}: aligned part {aligned.part} arrived after "
                   f"{len(parts)} part(s)")
            raise InternalError(msg)
        parts[aligned.protocol] = part(record, meta)
        has[aligned.protocol] = has_data(np.asarray(aligned.has_data, dtype=np.bool_))
        if len(parts) == aligned.parts:
            yield whole(parts, has, meta.batch_idx)
            parts, has = {}, {}
    if parts:
        msg = f"the stream ended inside an aligned batch ({len(parts)} part(s) received)"
        raise InternalError(msg)
