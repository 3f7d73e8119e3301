"""How long a Flight pass keeps trying after a lost or refused stream (``windpipe.sdk._stream``).

Two budgets, both counted since the pass's last batch (each batch received makes them
whole again), so a long pass survives any number of lost streams as long as each resumed
stream delivers: a trainer that pauses past the servers' ``flight_stream_stall_s`` loses
its stream at every pause, and the pass resumes at its next batch every time.

* Failovers (a server died, stopped answering, or ended the stream): at most
  ``max_failovers`` in a row, a short pause between two (0.05 s more each time, at most
  0.5 s): a dead server is answered at once by another one or not at all.
* Refusals at a server's stream cap (``unavailable`` with ``details.limit``
  ``"flight_max_streams"``: the server is alive and will have a free stream once one of
  its readers finishes): when every replica refused, the pass waits from ``_FIRST_S``,
  doubling up to ``_MAX_S``, with jitter (refused readers do not all come back at once),
  at most ``busy_wait_s`` in all. They are not failovers.
"""

from __future__ import annotations

import random
import time

import pyarrow.flight as fl

from windpipe.sdk._exceptions import Unavailable, WindpipeError, error_from_flight
from windpipe.sdk._locations import UNREACHABLE_HINT

__all__ = ["BUSY_LIMIT", "PassRetries", "busy_refusal"]

BUSY_LIMIT = "flight_max_streams"  # details.limit of a refusal at a server's stream cap
_FIRST_S = 0.1
_MAX_S = 5.0


def busy_refusal(exc: BaseException) -> WindpipeError | None:
    """The error of a server's refusal at its stream cap (its envelope's details travel in
    the Flight error's ``extra_info``), else None."""
    if not isinstance(exc, fl.FlightError):
        return None
    err = error_from_flight(exc)
    return err if err.details.get("limit") == BUSY_LIMIT else None


class PassRetries:
    """One pass's failovers and waits for busy servers since its last batch."""

    def __init__(self, *, max_failovers: int, busy_wait_s: float) -> None:
        self.max_failovers = max_failovers
        self.busy_wait_s = busy_wait_s
        self.progress()

    def progress(self) -> None:
        """A batch arrived: both budgets are whole again."""
        self.failovers = 0
        self.refusals = 0
        self.busy_waited = 0.0

    def after_refusal(self, busy: WindpipeError, *, next_batch: int,
                      cause: BaseException) -> None:
        """Every replica refused at its stream cap: wait, or raise :class:`Unavailable`
        (the server's details and ``waited_s``) once ``busy_wait_s`` is spent."""
        left = self.busy_wait_s - self.busy_waited
        if left <= 0:
            msg = (f"gave up at batch {next_batch} after waiting {self.busy_waited:.1f} s for "
                   f"a Flight server with a free stream ({self.refusals} refusals in a row); "
                   f"the last one said: {busy.message}")
            raise Unavailable(msg, details={**busy.details,
                                            "waited_s": round(self.busy_waited, 3)}) from cause
        self.refusals += 1
        pause = min(_FIRST_S * 2 ** min(self.refusals - 1, 16), _MAX_S)
        pause = min(pause * random.uniform(0.5, 1.0), left)
        self.busy_waited += pause
        time.sleep(pause)

    def after_failover(self, *, next_batch: int, dead: set[str],
                       cause: BaseException) -> None:
        """A location failed: pause briefly, or raise :class:`Unavailable` after more than
        ``max_failovers`` in a row."""
        self.failovers += 1
        if self.failovers > self.max_failovers:
            msg = (f"gave up after {self.failovers - 1} failovers in a row at batch "
                   f"{next_batch}: could not reach {', '.join(sorted(dead))} ({cause}); "
                   f"{UNREACHABLE_HINT}")
            raise Unavailable(msg, details={"dead": sorted(dead)}) from cause
        time.sleep(min(0.05 * self.failovers, 0.5))
