"""Sizes of batches and cached chunks: the one definition of each.

On the wire (``windpipe.services.contract.wire``) a lane's time step carries ``C_in + C_out``
float32
values and a uint8 mask; a cached chunk row (``windpipe.services.materialize.chunks``) holds the
same
values without the mask. The plan report, the Flight server's ``FlightInfo`` totals
and the chunk cache's budget all count with these functions.
"""

from __future__ import annotations

from windpipe.services.contract.configs import PlanSpec

__all__ = ["VALUE_BYTES", "channel_counts", "chunk_row_bytes", "token_bytes"]

VALUE_BYTES = 4  # float32 inputs and targets
MASK_BYTES = 1  # uint8 mask


def channel_counts(spec: PlanSpec, protocol: str) -> tuple[int, int]:
    """``(C_in, C_out)`` of a batch of ``protocol`` (the chained union under chain)."""
    return len(spec.input_columns(protocol)), len(spec.target_columns(protocol))


def token_bytes(c_in: int, c_out: int) -> int:
    """Bytes one time step of one lane takes in a streamed batch."""
    return (c_in + c_out) * VALUE_BYTES + MASK_BYTES


def chunk_row_bytes(c_in: int, c_out: int) -> int:
    """Bytes one row of a cached chunk takes (scaled float32 inputs and targets)."""
    return (c_in + c_out) * VALUE_BYTES
