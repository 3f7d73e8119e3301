"""Plans as the Flight server sees them: loaded once from the catalog, cached per plan id.

A :class:`PlanContext` holds everything needed to materialize any batch of any
epoch: the planning config, the streams, every segment's chunk layout (as one
global chunk table, so finding the chunks a lane reads is a ``searchsorted``) and
the channel spec of each protocol. Plans come from the catalog database
(:class:`DatabasePlanSource`) or its REST API (:class:`RestPlanSource`); a client
never sends a path or a config.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from catalog.schedule import Schedule, epoch_schedule
from catalog.segments import ColumnInfo, SegmentInfo
from catalog.streams import Streams
from contract.configs import LoaderConfig
from contract.errors import ErrorType, WindpipeError
from contract.identity import canonical_json
from flight_server.chunks import ChannelSpec, ChunkKey

__all__ = [
    "DatabasePlanSource",
    "PlanCache",
    "PlanContext",
    "PlanSource",
    "RestPlanSource",
    "build_plan_context",
]


@dataclass(frozen=True, eq=False)
class PlanContext:
    """One plan, ready to stream. Build with :func:`build_plan_context`.

    Chunk table (length NC, chunks of all pieces in stream order): ``chunk_gstart``
    (global row of each chunk's first row; streams are laid end to end as in
    ``Streams.stream_base``), ``chunk_piece``, ``chunk_index`` (index inside its
    segment), ``chunk_len`` (rows; empty chunks are left out), ``chunk_keys`` (cache
    keys) and ``chunk_spec`` (index into ``specs``).
    """

    plan_id: str
    version_id: str
    root_uri: str
    config: LoaderConfig
    streams: Streams
    segments: dict[str, SegmentInfo]
    specs: tuple[ChannelSpec, ...]  # per protocol code
    chunk_gstart: np.ndarray
    chunk_piece: np.ndarray
    chunk_index: np.ndarray
    chunk_len: np.ndarray
    group_key_json: tuple[str, ...]
    alignment_key_json: tuple[str, ...]
    chunk_keys: tuple[ChunkKey, ...]
    chunk_spec: np.ndarray  # int16 [NC]: protocol code of each chunk's spec
    _schedules: OrderedDict[int, Schedule] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def schedule(self, epoch: int) -> Schedule:
        """The global schedule of ``epoch`` (a few epochs are kept)."""
        with self._lock:
            cached = self._schedules.get(epoch)
            if cached is not None:
                self._schedules.move_to_end(epoch)
                return cached
        sched = epoch_schedule(self.streams, self.config, epoch)
        with self._lock:
            self._schedules[epoch] = sched
            while len(self._schedules) > 4:
                self._schedules.popitem(last=False)
        return sched

    def piece_info(self, piece: int) -> SegmentInfo:
        """The segment of piece ``piece``."""
        return self.segments[self.streams.piece_path[piece]]


def build_plan_context(
    *,
    plan_id: str,
    version_id: str,
    root_uri: str,
    config: LoaderConfig,
    streams: Streams,
    segments: dict[str, SegmentInfo],
) -> PlanContext:
    """Assemble a plan and its chunk table; ``segments`` maps every piece path."""
    missing = sorted(set(streams.piece_path) - set(segments))
    if missing:
        raise WindpipeError(
            ErrorType.INTERNAL, f"plan {plan_id}: no segment record for {missing[:5]}",
            details={"plan_id": plan_id, "paths": missing[:20]},
        )
    base = streams.stream_base
    piece_stream = streams.piece_stream
    gstart: list[np.ndarray] = []
    gpiece: list[np.ndarray] = []
    gindex: list[np.ndarray] = []
    glen: list[np.ndarray] = []
    for p, path in enumerate(streams.piece_path):
        info = segments[path]
        rows = np.asarray(info.chunk_rows, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        keep = rows > 0
        gstart.append(base[piece_stream[p]] + streams.piece_start[p] + starts[keep])
        gpiece.append(np.full(int(keep.sum()), p, dtype=np.int64))
        gindex.append(np.flatnonzero(keep).astype(np.int64))
        glen.append(rows[keep])
    empty = np.zeros(0, dtype=np.int64)
    specs = tuple(ChannelSpec.for_protocol(config, p) for p in streams.protocols)
    chunk_piece = np.concatenate([empty, *gpiece])
    chunk_index = np.concatenate([empty, *gindex])
    chunk_spec = streams.protocol[piece_stream[chunk_piece]].astype(np.int16)
    digests = [spec.digest for spec in specs]
    chunk_keys = tuple(
        ChunkKey(root_uri, streams.piece_path[p], i, digests[k])
        for p, i, k in zip(chunk_piece.tolist(), chunk_index.tolist(), chunk_spec.tolist(),
                           strict=True)
    )
    return PlanContext(
        plan_id=plan_id, version_id=version_id, root_uri=root_uri, config=config,
        streams=streams, segments=dict(segments), specs=specs,
        chunk_gstart=np.concatenate([empty, *gstart]),
        chunk_piece=chunk_piece,
        chunk_index=chunk_index,
        chunk_keys=chunk_keys,
        chunk_spec=chunk_spec,
        chunk_len=np.concatenate([empty, *glen]),
        group_key_json=tuple(canonical_json(list(k)).decode() for k in streams.group_keys),
        alignment_key_json=tuple(
            canonical_json(list(k)).decode() for k in streams.alignment_keys
        ),
    )


def _segment_info(row: dict[str, Any], columns: tuple[ColumnInfo, ...]) -> SegmentInfo:
    return SegmentInfo(
        path=str(row["path"]), format=row["format"], row_count=int(row["row_count"]),
        columns=columns, chunk_rows=tuple(int(r) for r in row["chunk_rows"]),
        fingerprint=str(row["fingerprint"]),
    )


def _plan_columns(config: LoaderConfig) -> tuple[ColumnInfo, ...]:
    """Columns a plan reads; the catalog checked at planning that they are numeric."""
    names = {c for cols in (*config.inputs.values(), *config.targets.values()) for c in cols}
    return tuple(ColumnInfo(name=n, dtype="double", numeric=True) for n in sorted(names))


def _not_found(plan_id: str) -> WindpipeError:
    return WindpipeError(
        ErrorType.NOT_FOUND, f"plan {plan_id!r} does not exist", details={"plan_id": plan_id}
    )


class PlanSource(Protocol):
    """Where plans come from."""

    def load(self, plan_id: str) -> PlanContext:
        """The plan ``plan_id``; ``not_found`` if the catalog has none."""
        ...


class DatabasePlanSource:
    """Plans read from the catalog database through ``catalog.plans.load_plan``, so the
    Flight server rebuilds streams with exactly the function that made the plan."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.orm import sessionmaker  # noqa: PLC0415

        from catalog.service import CatalogContext  # noqa: PLC0415

        self._ctx = CatalogContext(sessions=sessionmaker(engine, expire_on_commit=False))

    def load(self, plan_id: str) -> PlanContext:
        """Read the plan, its split index, its version's segments; assemble."""
        from catalog.plans import load_plan  # noqa: PLC0415

        loaded = load_plan(self._ctx, plan_id)
        return _assemble(
            plan_id=plan_id, version_id=loaded.version_id, root_uri=loaded.root_uri,
            config=loaded.config, streams=loaded.streams,
            segment_rows=loaded.segments.to_dicts(),
        )


