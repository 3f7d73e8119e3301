"""``ClientState``: what one client of a deployment holds, shared by ``Catalog`` and its handles.

A :class:`~sdk.Catalog` and every ``DatasetVersion``, ``Split`` and ``Plan`` it returns
hold the same :class:`ClientState`: the REST client, the Flight connection (opened on
first use, from ``/v1/config`` unless the locations were given), the same-host
readers, the location map, the token and the timeouts. The handles call its public
methods; nothing reaches into the ``Catalog``.

:meth:`ClientState.source` picks a plan's :class:`~sdk._sources.BatchSource`: the
same-host path when ``transport`` takes it, else Flight (first warming every Flight
server for ``data_access="full_in_mem"``). A catalog run in this process
(``ClientSettings.in_process``, ``windpipe.sdk._in_process``) has no Flight server: its REST calls
go to the app in this process and every batch is built here, from storage. A
DataLoader worker is another process: :class:`WorkerSource` carries only the picklable
:class:`ClientSettings` there and opens its own connections (or its own in-process
catalog).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import polars as pl
import pyarrow as pa

from windpipe.sdk import _worker_exit as worker_exit
from windpipe.sdk._exceptions import InvalidConfig, Unavailable
from windpipe.sdk._in_process import IN_PROCESS_URL, InProcess, InProcessReaders
from windpipe.sdk._local import LocalReaders
from windpipe.sdk._locations import LocationMap
from windpipe.sdk._rest import RestClient
from windpipe.sdk._sources import BatchSource, FlightSource, LocalSource
from windpipe.sdk._stream import FlightStream
from windpipe.sdk._warm import WarmResult, warm_plan
from windpipe.services.contract.configs import DATA_ACCESS_MODES, TRANSPORTS
from windpipe.services.contract.errors import retired_error
from windpipe.services.planning.artifact import ARTIFACT_MEDIA_TYPE

if TYPE_CHECKING:
    import httpx

    from windpipe.sdk._aligned import AlignedBatch
    from windpipe.sdk._batch import Batch

__all__ = ["ClientSettings", "ClientState", "WorkerSource", "endpoint_from_environment"]
_ARROW_STREAM = "application/vnd.apache.arrow.stream"
LIVE_RECHECK_S = 1.0  # a plan found live is asked about again after this long (check_live)
_LIVE_KEPT = 256
_PLAN_PATH = "/v1/plans/"
URL_VARIABLE, TOKEN_VARIABLE = "WINDPIPE_URL", "WINDPIPE_TOKEN"


def endpoint_from_environment(url: str | None, token: str | None) -> tuple[str, str | None]:
    """The catalog's URL and token: the arguments, else ``WINDPIPE_URL`` and
    ``WINDPIPE_TOKEN``. The variable's token goes only to the variable's URL (no URL
    given, or the same one): a token is never sent to a catalog it was not set for.
    No URL anywhere: :class:`InvalidConfig` saying what to do."""
    env_url = (os.environ.get(URL_VARIABLE) or "").rstrip("/") or None
    url = url or env_url
    if token is None and url is not None and url.rstrip("/") == env_url:
        token = os.environ.get(TOKEN_VARIABLE) or None
    if url is None:
        msg = (f"Catalog() needs a catalog: give its URL, Catalog('http://host:8000') (or "
               f"set {URL_VARIABLE}, and {TOKEN_VARIABLE} when it wants a token), or run one "
               "in this process with no server: windpipe.embedded('./windpipe-data')")
        raise InvalidConfig(msg)
    return url, token


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """What a :class:`ClientState` is made from (picklable: DataLoader workers get it).

    ``flight_locations`` None: from the catalog's ``/v1/config``. ``location_map``
    None: the ``WINDPIPE_FLIGHT_LOCATION_MAP`` variable (``windpipe.sdk._locations``).
    ``in_process``: the catalog runs in this process (``url`` is then only its name).
    """

    url: str
    token: str | None = None
    timeout: float = 30.0
    retries: int = 3
    read_timeout: float | None = 60.0
    flight_locations: tuple[str, ...] | None = None
    location_map: Mapping[str, str] | None = None
    in_process: InProcess | None = None


def flight_locations_of(config: Mapping[str, Any]) -> list[str]:
    """The Flight locations a ``/v1/config`` answer names."""
    for key in ("flight_locations", "flight_endpoints", "flight"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("locations") or value.get("endpoints")
        if isinstance(value, str):
            return [value]
        if isinstance(value, list | tuple) and value:
            return [str(v["uri"] if isinstance(v, dict) else v) for v in value]
    return []


class ClientState:
    """The connections and settings of one client (see the module docstring).

    ``http_transport``: an ``httpx`` transport for the REST client (a test's seam; not
    the batch path ``transport`` of the loader options); never sent to DataLoader
    workers. With ``settings.in_process`` it is the in-process catalog's
    (``InProcess.open_transport``, once per process).
    """

    def __init__(self, settings: ClientSettings, *,
                 http_transport: httpx.BaseTransport | None = None) -> None:
        self.location_map = LocationMap(settings.location_map)
        self.settings = dataclasses.replace(settings, url=settings.url.rstrip("/"),
                                            location_map=dict(self.location_map.mapping))
        spec = settings.in_process
        if spec is not None and http_transport is None:
            http_transport = spec.open_transport(spec)
        self._rest = RestClient(IN_PROCESS_URL if spec is not None else self.settings.url,
                                token=settings.token, timeout=settings.timeout,
                                retries=settings.retries, http_transport=http_transport)
        self._stream: FlightStream | None = None
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}  # plan id -> when it was last found live
        self._local = LocalReaders(self.flight, self.artifact_bytes)
        self._in_process = (InProcessReaders(spec, self.artifact_bytes)
                            if spec is not None else None)

    def __repr__(self) -> str:
        return f"ClientState({self.settings.url!r})"

    def close(self) -> None:
        """Close the HTTP and Flight connections and let go of the same-host readers'
        mapped blocks (an in-process catalog: its app too)."""
        self._rest.close()
        self._local.close()
        if self._in_process is not None:
            self._in_process.close()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    # -- REST -----------------------------------------------------------------------

    def get_json(self, path: str, **params: Any) -> Any:
        """``GET path`` (``params`` as the query), the answer's JSON. A plan read here
        (``/v1/plans/{id}``, as ``Catalog.plan`` reads it) and found live counts as a
        :meth:`check_live` answer: the pass that follows asks nothing again."""
        answer = self._rest.get_json(path, **params)
        plan_id = path.removeprefix(_PLAN_PATH)
        if (plan_id != path and plan_id and "/" not in plan_id and not params
                and isinstance(answer, dict) and answer.get("id") == plan_id
                and not answer.get("retired_at")):
            self._found_live(plan_id, time.monotonic())
        return answer

    def post_json(self, path: str, body: Any, *,
                  headers: dict[str, str] | None = None) -> tuple[Any, int]:
        """``POST path``: the answer's JSON and its status (201 new, 200 existing, 202 a
        job still running)."""
        return self._rest.post_json(path, body, headers=headers)

    def delete_json(self, path: str) -> Any:
        """``DELETE path`` (a soft retirement), the answer's JSON; plans found live are
        asked about again (:meth:`check_live`)."""
        with self._lock:
            self._live.clear()
        return self._rest.request("DELETE", path).json()

    def pages(self, path: str, **params: Any) -> Iterator[Any]:
        """Every item of a paginated list."""
        return self._rest.pages(path, **params)

    def arrow_frame(self, path: str) -> pl.DataFrame:
        """``GET path?format=arrow`` (an index) as a polars frame."""
        response = self._rest.request("GET", path, params={"format": "arrow"},
                                      accept=_ARROW_STREAM)
        frame = pl.from_arrow(pa.ipc.open_stream(response.content).read_all())
        assert isinstance(frame, pl.DataFrame)
        return frame

    def artifact_bytes(self, plan_id: str) -> bytes:
        """The stored plan (``GET /v1/plans/{id}/artifact``, Arrow IPC)."""
        return self._rest.request("GET", f"/v1/plans/{plan_id}/artifact",
                                  accept=ARTIFACT_MEDIA_TYPE).content

    def config(self) -> dict[str, Any]:
        """The deployment's ``/v1/config``."""
        return dict(self._rest.get_json("/v1/config"))

    def check_live(self, plan_id: str) -> None:
        """:class:`Conflict` when the plan (or its split or version) is retired.

        A plan found live is not asked about again for :data:`LIVE_RECHECK_S`: a
        same-host pass of a small plan takes milliseconds, and a request per pass cost
        the catalog more CPU than building the pass. A retirement through
        this client is seen at once (:meth:`delete_json` forgets every answer), one by
        another client by the passes that start up to a second later.
        """
        now = time.monotonic()
        with self._lock:
            seen = self._live.get(plan_id)
        if seen is not None and now - seen < LIVE_RECHECK_S:
            return
        retired = self._rest.get_json(f"{_PLAN_PATH}{plan_id}").get("retired_at")
        if retired:
            raise retired_error("plan", plan_id, retired)
        self._found_live(plan_id, now)

    def _found_live(self, plan_id: str, when: float) -> None:
        with self._lock:
            if len(self._live) >= _LIVE_KEPT:
                self._live.clear()
            self._live[plan_id] = when

    # -- Flight and the same host ---------------------------------------------------

    def flight(self) -> FlightStream:
        """The Flight client (created on first use, from ``/v1/config`` unless the
        locations were given); :class:`Unavailable` for a catalog run in this process."""
        if self.settings.in_process is not None:
            msg = (f"the catalog {self.settings.url} runs in this process, with no Flight "
                   "server: its batches are built here (plan.batches, plan.loader)")
            raise Unavailable(msg)
        with self._lock:
            if self._stream is None:
                s = self.settings
                locations = list(s.flight_locations or ()) or flight_locations_of(self.config())
                # locations from the catalog are asked for again (servers come and go)
                refresh = None if s.flight_locations else (
                    lambda: flight_locations_of(self.config()))
                self._stream = FlightStream(locations, token=s.token, timeout=s.timeout,
                                            read_timeout=s.read_timeout,
                                            location_map=self.location_map,
                                            refresh=refresh)
            return self._stream

    def warm(self, plan_id: str, *, epoch: int = 0, progress: bool | None = None,
             input_valid: bool = False) -> dict[str, WarmResult]:
        """Load ``plan_id``'s split into every Flight server's cache (``full_in_mem``);
        a catalog run in this process loads it into this process's cache
        (``input_valid``: the blocks of the plan as read with it)."""
        if self._in_process is not None:
            return {self.settings.url: self._in_process.warm(plan_id, progress=progress,
                                                             input_valid=input_valid)}
        return warm_plan(self.flight(), plan_id, epoch=epoch, progress=progress,
                         input_valid=input_valid)

    def source(
        self, plan_id: str, *, transport: str, data_access: str = "windowed", epoch: int = 0,
        progress: bool | None = None, input_valid: bool = False,
    ) -> BatchSource:
        """Where ``plan_id``'s batches come from: a :class:`LocalSource` when
        ``transport`` takes the same-host path (its server warms the plan into the host's
        tier; ``windpipe.sdk._local``), else a :class:`FlightSource`, after warming every Flight
        server when ``data_access`` is ``"full_in_mem"``. A catalog run in this process
        builds every batch here, from storage (``transport`` ``"auto"`` or ``"local"``;
        ``"flight"`` is :class:`InvalidConfig`: there is no Flight server).
        ``input_valid``: every batch also carries ``input_valid`` (SEMANTICS 5b)."""
        if data_access not in DATA_ACCESS_MODES:
            msg = f"data_access must be one of {list(DATA_ACCESS_MODES)}, got {data_access!r}"
            raise InvalidConfig(msg)
        if self._in_process is not None:
            return self._in_process_source(plan_id, transport=transport,
                                           data_access=data_access, progress=progress,
                                           input_valid=input_valid)
        reader = self._local.reader(plan_id, transport=transport, progress=progress,
                                    input_valid=input_valid)
        if reader is not None:
            return LocalSource(plan_id, reader, self.check_live, input_valid=input_valid)
        if data_access == "full_in_mem":
            self.warm(plan_id, epoch=epoch, progress=progress, input_valid=input_valid)
        return FlightSource(plan_id, self.flight, input_valid=input_valid)

    def _in_process_source(self, plan_id: str, *, transport: str, data_access: str,
                           progress: bool | None, input_valid: bool) -> LocalSource:
        assert self._in_process is not None
        if transport == "flight":
            msg = (f"transport='flight' needs a Flight server, and the catalog "
                   f"{self.settings.url} runs in this process without one: use "
                   "transport='auto' or 'local' (the batches are the same), or "
                   "Catalog(url) of a served catalog")
            raise InvalidConfig(msg)
        if transport not in TRANSPORTS:
            msg = f"transport must be one of {list(TRANSPORTS)}, got {transport!r}"
            raise InvalidConfig(msg)
        if data_access == "full_in_mem":
            self._in_process.warm(plan_id, progress=progress, input_valid=input_valid)
        return LocalSource(plan_id, self._in_process.reader(plan_id, input_valid=input_valid),
                           self.check_live, input_valid=input_valid)

    def worker_source(self, plan_id: str, *, transport: str,
                      input_valid: bool = False) -> WorkerSource:
        """The passes of ``plan_id`` for a torch dataset: over this state in this
        process, over a state of their own in a DataLoader worker."""
        return WorkerSource(plan_id, settings=self.settings, transport=transport, state=self,
                            input_valid=input_valid)


