"""A torch ``IterableDataset`` over a plan, for ``DataLoader(ds, batch_size=None)``.

* Rank and world size come from ``torch.distributed`` when it is initialized (else
  the values given, default 0 of 1); every rank gets the same number of batches
  when the plan trims distributed tails (SEMANTICS section 7).
* ``set_epoch(e)`` before each epoch (shuffled plans differ per epoch).
* Mid-epoch resumption: ``state_dict()`` is ``{"plan_id", "epoch", "batch"}`` where
  ``batch`` is the rank-local index of the next batch to yield;
  ``load_state_dict(sd)`` makes the next iteration yield exactly the rest of that
  epoch. With ``num_workers=0`` the dataset tracks the cursor itself; with workers
  (each in its own process) the loader of ``Plan.dataloader`` tracks it from the
  batches it hands out (a ``transform`` must keep ``batch_idx``: return the Batch, an
  object with a ``batch_idx`` attribute or a dict with that key); otherwise pass the
  last batch you consumed, ``ds.state_dict(after=batch)``. A plain ``state_dict()``
  that cannot know raises :class:`InvalidConfig` saying so, never a wrong cursor.
* ``num_workers = n > 0``: the rank's pass is dealt out by batch index, worker ``w``
  yielding the batches with ``batch_idx % n == w``. torch's DataLoader takes one
  batch from each worker in turn, so the consumer sees exactly the same order as
  with ``num_workers=0`` (stateful groups stay consecutive). Each worker reads the
  rank's stream and decodes only its own batches, so workers help when decoding or
  a ``transform`` is the bottleneck, not the transport.
* :func:`dataloader_options` turns a :class:`LoaderConfig`'s runtime options into
  ``DataLoader`` keyword arguments (``Plan.dataloader`` uses it). With workers the
  default ``multiprocessing_context`` is ``"spawn"``: gRPC channels (the Flight
  client) do not survive ``fork``, and a forked worker that inherits one can hang.
  ``spawn`` starts each worker by importing the main module afresh: a script needs
  ``if __name__ == "__main__":`` around its training code, and a ``transform`` must be
  importable from a module (not a lambda, not a function defined in a notebook);
  ``Plan.dataloader`` checks both and says what to change.
"""

from __future__ import annotations

import difflib
import inspect
import multiprocessing
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from windpipe.sdk._aligned import AlignedBatch
from windpipe.sdk._batch import Batch
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.sdk._spawn import check_main_guard
from windpipe.services.contract.errors import WindpipeError
from windpipe.services.contract.options import LoaderOptions
from windpipe.services.contract.ranks import check_rank

__all__ = ["WindpipeDataLoader", "WindpipeIterableDataset", "check_spawn",
           "dataloader_options"]

# a rank's pass (``windpipe.sdk._state.WorkerSource``): epoch=, rank=, world_size=, start_batch=,
# worker=, num_workers= -> batches
PassSource = Callable[..., Iterator[Batch | AlignedBatch]]
# its batch count (``Plan.pass_length``): epoch, rank=, world_size=, start_batch= -> int
PassLength = Callable[..., int]


def _dist_rank_world() -> tuple[int, int] | None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


