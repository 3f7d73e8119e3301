"""One training client of the soak, in a process of its own.

``python -m bench.soak.client SPEC.json`` reads its :class:`ClientSpec` and reads passes
of its plan, epoch after epoch, until its deadline or SIGTERM: each batch is checked
against the plan's schedule (``GET /v1/plans/{id}/schedule`` for its epoch, rank and
world size: the batch's ``global_batch`` provenance must be the schedule's entry at its
position) and written to its journal (JSON lines, one ``write`` each, ``O_APPEND``).

The journal is also the client's saved state, as a training job's checkpoint is: a
client started again (after the soak SIGKILLed it) resumes after the last batch its
journal holds, with ``start_batch`` (or the DataLoader dataset's ``load_state_dict``),
so a batch is consumed exactly once across kills. Every error the SDK raises is
journalled with its type; a typed :class:`WindpipeError` is retried from the next batch
after a pause, with a fresh token when the token was refused (the soak writes a new
one after revoking the old), on another plan when the plan was retired; an untyped one
is journalled as such (the soak fails on it) and retried the same way.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ClientSpec", "last_position", "main", "read_journal"]

PROBE_EVERY_S = 2.0  # a catalog request (GET the plan) this often, timed
STEP_S = 0.05  # the "training step" after each batch: keeps the clients' CPU modest
PAUSE_S = 0.5  # after an error, before the pass is tried again


@dataclass(frozen=True, kw_only=True)
class ClientSpec:
    """What one client process reads, from where, and where it writes its journal."""

    name: str
    catalog_url: str
    token_file: str
    plan_id: str
    fallback_plan_id: str  # read after ``plan_id`` is retired
    transport: str  # "flight" or "local"
    rank: int = 0
    world_size: int = 1
    workers: int = 0  # torch DataLoader workers (0: plan.batches)
    journal: str
    until: float  # wall-clock time.time() to stop at
    flight_locations: tuple[str, ...] = field(default=())


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a journal (a line cut short by SIGKILL is left out)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def last_position(records: list[dict[str, Any]], spec: ClientSpec) -> tuple[str, int, int]:
    """(plan, epoch, next batch) after the last batch journalled (the saved state)."""
    plan, epoch, nxt = spec.plan_id, 0, 0
    for rec in records:
        if rec["k"] == "batch":
            plan, epoch, nxt = rec["plan"], rec["e"], rec["i"] + 1
        elif rec["k"] == "switch":
            plan, epoch, nxt = rec["plan"], 0, 0
        elif rec["k"] == "pass_end":
            plan, epoch, nxt = rec["plan"], rec["e"] + 1, 0
    return plan, epoch, nxt


class _Journal:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        os.write(self._fd, (json.dumps({"k": kind, "at": time.time(), **fields},
                                       separators=(",", ":")) + "\n").encode())


class _Client:
    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        self.journal = _Journal(spec.journal)
        self.stop = False
        self.token = ""
        self.catalog: Any = None
        self.rest: Any = None
        self.last_probe = 0.0
        self.nxt = 0  # the next batch of the pass being read

    def connect(self) -> None:
        from windpipe.sdk import Catalog  # noqa: PLC0415 - after the signal handler is set
        from windpipe.sdk._rest import RestClient  # noqa: PLC0415

        self.close()
        self.token = Path(self.spec.token_file).read_text().strip()
        self.catalog = Catalog(self.spec.catalog_url, token=self.token, read_timeout=60.0,
                               flight_locations=self.spec.flight_locations or None)
        self.rest = RestClient(self.spec.catalog_url, token=self.token, timeout=30.0)

    def close(self) -> None:
        if self.catalog is not None:
            self.catalog.close()
            self.rest.close()
            self.catalog = self.rest = None

    def timed_get(self, path: str, **params: Any) -> Any:
        """A REST GET, its client-side latency journalled (a failure raises, typed)."""
        start = time.perf_counter()
        body = self.rest.get_json(path, **params)
        self.journal.write("catalog", ms=round((time.perf_counter() - start) * 1e3, 2),
                           route=path.rsplit("/", maxsplit=1)[-1] if "schedule" in path else "plan")
        return body

    def schedule(self, plan_id: str, epoch: int) -> list[int]:
        out: list[int] = []
        token = None
        while True:
            page = self.timed_get(f"/v1/plans/{plan_id}/schedule", epoch=epoch,
                                  rank=self.spec.rank, world_size=self.spec.world_size,
                                  page_size=1000, page_token=token)
            out += [int(item["global_batch_idx"]) for item in page["items"]]
            token = page["next_page_token"]
            if not token:
                return out

    def batches(self, plan_id: str, epoch: int, start: int) -> Iterator[Any]:
        spec = self.spec
        plan = self.catalog.plan(plan_id)
        if spec.workers:
            loader = plan.dataloader(epoch, rank=spec.rank, world_size=spec.world_size,
                                     num_workers=spec.workers, transport=spec.transport,
                                     progress=False)
            loader.dataset.load_state_dict({"plan_id": plan_id, "epoch": epoch,
                                            "batch": start})
            return iter(loader)
        return iter(plan.batches(epoch, rank=spec.rank, world_size=spec.world_size,
                                 start_batch=start, transport=spec.transport,
                                 progress=False))

    def run(self) -> None:
        from windpipe.sdk import Conflict, Unauthenticated, WindpipeError  # noqa: PLC0415

        spec = self.spec
        plan_id, epoch, nxt = last_position(read_journal(Path(spec.journal)), spec)
        self.journal.write("start", pid=os.getpid(), plan=plan_id, e=epoch, i=nxt)
        self.connect()
        sched: list[int] | None = None
        while not self.stop and time.time() < spec.until:
            try:
                if sched is None:
                    sched = self.schedule(plan_id, epoch)
                    self.journal.write("pass", plan=plan_id, e=epoch, n=len(sched))
                if nxt >= len(sched):
                    self.journal.write("pass_end", plan=plan_id, e=epoch)
                    epoch, nxt, sched = epoch + 1, 0, None
                    continue
                self.nxt = nxt
                try:
                    self.read_pass(plan_id, epoch, sched)
                finally:
                    nxt = self.nxt  # the batches read before an error stay read
            except WindpipeError as exc:
                self.journal.write("error", type=type(exc).__name__, typed=True,
                                   retryable=getattr(exc, "retryable", None),
                                   plan=plan_id, e=epoch, i=nxt, msg=str(exc)[:300])
                if isinstance(exc, Conflict) and plan_id != spec.fallback_plan_id:
                    plan_id, epoch, nxt, sched = spec.fallback_plan_id, 0, 0, None
                    self.journal.write("switch", plan=plan_id)
                time.sleep(PAUSE_S)
                if isinstance(exc, Unauthenticated):
                    self.reconnect()
            except Exception as exc:
                self.journal.write("error", type=type(exc).__name__, typed=False,
                                   plan=plan_id, e=epoch, i=nxt, msg=str(exc)[:300])
                time.sleep(PAUSE_S)
                self.reconnect()
        self.journal.write("end")
        self.close()

    def reconnect(self) -> None:
        """New connections (and the token file's token, which the soak may have renewed);
        a failure is journalled by the caller's next attempt."""
        try:
            self.connect()
        except Exception as exc:
            self.journal.write("note", msg=f"reconnect failed: {type(exc).__name__}")

    def probe(self, plan_id: str, epoch: int) -> None:
        """GET the plan, timed; a failure is journalled, the pass goes on (it needs
        nothing of the catalog)."""
        from windpipe.sdk import WindpipeError  # noqa: PLC0415

        self.last_probe = time.monotonic()
        try:
            self.timed_get(f"/v1/plans/{plan_id}")
        except WindpipeError as exc:
            self.journal.write("error", type=type(exc).__name__, typed=True,
                               retryable=getattr(exc, "retryable", None), plan=plan_id,
                               e=epoch, i=self.nxt, msg=f"probe: {str(exc)[:300]}")

    def read_pass(self, plan_id: str, epoch: int, sched: list[int]) -> None:
        """Read the pass from batch ``self.nxt`` on; journal each batch (``self.nxt``
        follows it, so an error leaves it at the next batch to read)."""
        it = self.batches(plan_id, epoch, self.nxt)
        while self.nxt < len(sched) and not self.stop and time.time() < self.spec.until:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self.journal.write("short", plan=plan_id, e=epoch, i=self.nxt, n=len(sched))
                self.nxt = len(sched)  # the stream ended early: its missing batches are lost
                return
            wait = time.perf_counter() - start
            i, g = int(batch.batch_idx), batch.state.global_batch
            ok = i < len(sched) and g == sched[i]
            self.journal.write("batch", plan=plan_id, e=epoch, i=i, g=g, ok=ok,
                               ms=round(wait * 1e3, 2))
            self.nxt = i + 1
            if time.monotonic() - self.last_probe > PROBE_EVERY_S:
                self.probe(plan_id, epoch)
            time.sleep(STEP_S)


def main(argv: list[str] | None = None) -> None:
    """Run the client of the spec file ``argv[0]``."""
    args = sys.argv[1:] if argv is None else argv
    spec = ClientSpec(**{**json.loads(Path(args[0]).read_text()),
                         "flight_locations": tuple(json.loads(Path(args[0]).read_text())
                                                   .get("flight_locations", ()))})
    client = _Client(spec)

    def _stop(_signum: int, _frame: object) -> None:
        client.stop = True

    signal.signal(signal.SIGTERM, _stop)
    client.run()


def spec_json(spec: ClientSpec) -> str:
    """The spec file's text."""
    return json.dumps({**asdict(spec), "flight_locations": list(spec.flight_locations)})


if __name__ == "__main__":
    main()
