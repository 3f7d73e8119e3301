"""Training-loop conveniences of the handles: a plan's pass lengths, and the train and
validation loaders of one config.

* :class:`PassLengthMixin` (``windpipe.sdk.Plan``): ``plan.pass_length(epoch, rank=,
  world_size=)``, the batch count ``len(plan.loader(...))`` and
  ``len(plan.torch_dataset(...))`` answer (``windpipe.sdk._counts``).
* :class:`TrainValMixin` (``windpipe.sdk.Split``): ``split.plans(config)`` is the
  ``(train, val)`` pair of plans of one :class:`LoaderConfig` (:func:`train_val_configs`:
  the validation plan reads the ``val`` side once, in order, the same every epoch), and
  ``split.loaders(config, epoch=e)`` their device loaders, train for epoch ``e``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

from windpipe.sdk._counts import PassLengths
from windpipe.services.contract.configs import LoaderConfig, PlanSpec

if TYPE_CHECKING:
    from typing import Unpack

    from windpipe.sdk._handles import Plan
    from windpipe.sdk._loader import DeviceLoader
    from windpipe.sdk._state import ClientState
    from windpipe.services.contract.options import OptionKeywords

__all__ = ["PassLengthMixin", "TrainValMixin", "train_val_configs"]


def train_val_configs(config: LoaderConfig) -> tuple[LoaderConfig, LoaderConfig]:
    """The train and validation configs of ``config``: the same fields, ``split="train"``
    and ``split="val"``; the validation one ``strategy="sequential"`` (every validation
    window once, in the stored order: the same batches every epoch, so epochs compare; a
    ``block_shuffled`` budget belongs to the train plan only)."""
    body = config.model_dump()
    train = LoaderConfig.model_validate({**body, "split": "train"})
    val = LoaderConfig.model_validate({**body, "split": "val", "strategy": "sequential",
                                       "shuffle_block_bytes": None})
    return train, val


class PassLengthMixin:
    """``pass_length`` for :class:`windpipe.sdk.Plan` (its ``id`` and ``_state``)."""

    id: str
    _state: ClientState

    @functools.cached_property
    def _lengths(self) -> PassLengths:
        return PassLengths(functools.partial(self._state.artifact_bytes, self.id))

    def pass_length(self, epoch: int = 0, *, rank: int = 0, world_size: int = 1,
                    start_batch: int = 0) -> int:
        """Batches rank ``rank`` of ``world_size`` yields in ``epoch`` from ``start_batch``
        on: ``len()`` of this plan's loaders and torch datasets (exact, a shuffled
        epoch's own count; the stored plan is fetched on the first call)."""
        return self._lengths(epoch, rank=rank, world_size=world_size,
                             start_batch=start_batch)


class _Plans(Protocol):
    def plan(self, config: LoaderConfig | PlanSpec) -> Plan: ...


class TrainValMixin:
    """``plans`` and ``loaders`` for :class:`windpipe.sdk.Split` (its ``plan``)."""

    def plans(self: _Plans, config: LoaderConfig) -> tuple[Plan, Plan]:
        """The ``(train, val)`` plans of one config (:func:`train_val_configs`): the same
        windows, channels and scaling, the validation plan sequential. Idempotent."""
        train, val = train_val_configs(config)
        return self.plan(train), self.plan(val)

    def loaders(
        self: _Plans, config: LoaderConfig, *, epoch: int = 0, progress: bool | None = None,
        **options: Unpack[OptionKeywords],
    ) -> tuple[DeviceLoader, DeviceLoader]:
        """``(train, val)`` device loaders of one config: train's pass of ``epoch``, the
        validation plan's one pass (``len()`` of each is its batch count). ``options``
        (``device=``, ...) override ``config``'s for both, as in ``plan.loader``."""
        train, val = train_val_configs(config)
        return (self.plan(train).loader(epoch, progress=progress, **options),
                self.plan(val).loader(0, progress=progress, **options))