class WindpipeIterableDataset(IterableDataset[Batch | AlignedBatch]):
    """Batches of one rank's pass over a plan (see the module docstring).

    ``source(epoch=, rank=, world_size=, start_batch=, worker=, num_workers=)`` yields
    the batches; ``Plan.torch_dataset`` gives it a picklable
    :class:`~sdk._state.WorkerSource` (the plan's Flight or same-host source).
    """

    def __init__(
        self,
        source: PassSource,
        *,
        plan_id: str,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Callable[[Batch | AlignedBatch], Any] | None = None,
        length: PassLength | None = None,
    ) -> None:
        super().__init__()
        self._source = source
        self._length = length
        self.plan_id = plan_id
        self.epoch = epoch
        self._rank = rank
        self._world_size = world_size
        self.transform = transform
        self._start = 0
        self._cursor = 0
        self._in_workers = False  # handed to DataLoader worker processes
        self._tracked = False  # a WindpipeDataLoader saw the batches handed out

    def __getstate__(self) -> dict[str, Any]:
        # pickled = sent to a spawned DataLoader worker: batches come from elsewhere now
        self._in_workers, self._tracked = True, False
        return {**self.__dict__, "_in_workers": False, "_tracked": False, "_length": None}

    def __len__(self) -> int:
        """Batches the next iteration yields: the rank's pass of :attr:`epoch` from the
        resume point on (``Plan.pass_length``; what a progress bar's total is)."""
        if self._length is None:
            msg = "this dataset's source does not know its batch count"
            raise TypeError(msg)
        rank, world = self._rank_world()
        return self._length(self.epoch, rank=rank, world_size=world, start_batch=self._start)

    @property
    def rank(self) -> int:
        """This process's rank (torch.distributed when initialized)."""
        return self._rank_world()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks (torch.distributed when initialized)."""
        return self._rank_world()[1]

    def _rank_world(self) -> tuple[int, int]:
        from_dist = _dist_rank_world()
        if from_dist is not None:
            if self._rank is not None and (self._rank, self._world_size) != from_dist:
                msg = (
                    f"rank {self._rank}/world {self._world_size} was given, but "
                    f"torch.distributed says {from_dist[0]}/{from_dist[1]}"
                )
                raise InvalidConfig(msg)
            return from_dist
        rank = 0 if self._rank is None else self._rank
        world = 1 if self._world_size is None else self._world_size
        try:
            check_rank(rank, world)
        except WindpipeError as exc:  # the dataset's own settings: a config problem
            raise InvalidConfig(exc.message, details=exc.details) from None
        return rank, world

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration streams (from its first batch)."""
        if epoch < 0:
            msg = f"epoch must be >= 0, got {epoch}"
            raise InvalidConfig(msg)
        self.epoch = epoch
        self._start = 0
        self._cursor = 0

    def state_dict(self, *, after: Batch | None = None) -> dict[str, Any]:
        """``{"plan_id", "epoch", "batch"}``: where to resume (``after`` = last batch consumed)."""
        if after is None and self._in_workers and not self._tracked:
            msg = ("this dataset was iterated by DataLoader worker processes, so it cannot "
                   "see which batch you reached: pass the last batch consumed, "
                   "ds.state_dict(after=batch), or iterate plan.dataloader(...), whose "
                   "loader tracks it (a transform must keep batch_idx)")
            raise InvalidConfig(msg, details={"plan_id": self.plan_id})
        cursor = self._cursor if after is None else after.batch_idx + 1
        return {"plan_id": self.plan_id, "epoch": self.epoch, "batch": cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields the rest of ``state``'s epoch."""
        if state.get("plan_id") != self.plan_id:
            msg = (
                f"this state belongs to plan {state.get('plan_id')!r}, "
                f"not to {self.plan_id!r}"
            )
            raise InvalidConfig(msg)
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            msg = f"invalid state: epoch {epoch}, batch {batch}"
            raise InvalidConfig(msg)
        self.epoch = epoch
        self._start = batch
        self._cursor = batch

    def __iter__(self) -> Iterator[Any]:
        rank, world = self._rank_world()
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if info is None:
            self._in_workers = False
        start = self._start
        self._start = 0
        for batch in self._source(
            epoch=self.epoch, rank=rank, world_size=world, start_batch=start,
            worker=worker, num_workers=workers,
        ):
            self._cursor = batch.batch_idx + 1
            yield batch if self.transform is None else self.transform(batch)


def _batch_idx(item: Any) -> int | None:
    value = item.get("batch_idx") if isinstance(item, dict) else getattr(item, "batch_idx", None)
    return int(value) if isinstance(value, int | torch.Tensor) else None


class WindpipeDataLoader(DataLoader[Any]):
    """A ``DataLoader`` that keeps its :class:`WindpipeIterableDataset`'s resume cursor
    from the batches it hands out, also when workers in other processes made them."""

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            raise InvalidConfig(_MAIN_GUARD)
        if self.num_workers > 0:
            check_main_guard(self.multiprocessing_context)
        dataset = self.dataset
        assert isinstance(dataset, WindpipeIterableDataset)
        for item in super().__iter__():
            idx = _batch_idx(item)
            if idx is not None and dataset._in_workers:
                dataset._cursor, dataset._tracked = idx + 1, True
            elif dataset._in_workers:
                dataset._tracked = False
            yield item


_MAIN_GUARD = ("a DataLoader was started while a spawned worker process was importing your "
               "script: put the training code under `if __name__ == \"__main__\":` "
               "(spawn workers import the main module again)")


def check_spawn(transform: Any, options: dict[str, Any]) -> None:
    """Refuse, with what to do, what a ``spawn`` worker cannot do: run a transform it
    cannot import (a lambda, a function defined in a notebook or an interactive
    ``__main__``)."""
    context = options.get("multiprocessing_context")
    method = context if isinstance(context, str) or context is None else (
        context.get_start_method())
    if not options.get("num_workers") or method not in ("spawn", "forkserver"):
        return
    if transform is None:
        return
    main = sys.modules.get("__main__")
    interactive = main is None or not hasattr(main, "__file__")
    if getattr(transform, "__module__", None) == "__main__" and interactive:
        msg = (f"transform {getattr(transform, '__qualname__', transform)!r} is defined in "
               f"this notebook, which {method} DataLoader workers cannot import: move it "
               "into a .py module and import it, or use num_workers=0")
        raise InvalidConfig(msg)
    try:
        pickle.dumps(transform)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        msg = (f"transform {transform!r} cannot be sent to {method} DataLoader workers "
               f"({exc}): use a function defined at the top level of a module, or "
               "num_workers=0")
        raise InvalidConfig(msg) from None


def dataloader_options(config: LoaderOptions, **options: Any) -> dict[str, Any]:
    """``DataLoader`` kwargs from ``config``'s runtime options, ``options`` winning.

    ``options`` named as :class:`LoaderOptions` fields are merged into ``config``
    (:meth:`LoaderOptions.merged`); the others must be ``DataLoader``'s own
    (``collate_fn``, ``timeout``, ...) and pass through; a name that is neither is
    :class:`InvalidConfig`. Then:

    * ``batch_size=None``: the dataset yields whole batches (anything else is refused);
    * ``num_workers``; with workers, ``prefetch_factor`` (per worker, torch's meaning),
      ``persistent_workers`` and ``multiprocessing_context`` (default ``"spawn"``;
      ``"fork"`` is only safe before any Flight connection exists in the parent).
      Without workers torch refuses them, so the config's values are not passed then,
      and giving one here is :class:`InvalidConfig`;
    * ``pin_memory``: only when CUDA is available (``None`` means yes on CUDA).
    """
    given = {k: v for k, v in options.items() if k in LoaderOptions.OPTION_NAMES}
    extra = {k: v for k, v in options.items() if k not in given}
    _check_dataloader_arguments(extra)
    if extra.get("batch_size") is not None:
        msg = ("a windpipe dataset yields whole batches: DataLoader needs batch_size=None, "
               f"got {extra['batch_size']!r}; set the batch size in WindowConfig")
        raise InvalidConfig(msg)
    extra.pop("batch_size", None)
    opts = config.merged(**given)
    workers = opts.workers
    pin = opts.pin_memory
    kwargs: dict[str, Any] = {
        "batch_size": None, "num_workers": workers.num_workers,
        "pin_memory": bool(torch.cuda.is_available() and (pin is None or pin)),
    }
    if workers.num_workers > 0:
        context = workers.multiprocessing_context
        kwargs["prefetch_factor"] = workers.prefetch_factor
        kwargs["persistent_workers"] = workers.persistent_workers
        kwargs["multiprocessing_context"] = "spawn" if context is None else context
    elif (given.get("persistent_workers") or given.get("multiprocessing_context") is not None
          or "prefetch_factor" in given):
        msg = ("persistent_workers, multiprocessing_context and prefetch_factor need "
               "num_workers > 0")
        raise InvalidConfig(msg)
    return {**kwargs, **extra}


def _check_dataloader_arguments(extra: dict[str, Any]) -> None:
    accepted = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}
    for name in extra:
        if name not in accepted:
            close = difflib.get_close_matches(
                name, [*LoaderOptions.OPTION_NAMES, *accepted], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            msg = (f"{name!r} is neither a loader option (LoaderOptions) nor an argument "
                   f"of torch's DataLoader{hint}")
            raise InvalidConfig(msg, details={"option": name})
