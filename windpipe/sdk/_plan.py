"""``Plan``: a stored window plan of a split, with the next step.

A plan reports and streams: a frozen dataclass over the server's JSON answer
(``raw``) plus the :class:`~sdk._state.ClientState` of the catalog it came from, whose
public methods it calls (REST, and the plan's :class:`~sdk._sources.BatchSource`).
torch is imported when a plan's batches are first asked for (``windpipe.sdk._torch_import``).
Made by :meth:`windpipe.sdk._handles.Split.plan` (and re-exported there).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from windpipe.sdk._answer import AnswerFields, FromAnswer
from windpipe.sdk._exceptions import InvalidConfig
from windpipe.sdk._html import html_table, human_count, text_table
from windpipe.sdk._loader import DeviceLoader
from windpipe.sdk._models import PlanReport
from windpipe.sdk._plots import plot_plan
from windpipe.sdk._tf import WindpipeTFDataset
from windpipe.sdk._torch_import import require_torch, torch_support
from windpipe.sdk._train_val import PassLengthMixin
from windpipe.services.contract.configs import LoaderConfig
from windpipe.services.contract.options import (
    DeviceOptions,
    LoaderOptions,
    OptionKeywords,
    SourceOptions,
    Transport,
    WorkerOptions,
)
from windpipe.services.planning.artifact import PlanArtifact

if TYPE_CHECKING:
    from typing import Unpack

    from matplotlib.figure import Figure
    from torch.utils.data import DataLoader

    from windpipe.sdk._aligned import AlignedBatch
    from windpipe.sdk._batch import Batch
    from windpipe.sdk._sources import BatchSource
    from windpipe.sdk._state import ClientState
    from windpipe.sdk._torch import WindpipeIterableDataset
    from windpipe.services.materialize.batch_memory import BatchMemory

__all__ = ["Plan"]

# the options each call reads; another one given to it is refused, not ignored
_SOURCE = tuple(SourceOptions.model_fields)
_READS: dict[str, tuple[str, ...]] = {
    "plan.batches": _SOURCE,
    "plan.torch_dataset": _SOURCE,
    "plan.tf_dataset": _SOURCE,
    "plan.loader": (*_SOURCE, *DeviceOptions.model_fields, "prefetch_factor", "num_workers"),
    "plan.dataloader": (*_SOURCE, "pin_memory", *WorkerOptions.model_fields),
}


@dataclass(frozen=True, eq=False)
class Plan(PassLengthMixin, FromAnswer):
    """A stored window plan: report it, stream it, feed a device or a torch DataLoader.

    ``config`` is the :class:`LoaderConfig` given to ``split.plan`` (its runtime
    fields steer :meth:`loader`), or rebuilt from the stored planning fields.
    """

    id: str
    split_id: str
    config: LoaderConfig
    created: bool
    raw: dict[str, Any] = field(repr=False)
    _state: ClientState = field(repr=False)

    # from a ``create_plan`` / ``get_plan`` answer (``PlanOut``); ``from_json(...,
    # config=...)`` keeps the caller's runtime fields, else the stored planning fields
    ANSWER_FIELDS: ClassVar[AnswerFields] = {
        "split_id": ("split_id", str),
        "config": ("config", LoaderConfig.model_validate),
    }

    @property
    def n_batches(self) -> int:
        """Batches in epoch 0 over all ranks, as the catalog counted them."""
        return int(self.raw["n_batches"])

    def retire(self) -> Plan:
        """Retire this plan (soft; ``DELETE /v1/plans/{id}``): streams already running
        finish, new ones (Flight tickets or same-host passes) raise :class:`Conflict`."""
        body = self._state.delete_json(f"/v1/plans/{self.id}")
        return Plan.from_json(self._state, body, config=self.config)

    def report(self, world_size: int = 1) -> PlanReport:
        """Batches, tokens and bytes per epoch and per rank, and everything dropped."""
        body = self._state.get_json(f"/v1/plans/{self.id}/report", world_size=world_size)
        return PlanReport(plan_id=self.id, world_size=world_size, raw=dict(body))

    def warm(self, *, epoch: int = 0, progress: bool | None = None) -> dict[str, dict[str, Any]]:
        """Load this plan's split into every Flight server's cache (``full_in_mem``).

        Returns, per Flight location, ``{"chunks", "bytes", "seconds"}``. A split larger
        than a server's cache budget raises :class:`ResourceExhausted` naming both sizes.
        ``progress``: a tqdm bar in bytes (None: when the output is interactive).
        """
        results = self._state.warm(self.id, epoch=epoch, progress=progress)
        return {loc: r.as_dict() for loc, r in results.items()}

    def _options(self, call: str, overrides: Mapping[str, Any]) -> LoaderOptions:
        """The plan's options with a call's ``overrides`` merged by
        :meth:`LoaderOptions.merged` (names and values checked; a value given wins, 0
        and False too); an option ``call`` does not read is refused, naming the calls
        that do, rather than silently ignored."""
        options = self.config.merged(**overrides)
        for name in overrides:
            if name not in _READS[call]:
                where = ", ".join(c for c, names in _READS.items() if name in names)
                msg = f"{call} does not use the option {name!r}: it steers {where}"
                raise InvalidConfig(msg, details={"option": name, "call": call})
        return options

    def _source(self, *, epoch: int = 0, progress: bool | None = None,
                **options: Unpack[OptionKeywords]) -> BatchSource:
        """Where this plan's batches come from, with the config's ``transport`` and
        ``data_access`` unless given: the host's tier (warmed by its server) or Flight
        (every server warmed first for ``full_in_mem``); see ``ClientState.source``."""
        return self._open(self._options("plan.batches", options).source, epoch=epoch,
                          progress=progress)

    def _open(self, source: SourceOptions, *, epoch: int,
              progress: bool | None) -> BatchSource:
        return self._state.source(self.id, transport=source.transport,
                                  data_access=source.data_access, epoch=epoch,
                                  progress=progress, input_valid=source.input_valid)

    def transport(self, transport: Transport | None = None) -> str:
        """``"local"`` or ``"flight"``: the path :meth:`batches` takes with ``transport``
        (argument, else the config; see ``windpipe.sdk._local``)."""
        given: OptionKeywords = {} if transport is None else {"transport": transport}
        path = self._options("plan.batches", given).transport
        return self._open(SourceOptions(transport=path), epoch=0, progress=False).transport

    def batches(
        self, epoch: int = 0, rank: int = 0, world_size: int = 1, start_batch: int = 0,
        *, progress: bool | None = None, **options: Unpack[OptionKeywords],
    ) -> Iterator[Batch | AlignedBatch]:
        """One rank's pass over ``epoch`` as CPU :class:`Batch` es, from ``start_batch`` on
        (an aligned plan's are :class:`AlignedBatch` es, SEMANTICS 9).

        ``options``: ``transport`` and ``data_access``, else the config's (any other
        option is :class:`InvalidConfig`: it does not steer this call). ``transport``
        ``"auto"`` builds the batches in this process from the host's shared tier when a
        Flight server of the deployment shares one with this host, else streams them;
        ``"local"`` and ``"flight"`` insist (``windpipe.sdk._local``). Both give the same
        batches, byte for byte. With ``data_access="full_in_mem"`` a streamed plan is
        first warmed into the servers' caches (:meth:`warm`), before this returns.
        Needs torch.
        """
        require_torch()
        source = self._source(epoch=epoch, progress=progress, **options)
        return source.batches(epoch=epoch, rank=rank, world_size=world_size,
                              start_batch=start_batch)

    def loader(
        self,
        epoch: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
        pinned_bytes_cap: int | None = None,
        progress: bool | None = None,
        **options: Unpack[OptionKeywords],
    ) -> DeviceLoader:
        """Batches on the device, read ahead in the background (docs/sdk.md, "The
        device feed").

        ``options`` override the plan's :class:`LoaderConfig` (a value given wins):
        ``device``, ``pin_memory``, ``prefetch_to_device``, ``non_blocking``, the
        read-ahead's ``prefetch_factor`` and ``num_workers`` (``read_ahead`` batches,
        :attr:`LoaderOptions.read_ahead`), ``transport`` and ``data_access`` as in
        :meth:`batches`. Needs torch.
        """
        if not isinstance(epoch, int):
            msg = f"epoch must be an int, got {epoch!r} (the device is a keyword: device=...)"
            raise InvalidConfig(msg)
        require_torch()
        opts = self._options("plan.loader", options)
        source = self._open(opts.source, epoch=epoch, progress=progress)

        def gather_source(memory: BatchMemory) -> Iterator[Batch | AlignedBatch]:
            return source.batches(epoch=epoch, rank=rank, world_size=world_size,
                                  start_batch=start_batch, memory=memory)

        feed = opts.device_feed
        return DeviceLoader(
            lambda: source.batches(epoch=epoch, rank=rank, world_size=world_size,
                                   start_batch=start_batch),
            gather_source=gather_source, device=feed.device, read_ahead=opts.read_ahead,
            pin_memory=feed.pin_memory, non_blocking=feed.non_blocking,
            prefetch_to_device=feed.prefetch_to_device,
            pinned_bytes_cap=pinned_bytes_cap, failovers=source.failovers(),
            progress=progress, desc=f"epoch {epoch}", length=functools.partial(
                self.pass_length, epoch, rank=rank, world_size=world_size,
                start_batch=start_batch),
        )

    def torch_dataset(
        self, epoch: int = 0, *, rank: int | None = None, world_size: int | None = None,
        transform: Any = None, progress: bool | None = None,
        **options: Unpack[OptionKeywords],
    ) -> WindpipeIterableDataset:
        """An ``IterableDataset`` for ``DataLoader(ds, batch_size=None)`` (see
        ``windpipe.sdk._torch``).

        ``options``: ``transport`` and ``data_access``, as in :meth:`batches`. The plan
        is warmed once, here, in this process (not in each DataLoader worker): into the
        host's tier when ``transport`` takes the same-host path (each worker then maps
        it), else into the servers' caches for ``full_in_mem``. :meth:`dataloader`
        applies the config's other options. Needs torch.
        """
        opts = self._options("plan.torch_dataset", options)
        return self._dataset(opts.source, epoch, rank=rank, world_size=world_size,
                             transform=transform, progress=progress)

    def _dataset(self, source: SourceOptions, epoch: int, *, rank: int | None,
                 world_size: int | None, transform: Any,
                 progress: bool | None) -> WindpipeIterableDataset:
        support = torch_support()
        path = self._open(source, epoch=epoch, progress=progress).transport
        dataset: WindpipeIterableDataset = support.WindpipeIterableDataset(
            self._state.worker_source(self.id, transport=path,
                                      input_valid=source.input_valid),
            plan_id=self.id, epoch=epoch, rank=rank, world_size=world_size, transform=transform,
            length=self.pass_length,
        )
        return dataset

    def tf_dataset(
        self, epoch: int = 0, *, rank: int | None = None, world_size: int | None = None,
        input_context: Any = None, progress: bool | None = None,
        **options: Unpack[OptionKeywords],
    ) -> WindpipeTFDataset:
        """One rank's passes as a ``tf.data.Dataset`` (``.dataset()``), the batches of
        :meth:`batches` as TensorFlow tensors (see ``windpipe.sdk._tf``; ``windpipe.tf``).

        ``input_context``: the ``tf.distribute.InputContext`` a strategy's
        ``distribute_datasets_from_function`` passes; its input pipeline is the rank, its
        number of pipelines the world size (instead of ``rank`` and ``world_size``).
        ``options``: ``transport``, ``data_access`` and ``input_valid``, as in
        :meth:`batches`; the plan is warmed here. Needs TensorFlow, not torch.
        """
        if input_context is not None:
            if rank is not None or world_size is not None:
                msg = "give an input_context or a rank and world_size, not both"
                raise InvalidConfig(msg)
            rank = int(input_context.input_pipeline_id)
            world_size = int(input_context.num_input_pipelines)
        source = self._options("plan.tf_dataset", options).source
        return WindpipeTFDataset(
            self._open(source, epoch=epoch, progress=progress), plan_id=self.id,
            config=self.config, epoch=epoch, rank=rank, world_size=world_size,
            input_valid=source.input_valid, length=self.pass_length)

    def dataloader(
        self, epoch: int = 0, *, rank: int | None = None, world_size: int | None = None,
        transform: Any = None, progress: bool | None = None, **options: Any,
    ) -> DataLoader[Any]:
        """``DataLoader(self.torch_dataset(...), batch_size=None, ...)`` from the config.

        ``options`` named as :class:`LoaderOptions` fields override the config's
        (``num_workers``, ``prefetch_factor`` (per worker, as torch means it),
        ``persistent_workers``, ``multiprocessing_context`` (default ``"spawn"`` with
        workers: gRPC and ``fork`` do not mix), ``pin_memory`` (only with CUDA),
        ``transport``, ``data_access``); the others must be ``DataLoader``'s own and go
        to it as they are (see ``windpipe.sdk._torch.dataloader_options``). The loader's
        ``dataset`` is the :class:`WindpipeIterableDataset` (``set_epoch``,
        ``state_dict``); the loader keeps its resume cursor also with workers. A
        transform spawn workers cannot import (a lambda, a notebook function) raises
        :class:`InvalidConfig` here.
        """
        support = torch_support()
        ours = {k: v for k, v in options.items() if k in LoaderOptions.OPTION_NAMES}
        opts = self._options("plan.dataloader", ours)
        kwargs = support.dataloader_options(self.config, **options)
        support.check_spawn(transform, kwargs)
        dataset = self._dataset(opts.source, epoch, rank=rank, world_size=world_size,
                                transform=transform, progress=progress)
        loader: DataLoader[Any] = support.WindpipeDataLoader(dataset, **kwargs)
        return loader

    def plot(self, *, epoch: int = 0, max_streams: int = 60) -> Figure:
        """Windows over streams (padding in red) and batches per protocol of ``epoch``,
        from the stored plan (needs ``windpipe[plot]``)."""
        artifact = PlanArtifact.from_ipc(self._state.artifact_bytes(self.id))
        return plot_plan(artifact, epoch=epoch, max_streams=max_streams)

    def _rows(self) -> list[tuple[str, Any]]:
        c = self.config
        rows: list[tuple[str, Any]] = [
            ("split", f"{self.split_id} [{c.split}]"), ("strategy", c.strategy),
            ("window", f"{c.default_window.batch_size}x{c.default_window.seq_len}"),
            ("inputs", {p: list(v) for p, v in c.inputs.items()}),
            ("targets", {p: list(v) for p, v in c.targets.items()}),
            ("stateful_n_windows", c.stateful_n_windows),
        ]
        if c.align_by is not None:
            rows.append(("aligned by", f"{', '.join(c.alignment_key)}: "
                                       f"{', '.join(c.ordered_protocols())} side by side"))
        rows.append(("batches/epoch", human_count(self.n_batches)))
        return rows

    def __repr__(self) -> str:
        return text_table(f"Plan {self.id}", self._rows())

    def _repr_html_(self) -> str:
        return html_table(f"Plan {self.id}", self._rows())
