"""The exceptions and warnings a user of the SDK catches.

The exception tree is the contract's (``windpipe.services.contract.errors``): the catalog, the
Flight servers and the SDK raise the same classes, so ``except windpipe.NotFound``
catches a missing plan whether the REST API, a Flight server or the same-host reader
found it missing. This module re-exports them and adds the two warnings: registration's
doubts, and what registration or a split found in the data.
"""

from __future__ import annotations

from windpipe.services.contract.errors import (
    Conflict,
    Forbidden,
    InternalError,
    InvalidConfig,
    InvalidManifest,
    InvalidRequest,
    InvalidTicket,
    NotFound,
    ResourceExhausted,
    SegmentChanged,
    SegmentError,
    Transient,
    Unauthenticated,
    Unavailable,
    WindpipeError,
    error_class,
    error_from_envelope,
)
from windpipe.services.contract.wire import error_from_flight

__all__ = [
    "Conflict",
    "DataWarning",
    "Forbidden",
    "InternalError",
    "InvalidConfig",
    "InvalidManifest",
    "InvalidRequest",
    "InvalidTicket",
    "NotFound",
    "RegistrationWarning",
    "ResourceExhausted",
    "SegmentChanged",
    "SegmentError",
    "Transient",
    "Unauthenticated",
    "Unavailable",
    "WindpipeError",
    "error_class",
    "error_from_envelope",
    "error_from_flight",
]


class RegistrationWarning(UserWarning):
    """Registration succeeded, but the catalog has doubts (a protocol name new to it, or
    close to a known one: ``cyling``); ``DatasetVersion.warnings`` has the details."""


class DataWarning(RegistrationWarning):
    """Something in the data a model would otherwise learn from silently. Registration
    found nulls or NaN (``-2.0`` inputs in a batch), infinities, or a time column
    sampled irregularly (gaps, steps back; ``DatasetVersion.profile`` has the counts);
    or a split put cycles of one cell in both train and val (``Split.leakage``)."""
