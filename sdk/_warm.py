"""``data_access="full_in_mem"``: warm a plan's split into the Flight servers' caches.

Every Flight location of the deployment may serve any endpoint (the first location
of an endpoint is its cache home, the others are fallbacks), so each one is asked,
concurrently, to load the plan's whole split through the ``warm`` action
(``docs/wire.md`` section 6). The servers stream one progress result per step
(``{"loaded", "total", "bytes", "total_bytes", "seconds"}``); a tqdm bar in bytes is
fed from them as they arrive. A split larger than a server's cache budget raises
:class:`ResourceExhausted` naming both sizes, before anything is loaded.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk._exceptions import WindpipeError
from sdk._html import progress_bar

if TYPE_CHECKING:
    from sdk._stream import FlightStream

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
    locations: Sequence[str] | None = None,
) -> dict[str, WarmResult]:
    """Warm ``plan_id`` on every location of ``stream`` (or ``locations``); one
    :class:`WarmResult` each.

    ``progress``: None shows a bar when the output is a terminal or notebook, True
    always, False never. The first error (a budget too small, a bad segment, a
    refused token) is raised once every location has finished.
    """
    tqdm = progress_bar()  # imported only when a bar is drawn

    events: queue.Queue[tuple[str, dict[str, Any] | BaseException | None]] = queue.Queue()

    def run(location: str) -> None:
        try:
            for step in stream.action(location, "warm", {"plan_id": plan_id, "epoch": epoch}):
                events.put((location, step))
        except BaseException as exc:
            events.put((location, exc))
        finally:
            events.put((location, None))

    locations = list(stream.locations if locations is None else locations)
    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(loc,), name=f"windpipe-warm-{k}",
                                daemon=True) for k, loc in enumerate(locations)]
    last: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    errors: list[BaseException] = []
    disable = True if progress is False else None if progress is None else False
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
                    bar.total = (bar.total or 0) + int(item.get("total_bytes", 0))
                    bar.refresh()
                bar.update(int(item.get("bytes", 0)) - int((before or {}).get("bytes", 0)))
                last[location] = item
    for t in threads:
        t.join()
    if errors:
        first = errors[0]
        raise first if isinstance(first, WindpipeError) else WindpipeError(str(first))
    return {
        loc: WarmResult(chunks=int(last.get(loc, {}).get("loaded", 0)),
                        bytes=int(last.get(loc, {}).get("bytes", 0)),
                        seconds=round(seconds.get(loc, 0.0), 6),
                        tier_id=(last.get(loc, {}).get("tier") or {}).get("id"))
        for loc in locations
    }
