"""``Catalog``: the entry point of the SDK (REST for metadata, Flight for batches).

```python
cat = Catalog("http://127.0.0.1:8000", token=None)
ver = cat.register("demo", root="file:///data/demo", manifest="manifest.parquet")
```

Flight locations come from the catalog's ``GET /v1/config`` unless given with
``flight_locations=[...]``.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from sdk._aligned import AlignedBatch, group_parts
from sdk._batch import Batch, batch_from_arrays, batch_from_arrow
from sdk._exceptions import (
    Conflict,
    InvalidRequest,
    RegistrationWarning,
    WindpipeError,
    as_sdk_error,
)
from sdk._handles import DatasetVersion, Plan, Split
from sdk._html import html_table, progress_bar
from sdk._loader import DeviceLoader
from sdk._local import LocalReader, LocalReaders
from sdk._locations import LocationMap
from sdk._models import DatasetInfo
from sdk._rest import RestClient
from sdk._stream import FlightStream
from services.contract.errors import WindpipeError as ContractError
from services.contract.wire import BatchMetadata, FlightCommand
from services.materialize.builder import BuiltBatch
from services.planning.artifact import ARTIFACT_MEDIA_TYPE

if TYPE_CHECKING:
    import httpx

__all__ = ["Catalog"]

_ARROW_STREAM = "application/vnd.apache.arrow.stream"


def _to_batch(record: pa.RecordBatch | BuiltBatch, meta: BatchMetadata) -> Batch:
    """A streamed record batch, or a batch built in this process, as a :class:`Batch`."""
    if isinstance(record, BuiltBatch):
        return batch_from_arrays(record.inputs, record.targets, record.mask,
                                 record.provenance, meta, has_channel=record.has_channel)
    return batch_from_arrow(record, meta)


def _flight_locations(config: dict[str, Any]) -> list[str]:
    for key in ("flight_locations", "flight_endpoints", "flight"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("locations") or value.get("endpoints")
        if isinstance(value, str):
            return [value]
        if isinstance(value, list | tuple) and value:
            return [str(v["uri"] if isinstance(v, dict) else v) for v in value]
    return []


class Catalog:
    """A client of one windpipe deployment.

    ``url``: the catalog's REST base URL. ``token``: bearer token, sent to the catalog
    and to the Flight servers. ``flight_locations``: ``grpc://host:port`` of the Flight
    servers, when the catalog's ``/v1/config`` should not be asked. ``read_timeout``:
    seconds to wait for each Flight batch before failing over to another server
    (``None``: wait forever). ``location_map``: rewrites the Flight locations the
    deployment advertises into ones this machine reaches
    (``{"flight-1:8815": "localhost:8815"}``; default: the
    ``WINDPIPE_FLIGHT_LOCATION_MAP`` variable; see ``sdk._locations``).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        read_timeout: float | None = 60.0,
        flight_locations: Sequence[str] | None = None,
        transport: httpx.BaseTransport | None = None,
        location_map: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._read_timeout = read_timeout
        self._rest = RestClient(
            self.url, token=token, timeout=timeout, retries=retries, transport=transport
        )
        self._flight_locations = list(flight_locations) if flight_locations else None
        self._location_map = LocationMap(location_map)
        self._stream: FlightStream | None = None
        self._lock = threading.Lock()
        self._local = LocalReaders(self.flight, self._artifact_bytes)

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def _repr_html_(self) -> str:
        rows: list[tuple[str, Any]] = [
            ("url", self.url), ("token", "set" if self._token else "none"),
            ("flight", self._flight_locations or "from /v1/config"),
        ]
        if self._location_map:
            rows.append(("location_map", self._location_map.mapping))
        try:
            rows.append(("datasets", [d.name for d in self.datasets()]))
        except WindpipeError as exc:  # a repr never raises: say why instead
            rows.append(("datasets", f"unavailable: {exc}"))
        return html_table(f"Catalog {self.url}", rows)

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP and Flight connections."""
        self._rest.close()
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- metadata -------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The deployment's ``/v1/config``: limits, features, Flight locations."""
        return dict(self._rest.get_json("/v1/config"))

    def health(self) -> bool:
        """True when the catalog answers ``/readyz``."""
        self._rest.get_json("/readyz")
        return True

    def register(
        self,
        name: str,
        *,
        root: str,
        manifest: str | None = None,
        rows: Sequence[dict[str, Any]] | pl.DataFrame | None = None,
        description: str | None = None,
        progress: bool | None = None,
    ) -> DatasetVersion:
        """Register a dataset version (idempotent: the same content returns the same version).

        Give either ``manifest`` (a parquet or CSV file relative to ``root``) or ``rows``
        (one dict per segment: ``set_id``, ``cell_id``, ``cidx``, ``protocol``,
        ``segment_path``, optional ``row_count`` and metadata). Every segment is
        validated before anything is stored; problems raise :class:`InvalidManifest`
        with ``details["problems"]``. A protocol name new to the catalog or close to a
        known one (``cyling``) registers, with a :class:`RegistrationWarning` and the
        details in the version's ``warnings``.
        """
        if (manifest is None) == (rows is None):
            msg = "register() takes exactly one of manifest= (a path under root) or rows="
            raise InvalidRequest(msg)
        body: dict[str, Any] = {"root": root}
        if manifest is not None:
            body["manifest"] = manifest
        else:
            frame_rows = rows.to_dicts() if isinstance(rows, pl.DataFrame) else list(rows or ())
            body["rows"] = frame_rows
        if description is not None:
            body["description"] = description
        answer, status = _with_spinner(
            lambda: self._rest.post_json(f"/v1/datasets/{name}/versions", body),
            desc=f"registering {name}", progress=progress,
        )
        version = DatasetVersion.from_json(self, answer, created=status == 201)
        for doubt in version.warnings:
            warnings.warn(f"{name}: {doubt['message']}", RegistrationWarning, stacklevel=2)
        return version

    def datasets(self) -> list[DatasetInfo]:
        """Every dataset, by name."""
        return [DatasetInfo.from_json(item) for item in self._rest.pages("/v1/datasets")]

    def versions(self, name: str, *, include_retired: bool = False) -> list[DatasetVersion]:
        """The versions of dataset ``name``, oldest first (retired ones only when asked)."""
        path = f"/v1/datasets/{name}/versions"
        items = (self._rest.pages(path, include_retired="true") if include_retired
                 else self._rest.pages(path))
        return [DatasetVersion.from_json(self, item) for item in items]

    def version(self, version_id: str) -> DatasetVersion:
        """A version by id."""
        return DatasetVersion.from_json(self, self._rest.get_json(f"/v1/versions/{version_id}"))

    def split(self, split_id: str) -> Split:
        """A split by id."""
        return Split.from_json(self, self._rest.get_json(f"/v1/splits/{split_id}"))

    def plan(self, plan_id: str) -> Plan:
        """A plan by id (its config rebuilt from the stored planning fields)."""
        return Plan.from_json(self, self._rest.get_json(f"/v1/plans/{plan_id}"))

    def _artifact_bytes(self, plan_id: str) -> bytes:
        """The stored plan (``GET /v1/plans/{id}/artifact``), for a same-host reader."""
        return self._rest.request("GET", f"/v1/plans/{plan_id}/artifact",
                                  accept=ARTIFACT_MEDIA_TYPE).content

    def _arrow_frame(self, path: str) -> pl.DataFrame:
        response = self._rest.request(
            "GET", path, params={"format": "arrow"}, accept=_ARROW_STREAM
        )
        table = pa.ipc.open_stream(response.content).read_all()
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    # -- streaming --------------------------------------------------------------------

    def flight(self) -> FlightStream:
        """The Flight client (created on first use from ``/v1/config``)."""
        with self._lock:
            if self._stream is None:
                locations = self._flight_locations or _flight_locations(self.config())
                self._stream = FlightStream(locations, token=self._token, timeout=self._timeout,
                                            read_timeout=self._read_timeout,
                                            location_map=self._location_map)
            return self._stream

    def _records(
        self, plan_id: str, *, epoch: int, rank: int, world_size: int, start_batch: int,
        reader: LocalReader | None = None,
    ) -> Iterator[Any]:
        """One rank's pass: built here from the host's tier (``reader``) or streamed."""
        try:
            command = FlightCommand(
                plan_id=plan_id, epoch=epoch, rank=rank, world_size=world_size,
                start_batch=start_batch,
            )
        except ContractError as exc:
            raise as_sdk_error(exc) from None
        if reader is not None:
            self._check_live(plan_id)  # what a Flight server asks before a stream
            return reader.records(epoch=epoch, rank=rank, world_size=world_size,
                                  start_batch=start_batch)
        return self.flight().batches(command)

    def _check_live(self, plan_id: str) -> None:
        """:class:`Conflict` when the plan (or its split or version) is retired."""
        retired = self._rest.get_json(f"/v1/plans/{plan_id}").get("retired_at")
        if retired:
            msg = f"plan {plan_id!r} is retired (since {retired})"
            raise Conflict(msg, details={"plan": plan_id, "retired_at": retired})

    def _batches(
        self, plan_id: str, *, epoch: int, rank: int, world_size: int, start_batch: int,
        reader: LocalReader | None = None,
    ) -> Iterator[Batch | AlignedBatch]:
        records = self._records(
            plan_id, epoch=epoch, rank=rank, world_size=world_size, start_batch=start_batch,
            reader=reader,
        )
        yield from group_parts(records, _to_batch)

    def _worker_source(self, plan_id: str, *,
                       transport: str) -> Callable[..., Iterator[Batch | AlignedBatch]]:
        return _PlanSource(
            plan_id, url=self.url, token=self._token, timeout=self._timeout,
            flight_locations=self._flight_locations, catalog=self, transport=transport,
            read_timeout=self._read_timeout,
            location_map=self._location_map.mapping,
        )

    def _loader(self, plan: Plan, **options: Any) -> DeviceLoader:
        epoch, rank = options.pop("epoch"), options.pop("rank")
        world_size, start = options.pop("world_size"), options.pop("start_batch")
        reader = options.pop("reader")
        cap = options.pop("pinned_bytes_cap")
        if cap is not None:
            options["pinned_bytes_cap"] = cap
        stream = self.flight()
        before = stream.counters.failovers
        return DeviceLoader(
            lambda: self._batches(
                plan.id, epoch=epoch, rank=rank, world_size=world_size, start_batch=start,
                reader=reader,
            ),
            failovers=lambda: stream.counters.failovers - before,
            desc=f"epoch {epoch}", **options,
        )