def _assemble(
    *,
    plan_id: str,
    version_id: str,
    root_uri: str,
    config: LoaderConfig,
    streams: Streams,
    segment_rows: list[dict[str, Any]],
) -> PlanContext:
    columns = _plan_columns(config)
    infos = {str(r["path"]): _segment_info(r, columns) for r in segment_rows}
    return build_plan_context(
        plan_id=plan_id, version_id=version_id, root_uri=root_uri, config=config,
        streams=streams, segments=infos,
    )


class RestPlanSource:
    """Plans read over the catalog's REST API (a Flight server without database access).

    Reads ``GET /v1/plans/{id}``, the version (root), its segments (all pages) and the
    split index (Arrow IPC), then rebuilds the streams with ``catalog.streams.build_streams``
    as the catalog does.
    """

    def __init__(self, base_url: str, *, token: str | None = None,
                 timeout_s: float = 60.0) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout_s

    def _get(self, client: Any, path: str, plan_id: str, **params: Any) -> Any:
        resp = client.get(f"{self._base}{path}", params=params)
        if resp.status_code == 404:
            raise _not_found(plan_id)
        if resp.status_code != 200:
            raise WindpipeError(
                ErrorType.UNAVAILABLE,
                f"catalog answered {resp.status_code} to GET {path}: {resp.text[:300]}",
                details={"plan_id": plan_id, "status": resp.status_code, "path": path},
            )
        return resp

    def load(self, plan_id: str) -> PlanContext:
        """Fetch what a plan needs and assemble it; ``unavailable`` when the catalog
        cannot be reached (a connection error, not a server bug)."""
        import httpx  # noqa: PLC0415

        try:
            with httpx.Client(headers=self._headers, timeout=self._timeout) as client:
                return self._load(client, plan_id)
        except httpx.TransportError as exc:
            raise WindpipeError(
                ErrorType.UNAVAILABLE,
                f"this Flight server cannot reach its catalog at {self._base}: {exc}",
                details={"plan_id": plan_id, "catalog_url": self._base},
            ) from exc

    def _load(self, client: Any, plan_id: str) -> PlanContext:
        import polars as pl  # noqa: PLC0415

        from catalog.index import index_from_arrow_ipc  # noqa: PLC0415
        from catalog.streams import build_streams  # noqa: PLC0415

        plan = self._get(client, f"/v1/plans/{plan_id}", plan_id).json()
        version = self._get(client, f"/v1/versions/{plan['version_id']}", plan_id).json()
        rows: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": 1000}
            if token:
                params["page_token"] = token
            page = self._get(client, f"/v1/versions/{version['id']}/segments", plan_id,
                             **params).json()
            rows.extend(page["items"])
            token = page.get("next_page_token")
            if not token:
                break
        index = index_from_arrow_ipc(self._get(
            client, f"/v1/splits/{plan['split_id']}/index", plan_id, format="arrow",
        ).content)
        config = LoaderConfig.model_validate(plan["config"])
        segments = pl.DataFrame(
            [{k: r[k] for k in ("manifest_row_id", "ordinal", "path", "row_count")}
             for r in rows],
            schema={"manifest_row_id": pl.Int64, "ordinal": pl.Int64, "path": pl.String,
                    "row_count": pl.Int64},
        )
        streams = build_streams(index, segments, config)
        return _assemble(
            plan_id=plan_id, version_id=str(version["id"]), root_uri=str(version["root_uri"]),
            config=config, streams=streams, segment_rows=rows,
        )


class PlanCache:
    """Loaded plans by id (a few kept; loads of one plan happen once at a time)."""

    def __init__(self, source: PlanSource | Callable[[str], PlanContext], *,
                 max_plans: int = 16) -> None:
        self._load = source.load if hasattr(source, "load") else source
        self._max = max_plans
        self._plans: OrderedDict[str, PlanContext] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, plan_id: str) -> PlanContext:
        """The plan ``plan_id`` (loaded on first use)."""
        with self._lock:
            plan = self._plans.get(plan_id)
            if plan is not None:
                self._plans.move_to_end(plan_id)
                return plan
            gate = self._loading.setdefault(plan_id, threading.Lock())
        with gate:
            with self._lock:
                plan = self._plans.get(plan_id)
            if plan is None:
                plan = self._load(plan_id)
                with self._lock:
                    self._plans[plan_id] = plan
                    while len(self._plans) > self._max:
                        self._plans.popitem(last=False)
        return plan
