"""``data_access="full_in_mem"``: warm a plan's split into the Flight servers' caches.

Every Flight location of the deployment may serve any endpoint (the first location
of an endpoint is its cache home, the others are fallbacks), so each one is asked,
concurrently, to load the plan's whole split through the ``warm`` action
(``docs/wire.md`` section 6). The servers stream one progress result per step
(:class:`~services.contract.reports.WarmProgress`: ``loaded``, ``total``, ``bytes``,
``total_bytes``, ``seconds``, ...); a tqdm bar in bytes is fed from them as they
arrive. A split larger than a server's cache budget raises :class:`ResourceExhausted`
naming both sizes, before anything is loaded.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from windpipe.sdk._exceptions import WindpipeError
from windpipe.sdk._html import bar_disabled, progress_bar
from windpipe.services.contract.reports import WarmProgress
from windpipe.services.contract.wire import ACTION_WARM

if TYPE_CHECKING:
    from windpipe.sdk._stream import FlightStream

__all__ = ["WarmResult", "warm_plan"]


@dataclass(frozen=True)
class WarmResult:
    """What one Flight location loaded: ``chunks``, ``bytes``, wall ``seconds``, and the id
    of the host tier that now holds the plan's blocks (None without a tier)."""

    chunks: int
    bytes: int
    seconds: float
    tier_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"chunks", "bytes", "seconds"}``."""
        return {"chunks": self.chunks, "bytes": self.bytes, "seconds": self.seconds}


def warm_plan(
    stream: FlightStream, plan_id: str, *, epoch: int = 0, progress: bool | None = None,
    locations: Sequence[str] | None = None, input_valid: bool = False,
) -> dict[str, WarmResult]:
    """Warm ``plan_id`` on every location of ``stream`` (or ``locations``); one
    :class:`WarmResult` each. ``input_valid``: the blocks of the plan as read with
    ``input_valid`` (SEMANTICS 5b), which are not the plain plan's.

    ``progress``: None shows a bar when the output is a terminal or notebook, True
    always, False never. The first error (a budget too small, a bad segment, a
    refused token) is raised once every location has finished.
    """
    tqdm = progress_bar()  # imported only when a bar is drawn

    events: queue.Queue[tuple[str, WarmProgress | BaseException | None]] = queue.Queue()

    body: dict[str, Any] = {"plan_id": plan_id, "epoch": epoch}
    if input_valid:
        body["input_valid"] = True

    def run(location: str) -> None:
        try:
            for step in stream.action(location, ACTION_WARM, body):
                events.put((location, WarmProgress.model_validate(step)))
        except BaseException as exc:
            events.put((location, exc))
        finally:
            events.put((location, None))

    locations = list(stream.locations if locations is None else locations)
    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(loc,), name=f"windpipe-warm-{k}",
                                daemon=True) for k, loc in enumerate(locations)]
    last: dict[str, WarmProgress] = {}
    seconds: dict[str, float] = {}
    errors: list[BaseException] = []
    disable = bar_disabled(progress=progress)
    with tqdm(desc=f"warming {plan_id}", total=0, unit="B", unit_scale=True,
              disable=disable) as bar:
        for t in threads:
            t.start()
        running = len(threads)
        while running:
            location, item = events.get()
            if item is None:
                running -= 1
                seconds[location] = time.perf_counter() - started
            elif isinstance(item, BaseException):
                errors.append(item)
            else:
                before = last.get(location)
                if before is None:
                    bar.total = (bar.total or 0) + item.total_bytes
                    bar.refresh()
                bar.update(item.bytes - (before.bytes if before is not None else 0))
                last[location] = item
    for t in threads:
        t.join()
    if errors:
        first = errors[0]
        raise first if isinstance(first, WindpipeError) else WindpipeError(str(first))
    return {loc: _result(last.get(loc), seconds.get(loc, 0.0)) for loc in locations}


def _result(last: WarmProgress | None, seconds: float) -> WarmResult:
    """What the last progress result of a location says (nothing loaded without one)."""
    if last is None:
        return WarmResult(chunks=0, bytes=0, seconds=round(seconds, 6))
    return WarmResult(chunks=last.loaded, bytes=last.bytes, seconds=round(seconds, 6),
                      tier_id=last.tier.id if last.tier is not None else None)
