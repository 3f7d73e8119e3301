"""How many bytes a read-ahead keeps in flight: measured, not guessed.

A store answers after its latency ``L`` and then delivers at most ``BW`` bytes per
second, so it takes about ``BW x L`` bytes in flight (the bandwidth-delay product) to
keep it busy; fewer leave it idle between requests, more only hold memory. Both
figures are measured from the requests themselves, the way BBR paces TCP:

* latency: the shortest request duration among the recent ones (the round trip a
  request cannot beat, whatever its size);
* bandwidth: the highest recent delivery rate, each sample being the bytes every
  request delivered during one request's lifetime divided by that lifetime (a
  maximum, so a pause of the consumer does not read as a slow store).

The window is ``gain x BW x L`` (the gain lets it grow while the store has
bandwidth to spare), never below ``floor_bytes`` and never above ``max_bytes``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

__all__ = ["Pacing", "PacingFigures"]

_SAMPLES = 64


@dataclass(frozen=True, slots=True)
class PacingFigures:
    """The measured latency (s), bandwidth (bytes/s) and the window they give (bytes)."""

    latency_s: float | None
    bandwidth_bps: float | None
    window_bytes: int


class Pacing:
    """Latency and bandwidth of one stream of requests, and the window they call for."""

    def __init__(self, *, max_bytes: int, floor_bytes: int, gain: float = 2.0) -> None:
        self.max_bytes = max(1, int(max_bytes))
        self.floor_bytes = max(1, min(int(floor_bytes), self.max_bytes))
        self.gain = gain
        self._lock = threading.Lock()
        self._delivered = 0
        self._durations: deque[float] = deque(maxlen=_SAMPLES)
        self._rates: deque[float] = deque(maxlen=_SAMPLES)

    def start(self) -> tuple[float, int]:
        """A request begins: the token :meth:`done` takes (time, bytes delivered so far)."""
        with self._lock:
            return time.perf_counter(), self._delivered

    def done(self, token: tuple[float, int], nbytes: int) -> None:
        """A request begun with ``token`` delivered ``nbytes``."""
        t0, delivered0 = token
        now = time.perf_counter()
        with self._lock:
            self._delivered += nbytes
            elapsed = max(now - t0, 1e-6)
            self._durations.append(elapsed)
            self._rates.append((self._delivered - delivered0) / elapsed)

    def figures(self) -> PacingFigures:
        """The current estimates and window."""
        with self._lock:
            latency = min(self._durations) if self._durations else None
            bandwidth = max(self._rates) if self._rates else None
        if latency is None or bandwidth is None:
            return PacingFigures(latency, bandwidth, self.floor_bytes)
        window = int(self.gain * bandwidth * latency)
        return PacingFigures(latency, bandwidth,
                             max(self.floor_bytes, min(self.max_bytes, window)))