class _PlanSource:
    """The batches of a plan for :class:`WindpipeIterableDataset`; picklable.

    A DataLoader worker is another process: the pickled copy drops the catalog and
    opens its own connections there.
    """

    def __init__(
        self, plan_id: str, *, url: str, token: str | None, timeout: float,
        flight_locations: list[str] | None, catalog: Catalog | None, transport: str = "flight",
        read_timeout: float | None = 60.0,
        location_map: Mapping[str, str] | None = None,
    ) -> None:
        self.plan_id = plan_id
        self.transport = transport
        self._args = (url, token, timeout, flight_locations, read_timeout,
                      dict(location_map or {}))
        self._catalog = catalog
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "transport": self.transport, "_args": self._args,
                "_catalog": None, "_pid": 0}

    def __call__(
        self, *, epoch: int, rank: int, world_size: int, start_batch: int, worker: int = 0,
        num_workers: int = 1,
    ) -> Iterator[Batch | AlignedBatch]:
        if self._catalog is None or self._pid != os.getpid():
            # never reuse gRPC channels across a fork (DataLoader workers)
            self._pid = os.getpid()
            url, token, timeout, locations, read_timeout, mapping = self._args
            self._catalog = Catalog(
                url, token=token, timeout=timeout, flight_locations=locations,
                read_timeout=read_timeout, location_map=mapping,
            )
        reader = self._catalog._local.reader(self.plan_id, transport=self.transport,
                                             progress=False)
        records = self._catalog._records(
            self.plan_id, epoch=epoch, rank=rank, world_size=world_size,
            start_batch=start_batch, reader=reader,
        )
        mine = ((r, m) for r, m in records if (m.batch_idx - start_batch) % num_workers == worker)
        yield from group_parts(mine, _to_batch)


def _with_spinner(
    call: Callable[[], tuple[Any, int]], *, desc: str, progress: bool | None
) -> tuple[Any, int]:
    """Run ``call`` while a tqdm spinner shows the elapsed time (long registrations)."""
    tqdm = progress_bar()  # imported only when a bar is drawn

    result: list[tuple[Any, int]] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name="windpipe-register", daemon=True)
    disable = True if progress is False else None if progress is None else False
    fmt = "{desc}: {elapsed}"
    with tqdm(desc=desc, total=None, unit="s", disable=disable, bar_format=fmt) as bar:
        thread.start()
        while thread.is_alive():
            thread.join(timeout=0.2)
            bar.refresh()
    if error:
        raise error[0]
    return result[0]
