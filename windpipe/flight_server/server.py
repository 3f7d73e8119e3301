"""The windpipe Arrow Flight server (wire format: ``docs/wire.md``; design: ``docs/flight.md``).

* ``GetFlightInfo``: a :class:`windpipe.services.contract.wire.FlightCommand` descriptor -> schema,
  totals and ordered endpoints with signed tickets. With several configured
  locations the rank's pass is cut (at unit boundaries) into endpoints whose first
  location is the server that owns their segments (rendezvous hashing of segment
  paths), the others listed as fallbacks. The locations are the configured ones and
  those ``WINDPIPE_FLIGHT_DISCOVERY`` names (``windpipe.services.discovery``), re-read as it
  changes.
* ``DoGet``: a ticket -> one record batch per training batch, the batch's
  :class:`windpipe.services.contract.wire.BatchMetadata` as ``app_metadata``. At most
  ``flight_max_streams`` at once, one whose client takes nothing for
  ``flight_stream_stall_s`` ended (``windpipe.flight_server.stream_slots``).
* ``DoAction``: ``health``, ``cache-stats``, ``tier-info``, ``warm`` (progress results
  streamed as the chunks load).
* ``GetSchema``, ``DoPut``, ``DoExchange``, ``ListFlights``, ``Handshake``: refused with
  a typed ``invalid_request`` before any handler runs (``windpipe.flight_server.calls``).

With an access layer (``windpipe.flight_server.access``), every call but the ``health`` action
needs ``authorization: Bearer <token>`` of a principal that may read the plan it
names (``windpipe.flight_server.auth``); tickets carry the principal they were issued to and
are refused to anyone else. An unexpected error leaves as ``internal`` with a request
id; its details go to the log only. Logging (``windpipe.services.logging``): one
``flight.stream.start`` and one ``flight.stream.end`` event per stream (never per
batch), a warning per batch with skipped lanes, an error per failed segment.

Every ``WindpipeError`` leaves as the Flight error of its type with the JSON error
envelope in ``extra_info``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

from windpipe.flight_server.access import FlightAccess
from windpipe.flight_server.actions import list_actions, run_action
from windpipe.flight_server.auth import AUTH_MIDDLEWARE, PrincipalAuthFactory, caller, caller_token
from windpipe.flight_server.calls import (
    CALL_FILTER,
    CallFilterFactory,
    command_of,
    guard,
    internal_error,
    peer_text,
)
from windpipe.flight_server.config import FlightServerConfig
from windpipe.flight_server.locality import endpoint_ranges
from windpipe.flight_server.metrics import METRICS_MIDDLEWARE, FlightMetrics
from windpipe.flight_server.plan_sources import PlanCache
from windpipe.flight_server.stream_checks import StreamAuth, check_cache_fit
from windpipe.flight_server.stream_slots import StreamSlot, StreamSlots, shutdown_peer
from windpipe.flight_server.tickets import TicketPayload, sign_ticket, verify_ticket
from windpipe.flight_server.tier_fill import TierFill
from windpipe.flight_server.tracing import call_span, stream_span, trace_middleware
from windpipe.services.contract.errors import (
    ErrorType,
    InvalidTicket,
    SegmentChanged,
    Unavailable,
    WindpipeError,
)
from windpipe.services.contract.limits import check_world_size
from windpipe.services.contract.principals import Principal
from windpipe.services.contract.wire import (
    WIRE_VERSION,
    FlightCommand,
    batch_schema,
    error_from_flight,
    to_flight_error,
)
from windpipe.services.discovery import FlightDiscovery
from windpipe.services.logging import get_logger
from windpipe.services.materialize.builder import BatchBuilder
from windpipe.services.materialize.cache import ChunkCache
from windpipe.services.materialize.pipeline import BatchPipeline
from windpipe.services.materialize.plan import PlanContext
from windpipe.services.materialize.tier import Tier
from windpipe.services.planning.ranks import pass_start, rank_batches
from windpipe.services.planning.schedule import Schedule
from windpipe.services.planning.sizes import channel_counts, token_bytes
from windpipe.services.storage.store import Storage, StorageRoots
from windpipe.services.tracing import Span

__all__ = ["WindpipeFlightServer"]

_I64 = np.int64
_log = get_logger("windpipe.flight")
_CLOSE_WAIT_S = 5.0  # how long stop waits for the calls whose connections it closed


class WindpipeFlightServer(fl.FlightServerBase):  # type: ignore[misc]
    """Streams plan batches; plans come from ``plans``, chunks through ``cache``.

    Every knob is in ``config`` (:class:`windpipe.flight_server.config.FlightServerConfig`: the
    settings, read by their ``Settings`` names, and what is resolved from them); the
    server makes its chunk cache, the host's tier and its storage roots from it.
    """

    def __init__(
        self,
        config: FlightServerConfig,
        *,
        plans: PlanCache,
        access: FlightAccess | None = None,
        **kwargs: Any,
    ) -> None:
        self.metrics = FlightMetrics()  # its own registry: flight_server.metrics
        middleware = {**kwargs.get("middleware", {}), CALL_FILTER: CallFilterFactory(),
                      METRICS_MIDDLEWARE: self.metrics.middleware(), **trace_middleware()}
        if access is not None:
            middleware[AUTH_MIDDLEWARE] = PrincipalAuthFactory(access)
        kwargs["middleware"] = middleware
        super().__init__(config.bind_location, **kwargs)
        self.config = config
        self._access = access
        self.plans = plans
        knobs = config.settings
        self.cache = ChunkCache(knobs.cache_bytes, wait_timeout_s=knobs.cache_wait_s)
        self.tier = (Tier(config.tier_dir, budget_bytes=config.tier_bytes,
                          budget_source=config.tier_source)
                     if config.tier_dir is not None else None)
        # plans beyond the cache are decoded into the tier behind their first pass
        self.tier_fill = (TierFill(self.tier, cache_bytes=knobs.cache_bytes)
                          if self.tier is not None and knobs.auto_blocks else None)
        _log.info("flight.tier", path=str(config.tier_dir) if config.tier_dir else None,
                  budget_bytes=config.tier_bytes, budget=config.tier_source,
                  cache_bytes=knobs.cache_bytes)
        self.storage_for: Callable[[str], Storage] = StorageRoots(config.storage).open
        self.discovery = FlightDiscovery.from_settings(knobs)
        self._stopping = threading.Event()
        self._active = 0
        self._streams = 0  # streams started since the server started
        self._active_lock = threading.Lock()
        # at most flight_max_streams open streams, a stalled one ended: stream_slots
        self.slots = StreamSlots(max_streams=knobs.flight_max_streams,
                                 stall_s=knobs.flight_stream_stall_s, on_stall=self._stalled)
        fill = self.tier_fill
        self.metrics.watch(cache=self.cache, tier=self.tier, active_streams=lambda: self._active,
                           tier_fill=(lambda: (fill.blocks, fill.failures)) if fill else None)

    # -- helpers ----------------------------------------------------------------------

    def _schema(self, plan: PlanContext, *, wire: int = WIRE_VERSION) -> pa.Schema:
        return batch_schema(plan_id=plan.plan_id, version_id=plan.version_id, wire=wire,
                            input_valid=plan.input_valid)

    def _rank_pass(self, plan: PlanContext, epoch: int, rank: int,
                   world_size: int) -> tuple[Schedule, np.ndarray]:
        check_world_size(world_size, self.config.limits)
        schedule = plan.schedule(epoch)
        batches = rank_batches(
            schedule, rank=rank, world_size=world_size,
            drop_incomplete_distributed=plan.spec.drop_incomplete_distributed,
        )
        return schedule, np.asarray(batches, dtype=_I64)

    def authorize(self, context: Any, plan_id: str) -> Principal:
        """The caller, if it may read ``plan_id`` (else ``unauthenticated`` / ``forbidden``)."""
        principal = caller(context)
        if self._access is not None:
            self._access.authorize_plan(caller_token(context), principal, plan_id)
        return principal

    def _ticket(self, cmd: FlightCommand, start: int, end: int, sub: str) -> fl.Ticket:
        exp = time.time() + self.config.settings.ticket_ttl_s
        payload = TicketPayload(
            plan_id=cmd.plan_id, epoch=cmd.epoch, rank=cmd.rank, world_size=cmd.world_size,
            start_batch=start, end_batch=end, exp=exp, sub=sub, wire=cmd.wire,
            input_valid=cmd.input_valid,
        )
        return fl.Ticket(sign_ticket(payload, self.config.ticket_secret))

    def _issued_at(self, payload: TicketPayload) -> float | None:
        """When a ticket was issued: its expiry less the ticket lifetime (every server of a
        deployment shares the secret and the lifetime; None for a ticket without one)."""
        if payload.exp is None:
            return None
        return payload.exp - self.config.settings.ticket_ttl_s

    def locations(self) -> tuple[str, ...]:
        """The deployment's Flight servers this one routes endpoints to: the configured
        locations and the discovered ones (``windpipe.services.discovery``, re-read as it
        changes)."""
        return self.discovery.locations()

    # -- Flight methods ---------------------------------------------------------------

    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        """Schema, totals and endpoints of one rank's pass (see ``docs/wire.md``)."""
        with call_span(context, "flight GetFlightInfo"):  # with tracing on
            return guard(lambda: self._flight_info(context, descriptor))

    def _flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        cmd = command_of(descriptor)
        check_world_size(cmd.world_size, self.config.limits)
        principal = self.authorize(context, cmd.plan_id)
        plan = self.plans.live(cmd.plan_id)
        if cmd.input_valid:
            plan = plan.with_input_valid()
        schedule, batches = self._rank_pass(plan, cmd.epoch, cmd.rank, cmd.world_size)
        # positions count part batches (an aligned batch is one per protocol); tickets too
        start = pass_start(schedule, batches, start_batch=cmd.start_batch, rank=cmd.rank,
                           world_size=cmd.world_size)  # past the end: invalid_request
        rest = batches[start:]
        lanes = (schedule.batch_lane_ptr[rest + 1] - schedule.batch_lane_ptr[rest]).astype(_I64)
        seq = schedule.batch_seq_len[rest].astype(_I64)
        counts = [channel_counts(plan.spec, p) for p in plan.streams.protocols]
        per_token = np.asarray(  # input_valid: one byte per input value
            [token_bytes(*c) + (c[0] if cmd.input_valid else 0) for c in counts] or [0],
            dtype=_I64,
        )
        per_batch = per_token[schedule.batch_protocol[rest]] * lanes * seq
        endpoints = []
        locations = self.locations()
        for a, b, home in endpoint_ranges(plan, schedule, batches, start=start,
                                          locations=locations,
                                          min_batches=self.config.settings.endpoint_batches):
            locs: tuple[str, ...] = ()
            if len(locations) > 1:
                primary = locations[home]
                locs = (primary, *[loc for loc in locations if loc != primary])
            elif locations:
                locs = locations
            endpoints.append(fl.FlightEndpoint(self._ticket(cmd, a, b, principal.name),
                                               list(locs)))
        return fl.FlightInfo(
            self._schema(plan, wire=cmd.wire), descriptor, endpoints,
            total_records=int(lanes.sum()), total_bytes=int(per_batch.sum()), ordered=True,
        )

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.GeneratorStream:
        """Stream the batches a ticket grants, one record batch each (in a span of the
        caller's trace, with tracing on: ``flight_server.tracing``)."""
        span = stream_span(context, "flight DoGet")  # ended with the stream

        def setup() -> fl.GeneratorStream:
            payload = verify_ticket(ticket.ticket, self.config.ticket_secret)
            span.set(**{"windpipe.plan_id": payload.plan_id, "windpipe.epoch": payload.epoch,
                        "windpipe.rank": payload.rank})
            principal = caller(context)
            if self._access is not None and payload.sub != principal.name:
                raise InvalidTicket("this ticket was issued to another principal; ask "
                                    "GetFlightInfo for your own")
            self.authorize(context, payload.plan_id)
            check_world_size(payload.world_size, self.config.limits)
            slot = self._admit(context, payload.plan_id)  # unavailable over the cap
            try:
                schema, gen = self._open(context, payload, principal, slot, span)
            except BaseException:
                slot.release()
                raise
            weakref.finalize(gen, slot.release)  # a generator pyarrow drops unstarted
            weakref.finalize(gen, span.end)  # (ended by the stream, else here)
            return fl.GeneratorStream(schema, gen)

        with span.current():  # the plan's fetch from the catalog is its child
            try:
                return guard(setup)
            except BaseException as exc:
                span.failed(error_from_flight(exc).type.value)
                span.end()
                raise

    def _admit(self, context: Any, plan_id: str) -> StreamSlot:
        """A stream slot (``flight_server.stream_slots``), else ``unavailable``, counted."""
        try:
            return self.slots.acquire(peer=peer_text(context), plan=plan_id)
        except Unavailable:
            self.metrics.refused()
            _log.warning("flight.stream.refused", plan=plan_id, peer=peer_text(context),
                         max_streams=self.slots.max_streams)
            raise

    def _open(self, context: Any, payload: TicketPayload, principal: Principal,
              slot: StreamSlot, span: Span) -> tuple[pa.Schema, Iterator[Any]]:
        """The schema and the batch generator of an admitted ticket."""
        # a retired plan's tickets are refused, unless issued before it was retired: the
        # later endpoints of a pass already streaming (plan_sources.PlanCache.live)
        plan = self.plans.live(payload.plan_id, issued_at=self._issued_at(payload))
        if payload.input_valid:  # its own chunks and blocks: inputs NaN until built
            plan = plan.with_input_valid()
        schedule, batches = self._rank_pass(plan, payload.epoch, payload.rank,
                                            payload.world_size)
        end = min(payload.end_batch, int(batches.shape[0]))
        start = min(payload.start_batch, end)
        schema = self._schema(plan, wire=payload.wire)
        builder = BatchBuilder(
            plan, self.storage_for(plan.root_uri), self.cache, schema,
            on_bad_segment=self.config.settings.on_bad_segment, tier=self.tier,
            blocks="auto" if self.config.settings.auto_blocks else "cached",
        )
        fields = {"plan": payload.plan_id, "epoch": payload.epoch, "rank": payload.rank,
                  "world_size": payload.world_size, "start_batch": start,
                  "end_batch": end, "peer": slot.peer}
        check_cache_fit(plan, schedule, batches[start:end], start=start,
                        budget_bytes=self.cache.budget_bytes)
        auth = StreamAuth(self._access, token=caller_token(context), principal=principal,
                          plan_id=payload.plan_id, trust_s=self.config.settings.auth_cache_s)
        return schema, self._stream(context, builder, schedule, batches, start=start,
                                    end=end, fields=fields, auth=auth, slot=slot, span=span)

    def _fill_tier_behind(self, builder: BatchBuilder) -> None:
        """Start the tier's background fill of the stream's plan (``tier_fill``): called
        once its first batch is built, so that batch comes from chunks at once and the
        fill never competes with it for storage."""
        if self.tier_fill is not None:
            self.tier_fill.start(builder.plan, builder.storage)

    def _stalled(self, slot: StreamSlot, waited_s: float) -> None:
        """End a stream whose client took nothing for ``flight_stream_stall_s`` (called
        by the slots' watchdog): its connection is shut down (``stream_slots``)."""
        ended = shutdown_peer(slot.peer, port=self.port)
        (_log.warning if ended else _log.error)(
            "flight.stream.stalled", plan=slot.plan, peer=slot.peer, batches=slot.sent,
            waited_s=round(waited_s, 3), stall_s=self.slots.stall_s,
            connection_closed=ended)

    def _stream(self, context: Any, builder: BatchBuilder, schedule: Schedule,
                batches: np.ndarray, *, start: int, end: int,
                fields: dict[str, Any], auth: StreamAuth, slot: StreamSlot,
                span: Span) -> Iterator[Any]:
        with self._active_lock:
            self._active += 1
            self._streams += 1
        _log.info("flight.stream.start", **fields, **span.log_fields())
        t0 = time.perf_counter()
        sent = nbytes = 0
        outcome, error_type = "completed", None
        pipeline = BatchPipeline(builder, schedule, batches, start=start, end=end,
                                 readahead_batches=self.config.settings.readahead_batches,
                                 build_ahead_bytes=self.config.settings.build_ahead_bytes)
        built_batches = self.metrics.timed(pipeline)
        try:
            for i, built in built_batches:
                if context.is_cancelled():
                    outcome = "cancelled"
                    return
                if self._stopping.is_set():
                    raise Unavailable("the Flight server is shutting down; resume elsewhere",
                                      details={"next_batch": i})
                auth.check(next_batch=i // schedule.parts)  # revocation, within a bound
                meta = built.meta
                if meta.skipped_lanes:
                    _log.warning("flight.segment.skipped", plan=fields["plan"], batch_idx=i,
                                 skipped=list(meta.skipped_lanes))
                nbytes += built.nbytes
                slot.handed()  # the stall clock runs until gRPC asks for the next batch
                if sent == 0:
                    self._fill_tier_behind(builder)
                handed = time.perf_counter()
                yield builder.record_batch(built), pa.py_buffer(meta.encode())
                slot.taken()
                sent += 1
                self.metrics.sent(built.nbytes, seconds=time.perf_counter() - handed)
        except WindpipeError as exc:
            outcome, error_type = "error", exc.type.value
            if exc.type == ErrorType.SEGMENT_CHANGED:
                exc = SegmentChanged(exc.message, details={**exc.details,
                                                           "version_id": builder.plan.version_id})
                _log.error("flight.segment.changed", plan=fields["plan"],
                           path=exc.details.get("path"), message=exc.message)
            if exc.type == ErrorType.SEGMENT_ERROR:
                _log.error("flight.segment.failed", plan=fields["plan"],
                           path=exc.details.get("path"), message=exc.message)
            if exc.type == ErrorType.UNAVAILABLE and "path" in exc.details:
                _log.error("flight.store.unavailable", plan=fields["plan"],
                           path=exc.details.get("path"), message=exc.message)
            raise to_flight_error(exc) from None
        except GeneratorExit:
            outcome = "cancelled"
            raise
        except fl.FlightError as exc:
            outcome, error_type = "error", type(exc).__name__
            raise
        except Exception as exc:
            outcome, error_type = "error", type(exc).__name__
            raise internal_error(exc) from None
        finally:
            built_batches.close()  # a build-ahead thread ends with its stream, at once
            slot.release()
            with self._active_lock:
                self._active -= 1
            if outcome == "completed" and start + sent < end:
                outcome = "cancelled"  # the client stopped reading (generator dropped)
            if slot.stalled:
                outcome = "stalled"  # ended by the stall watchdog (stream_slots)
            seconds = time.perf_counter() - t0
            self.metrics.stream_ended(outcome, seconds=seconds)
            emit = _log.error if outcome == "error" else _log.info
            emit("flight.stream.end", plan=fields["plan"], epoch=fields["epoch"],
                 rank=fields["rank"], world_size=fields["world_size"], peer=fields["peer"],
                 batches=sent, bytes=nbytes, seconds=round(seconds, 6),
                 outcome=outcome, error_type=error_type, **span.log_fields())
            span.set(**{"windpipe.batches": sent, "windpipe.bytes": nbytes,
                        "windpipe.outcome": outcome})
            if error_type is not None:
                span.failed(error_type)
            span.end()

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        """The actions of ``docs/wire.md`` (``windpipe.flight_server.actions``)."""
        return list_actions()

    def do_action(self, context: Any, action: fl.Action) -> Iterator[bytes]:
        """``health``, ``cache-stats``, ``tier-info`` and ``warm`` (``flight_server.actions``)."""
        return run_action(self, context, action)

    @property
    def active_streams(self) -> int:
        """Streams open now."""
        return self._active

    @property
    def streams_started(self) -> int:
        """Streams started since the server started."""
        return self._streams

    # -- lifecycle --------------------------------------------------------------------

    def stop(self, *, grace_s: float = 10.0) -> bool:
        """Refuse new batches, end open streams, shut down within ``grace_s``.

        A stream whose client stopped reading is blocked in a gRPC write that no flag
        reaches, and gRPC's shutdown waits for every call: the connections of the streams
        still open at the deadline are shut down (as the stall watchdog does), and their
        calls end. Returns True when the server stopped, within ``grace_s`` or
        ``_CLOSE_WAIT_S`` after those connections were closed.
        """
        self._stopping.set()
        self.slots.close()
        if self.tier_fill is not None:
            self.tier_fill.stop()
        done = threading.Event()

        def _shutdown() -> None:
            try:
                self.shutdown()
            finally:
                done.set()

        threading.Thread(target=_shutdown, name="windpipe-flight-shutdown", daemon=True).start()
        ok = done.wait(timeout=grace_s)
        if not ok:
            for slot in self.slots.open_slots():
                ended = shutdown_peer(slot.peer, port=self.port)
                _log.warning("flight.stream.ended_at_stop", plan=slot.plan, peer=slot.peer,
                             batches=slot.sent, connection_closed=ended)
            ok = done.wait(timeout=_CLOSE_WAIT_S)
        self.cache.close()
        return ok

