"""Where a plan's batches come from: one :class:`BatchSource` per transport.

A source makes one rank's pass of one plan: :meth:`BatchSource.records` gives the
record batches with their metadata, :meth:`BatchSource.batches` the :class:`~sdk.Batch`
es (an aligned plan's parts put together as :class:`~sdk.AlignedBatch` es). Two
transports make the same bytes:

* :class:`FlightSource` streams them from the deployment's Flight servers;
* :class:`LocalSource` builds them in this process, after asking the catalog, as a
  Flight server would, whether the plan is still live: from the host's shared tier
  (``windpipe.sdk._local``), or from storage when the catalog runs in this process
  (``windpipe.sdk._in_process``).

Choosing the transport is choosing the source (``ClientState.source``, ``windpipe.sdk._state``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pyarrow as pa

from windpipe.sdk._aligned import AlignedBatch, group_parts
from windpipe.sdk._batch import Batch, batch_from_arrays, batch_from_arrow
from windpipe.services.contract.wire import BatchMetadata, FlightCommand
from windpipe.services.materialize.batch_memory import BatchMemory
from windpipe.services.materialize.builder import BuiltBatch

if TYPE_CHECKING:
    from windpipe.sdk._stream import FlightStream

__all__ = ["BatchSource", "FlightSource", "LocalSource", "PassReader", "to_batch"]

Record = tuple[Any, BatchMetadata]


class PassReader(Protocol):
    """What builds a plan's passes in this process (``windpipe.sdk._local.LocalReader``,
    ``windpipe.sdk._in_process.InProcessReader``)."""

    def records(self, *, epoch: int, rank: int, world_size: int, start_batch: int,
                memory: BatchMemory | None = None,
                ) -> Iterator[tuple[BuiltBatch, BatchMetadata]]:
        """One rank's pass from ``start_batch`` on (its full-window batches written into
        ``memory`` where the reader builds them so; a GPU feed's pinned buffer)."""
        ...


def to_batch(record: pa.RecordBatch | BuiltBatch, meta: BatchMetadata) -> Batch:
    """A streamed record batch, or a batch built in this process, as a :class:`Batch`."""
    if isinstance(record, BuiltBatch):
        return batch_from_arrays(record.windows, record.mask, record.provenance, meta,
                                 has_channel=record.has_channel,
                                 input_valid=record.input_valid)
    return batch_from_arrow(record, meta)


class BatchSource(ABC):
    """One plan's passes over one transport (``transport``: ``"flight"`` or ``"local"``);
    ``input_valid``: its batches carry ``input_valid`` (SEMANTICS 5b)."""

    transport: ClassVar[str]

    def __init__(self, plan_id: str, *, input_valid: bool = False) -> None:
        self.plan_id = plan_id
        self.input_valid = input_valid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.plan_id!r})"

    def records(self, *, epoch: int, rank: int, world_size: int, start_batch: int,
                memory: BatchMemory | None = None) -> Iterator[Record]:
        """One rank's pass from ``start_batch`` on, as (record, metadata) pairs; the
        arguments are checked here (``InvalidRequest``), before anything is read.
        ``memory``: where a batch built in this process may be written (ignored by
        sources that receive their batches)."""
        command = FlightCommand(plan_id=self.plan_id, epoch=epoch, rank=rank,
                                world_size=world_size, start_batch=start_batch,
                                input_valid=self.input_valid)
        return self._records(command, memory)

    @abstractmethod
    def _records(self, command: FlightCommand, memory: BatchMemory | None) -> Iterator[Record]:
        """The pass ``command`` names."""

    def batches(
        self, *, epoch: int, rank: int, world_size: int, start_batch: int, worker: int = 0,
        num_workers: int = 1, memory: BatchMemory | None = None,
    ) -> Iterator[Batch | AlignedBatch]:
        """One rank's pass as batches, from ``start_batch`` on; ``worker`` of
        ``num_workers`` (DataLoader workers) takes the batches with
        ``(batch_idx - start_batch) % num_workers == worker``. Nothing is read before
        the first batch is asked for. ``memory``: as :meth:`records`."""
        records = self.records(epoch=epoch, rank=rank, world_size=world_size,
                               start_batch=start_batch, memory=memory)
        if num_workers != 1:
            records = (r for r in records
                       if (r[1].batch_idx - start_batch) % num_workers == worker)
        yield from group_parts(records, to_batch)

    def failovers(self) -> Callable[[], int]:
        """A counter of the failovers from now on (what ``LoaderStats`` reports)."""
        return lambda: 0


class FlightSource(BatchSource):
    """The batches streamed from the deployment's Flight servers (with failover)."""

    transport = "flight"

    def __init__(self, plan_id: str, stream: Callable[[], FlightStream], *,
                 input_valid: bool = False) -> None:
        super().__init__(plan_id, input_valid=input_valid)
        self._stream = stream

    def _records(self, command: FlightCommand, memory: BatchMemory | None) -> Iterator[Record]:
        return self._stream().batches(command)

    def failovers(self) -> Callable[[], int]:
        stream = self._stream()
        before = stream.counters.failovers
        return lambda: stream.counters.failovers - before


class LocalSource(BatchSource):
    """The batches built in this process by ``reader`` (from the host's tier, or from
    storage in embedded mode; a reader of the plan as read with ``input_valid`` when
    its batches carry it); ``check_live(plan_id)`` raises what a Flight server would
    refuse a retired plan with."""

    transport = "local"

    def __init__(self, plan_id: str, reader: PassReader,
                 check_live: Callable[[str], None], *, input_valid: bool = False) -> None:
        super().__init__(plan_id, input_valid=input_valid)
        self.reader = reader
        self._check_live = check_live

    def _records(self, command: FlightCommand, memory: BatchMemory | None) -> Iterator[Record]:
        self._check_live(command.plan_id)
        return self.reader.records(epoch=command.epoch, rank=command.rank,
                                   world_size=command.world_size,
                                   start_batch=command.start_batch, memory=memory)
