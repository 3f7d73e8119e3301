"""``Plan``: a stored window plan of a split, with the next step.

A plan reports and streams: a frozen dataclass over the server's JSON answer
(``raw``) plus the :class:`~sdk._state.ClientState` of the catalog it came from, whose
public methods it calls (REST, and the plan's :class:`~sdk._sources.BatchSource`).
torch is imported when a plan's batches are first asked for (``sdk._torch_import``).
Made by :meth:`sdk._handles.Split.plan` (and re-exported there).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdk._html import html_table, human_count, text_table
from sdk._loader import DeviceLoader
from sdk._models import PlanReport
from sdk._plots import plot_plan
from sdk._torch_import import require_torch, torch_support
from sdk._train_val import PassLengthMixin
from services.contract.configs import LoaderConfig
from services.planning.artifact import PlanArtifact

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from torch.utils.data import DataLoader

    from sdk._aligned import AlignedBatch
    from sdk._batch import Batch
    from sdk._sources import BatchSource
    from sdk._state import ClientState
    from sdk._torch import WindpipeIterableDataset
    from services.materialize.batch_memory import BatchMemory

__all__ = ["Plan"]


@dataclass(frozen=True, eq=False)
class Plan(PassLengthMixin):
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

    @classmethod
    def from_json(
        cls, state: ClientState, body: dict[str, Any], *, created: bool = False,
        config: LoaderConfig | None = None,
    ) -> Plan:
        """From a ``create_plan`` / ``get_plan`` answer (``PlanOut``).

        ``config`` keeps the caller's runtime fields; else the stored planning fields.
        """
        return cls(
            id=str(body["id"]), split_id=str(body["split_id"]),
            config=config or LoaderConfig.model_validate(body["config"]),
            created=created, raw=body, _state=state,
        )

    @property
    def n_batches(self) -> int:
        """Batches in epoch 0 over all ranks, as the catalog counted them."""
        return int(self.raw["n_batches"])

    def retire(self) -> Plan:
        """Retire this plan (soft; ``DELETE /v1/plans/{id}``): streams already running
        finish, new ones (Flight tickets or same-host passes) raise :class:`Conflict`."""
        body = self._state.delete_json(f"/v1/plans/{self.id}")
        return Plan.from_json(self._state, body, config=self.config)

    @property
    def retired_at(self) -> str | None:
        """When this plan (or its split or version) was retired (ISO 8601), or None."""
        value = self.raw.get("retired_at")
        return None if value is None else str(value)

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

    def _source(self, *, transport: str | None, data_access: str | None = None,
                epoch: int = 0, progress: bool | None = None) -> BatchSource:
        """Where this plan's batches come from, with ``transport`` and ``data_access``
        (arguments, else the config): the host's tier (warmed by its server) or Flight
        (every server warmed first for ``full_in_mem``); see ``ClientState.source``."""
        return self._state.source(
            self.id, transport=self.config.transport if transport is None else transport,
            data_access=self.config.data_access if data_access is None else data_access,
            epoch=epoch, progress=progress,
        )

    def transport(self, transport: str | None = None) -> str:
        """``"local"`` or ``"flight"``: the path :meth:`batches` takes with ``transport``
        (argument, else the config; see ``sdk._local``)."""
        return self._source(transport=transport, data_access="windowed",
                            progress=False).transport

    def batches(
        self, epoch: int = 0, rank: int = 0, world_size: int = 1, start_batch: int = 0,
        *, data_access: str | None = None, progress: bool | None = None,
        transport: str | None = None,
    ) -> Iterator[Batch | AlignedBatch]:
        """One rank's pass over ``epoch`` as CPU :class:`Batch` es, from ``start_batch`` on
        (an aligned plan's are :class:`AlignedBatch` es, SEMANTICS 9).

        ``transport`` (argument, else the plan's config): ``"auto"`` builds the batches
        in this process from the host's shared tier when a Flight server of the
        deployment shares one with this host, else streams them; ``"local"`` and
        ``"flight"`` insist (``sdk._local``). Both give the same batches, byte for byte.
        With ``data_access="full_in_mem"`` a streamed plan is first warmed into the
        servers' caches (:meth:`warm`), before this returns. Needs torch.
        """
        require_torch()
        source = self._source(transport=transport, data_access=data_access, epoch=epoch,
                              progress=progress)
        return source.batches(epoch=epoch, rank=rank, world_size=world_size,
                              start_batch=start_batch)

    def loader(
        self,
        device: str | None = None,
        epoch: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
        prefetch_factor: int | None = None,
        pin_memory: bool | None = None,
        non_blocking: bool | None = None,
        prefetch_to_device: bool | None = None,
        pinned_bytes_cap: int | None = None,
        progress: bool | None = None,
        data_access: str | None = None,
        transport: str | None = None,
    ) -> DeviceLoader:
        """Batches on ``device`` (default ``config.device``), read ahead in the background.

        Options left as None come from the plan's :class:`LoaderConfig`; ``transport``
        and ``full_in_mem`` as in :meth:`batches`. Needs torch.
        """
        require_torch()
        source = self._source(transport=transport, data_access=data_access, epoch=epoch,
                              progress=progress)
        c = self.config
        def gather_source(memory: BatchMemory) -> Iterator[Batch | AlignedBatch]:
            return source.batches(epoch=epoch, rank=rank, world_size=world_size,
                                  start_batch=start_batch, memory=memory)

        return DeviceLoader(
            lambda: source.batches(epoch=epoch, rank=rank, world_size=world_size,
                                   start_batch=start_batch),
            gather_source=gather_source,
            device=device or c.device,
            prefetch_factor=prefetch_factor or c.prefetch_factor,
            pin_memory=c.pin_memory if pin_memory is None else pin_memory,
            non_blocking=c.non_blocking if non_blocking is None else non_blocking,
            prefetch_to_device=(
                c.prefetch_to_device if prefetch_to_device is None else prefetch_to_device
            ),
            pinned_bytes_cap=pinned_bytes_cap, failovers=source.failovers(),
            progress=progress, desc=f"epoch {epoch}", length=functools.partial(
                self.pass_length, epoch, rank=rank, world_size=world_size,
                start_batch=start_batch),
        )

    def torch_dataset(
        self, epoch: int = 0, *, rank: int | None = None, world_size: int | None = None,
        transform: Any = None, data_access: str | None = None, progress: bool | None = None,
        transport: str | None = None,
    ) -> WindpipeIterableDataset:
        """An ``IterableDataset`` for ``DataLoader(ds, batch_size=None)`` (see ``sdk._torch``).

        The plan is warmed once, here, in this process (not in each DataLoader worker):
        into the host's tier when ``transport`` takes the same-host path (each worker
        then maps it), else into the servers' caches for ``full_in_mem``.
        :meth:`dataloader` applies the config's runtime fields. Needs torch.
        """
        support = torch_support()
        source = self._source(transport=transport, data_access=data_access, epoch=epoch,
                              progress=progress)
        dataset: WindpipeIterableDataset = support.WindpipeIterableDataset(
            self._state.worker_source(self.id, transport=source.transport),
            plan_id=self.id, epoch=epoch, rank=rank, world_size=world_size, transform=transform,
            length=self.pass_length,
        )
        return dataset

    def dataloader(
        self, epoch: int = 0, *, rank: int | None = None, world_size: int | None = None,
        transform: Any = None, data_access: str | None = None, progress: bool | None = None,
        transport: str | None = None, **options: Any,
    ) -> DataLoader[Any]:
        """``DataLoader(self.torch_dataset(...), batch_size=None, ...)`` from the config.

        ``num_workers``, ``persistent_workers``, ``multiprocessing_context`` (default
        ``"spawn"`` with workers: gRPC and ``fork`` do not mix), ``pin_memory`` (only
        with CUDA) and ``prefetch_factor`` come from the plan's :class:`LoaderConfig`
        unless given in ``options``; other ``options`` go to ``DataLoader`` as is
        (see ``sdk._torch.dataloader_options``). The loader's ``dataset`` is the
        :class:`WindpipeIterableDataset` (``set_epoch``, ``state_dict``); the loader
        keeps its resume cursor also with workers. A transform spawn workers cannot
        import (a lambda, a notebook function) raises :class:`InvalidConfig` here.
        """
        support = torch_support()
        kwargs = support.dataloader_options(self.config, **options)
        support.check_spawn(transform, kwargs)
        dataset = self.torch_dataset(
            epoch, rank=rank, world_size=world_size, transform=transform,
            data_access=data_access, progress=progress, transport=transport,
        )
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