class WorkerSource:
    """One plan's passes for :class:`~sdk.WindpipeIterableDataset`; picklable.

    ``transport``: ``"flight"`` or ``"local"``, as chosen in the process that made the
    dataset; ``input_valid``: the batches carry ``input_valid``. Pickled (sent to a
    DataLoader worker) it drops its state, and each process opens its own connections:
    gRPC channels never cross a fork.
    """

    def __init__(self, plan_id: str, *, settings: ClientSettings, transport: str = "flight",
                 state: ClientState | None = None, input_valid: bool = False) -> None:
        self.plan_id = plan_id
        self.settings = settings
        self.transport = transport
        self.input_valid = input_valid
        self._state = state
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "settings": self.settings,
                "transport": self.transport, "input_valid": self.input_valid,
                "_state": None, "_pid": 0}

    def __call__(
        self, *, epoch: int, rank: int, world_size: int, start_batch: int, worker: int = 0,
        num_workers: int = 1,
    ) -> Iterator[Batch | AlignedBatch]:
        if self._state is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._state = ClientState(self.settings)
            atexit.register(self._state.close)
            worker_exit.install(self._pid)
        source = self._state.source(self.plan_id, transport=self.transport, progress=False,
                                    input_valid=self.input_valid)
        batches = cast("Generator[Batch | AlignedBatch, None, None]", source.batches(
            epoch=epoch, rank=rank, world_size=world_size, start_batch=start_batch,
            worker=worker, num_workers=num_workers))
        # A DataLoader worker whose pass is abandoned (the loop broke early) exits with
        # this generator suspended: close it first at exit, so its Flight reader is
        # cancelled and its connections closed before the interpreter tears gRPC down.
        atexit.register(batches.close)
        try:
            yield from batches
        finally:
            atexit.unregister(batches.close)
