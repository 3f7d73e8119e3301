"""Stable hashing: manifest row ids, split draws, phases and permutation seeds.

Everything random in windpipe is a pure function of a canonical encoding of its
inputs through one fixed 64-bit hash (BLAKE2b, 8-byte digest), so results are the
same in every process, on every machine and in every Python version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.random  # numpy loads it on first use: ~10 ms inside a pass's first schedule

__all__ = [
    "canonical_json",
    "hash64",
    "hash64_each",
    "manifest_row_id",
    "rng_for",
    "unit_interval",
]

_TWO_MINUS_53 = 2.0**-53


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def canonical_json(value: Any) -> bytes:
    """Compact JSON with sorted keys; integral floats are written as integers.

    ``cidx`` read back as ``3.0`` from a CSV and ``3`` from parquet hash alike.
    """
    return json.dumps(
        _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode()


def hash64(*parts: Any) -> int:
    """Unsigned 64-bit hash of the canonical encoding of ``parts``."""
    digest = hashlib.blake2b(canonical_json(list(parts)), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def hash64_each(head: Sequence[bytes], items: Sequence[bytes],
                tail: Sequence[bytes]) -> np.ndarray:
    """``hash64(*head_values, item_value, *tail_values)`` of every item, as uint64, where
    ``head``, ``items`` and ``tail`` are those values already in canonical JSON (a list's
    canonical JSON is its items' joined by commas): a loop over thousands of keys (a
    plan's streams) that encodes each key once and makes no Python call per hash beyond
    BLAKE2b's own."""
    pre = b"[" + b"".join(h + b"," for h in head)
    post = b"".join(b"," + t for t in tail) + b"]"
    blake = hashlib.blake2b
    digests = b"".join([blake(pre + item + post, digest_size=8).digest() for item in items])
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def unit_interval(*parts: Any) -> float:
    """``hash64(parts)`` mapped to ``[0, 1)``: its top 53 bits times 2**-53.

    (``h / 2**64`` would round the largest hashes up to exactly 1.0.)
    """
    return (hash64(*parts) >> 11) * _TWO_MINUS_53


def manifest_row_id(set_id: str, cell_id: str, cidx: int, protocol: str) -> int:
    """Stable non-negative int64 id of an identity (SEMANTICS section 1)."""
    return hash64("manifest_row", str(set_id), str(cell_id), int(cidx), str(protocol)) >> 1


def rng_for(*parts: Any) -> np.random.Generator:
    """A numpy generator seeded by the hash of ``parts`` (PCG64, fixed algorithm)."""
    return np.random.Generator(np.random.PCG64(hash64(*parts)))


def identity_tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    """Key values as a plain tuple (numpy scalars unwrapped)."""
    return tuple(_plain(v) for v in values)
