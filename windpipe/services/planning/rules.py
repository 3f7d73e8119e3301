"""The narrow inputs of a schedule: the window shape per protocol and the ordering rules.

A strategy (:mod:`windpipe.services.planning.strategies`) never sees a whole
:class:`~services.contract.configs.PlanSpec`: it reads a :class:`WindowTable` (B, T,
step, drop per protocol code) and the :class:`OrderRules` (seed, protocol order, state,
drops), both derived from the spec once here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windpipe.services.contract.configs import PlanSpec

__all__ = ["OrderRules", "WindowTable"]

_I64 = np.int64


@dataclass(frozen=True, eq=False)
class WindowTable:
    """``WindowConfig`` per protocol code (index into ``Streams.protocols``), as arrays."""

    batch_size: np.ndarray  # int64 [n_protocols]
    seq_len: np.ndarray  # int64
    step: np.ndarray  # int64 (plain windows, 3a)
    drop_incomplete: np.ndarray  # bool

    @classmethod
    def for_protocols(cls, spec: PlanSpec, protocols: tuple[str, ...]) -> WindowTable:
        """The windows of ``protocols`` (in that code order) under ``spec``."""
        wins = [spec.window_for(p) for p in protocols]
        return cls(
            batch_size=np.asarray([w.batch_size for w in wins], dtype=_I64),
            seq_len=np.asarray([w.seq_len for w in wins], dtype=_I64),
            step=np.asarray([w.step for w in wins], dtype=_I64),
            drop_incomplete=np.asarray([w.drop_incomplete for w in wins], dtype=bool),
        )


@dataclass(frozen=True)
class OrderRules:
    """How windows are ordered, cut into segments and grouped (SEMANTICS 3b, 4, 7).

    ``by_protocol`` is True when ``protocol_order`` was given: sequential order then
    groups streams by protocol first.
    """

    seed: int
    ordered_protocols: tuple[str, ...]
    by_protocol: bool
    phase_shift: bool
    stateful_n_windows: int
    chain: bool
    drop_incomplete_batches: bool
    shuffled: bool = False
    shuffle_block_bytes: int | None = None  # block_shuffled's budget (SEMANTICS 3c)

    @classmethod
    def from_spec(cls, spec: PlanSpec) -> OrderRules:
        """The rules of ``spec``."""
        return cls(
            seed=spec.seed,
            ordered_protocols=spec.ordered_protocols(),
            by_protocol=spec.protocol_order is not None,
            phase_shift=spec.phase_shift,
            stateful_n_windows=spec.stateful_n_windows,
            chain=spec.cross_protocol_state_carry == "chain",
            drop_incomplete_batches=spec.drop_incomplete_batches,
            shuffled=spec.strategy == "shuffled",
            shuffle_block_bytes=spec.shuffle_block_bytes,
        )

    @property
    def stateful(self) -> bool:
        """Whether lanes carry recurrent state across the steps of a group (section 4)."""
        return self.stateful_n_windows != 0
