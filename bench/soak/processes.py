"""The soak's processes: each server and client a process of its own, started, killed
and started again by role name, with its RSS and open files sampled (``psutil``).

A :class:`Proc` is one role (``flight-1``, ``catalog-a``, ``client-flight-1``...): its
command, environment and log file stay the same across restarts, so a restarted Flight
server comes back on its own loopback address and port, with its own tier directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pyarrow.flight as fl

__all__ = ["Proc", "flight_ready", "free_port_on", "http_ready", "tree_usage", "wait_for"]


def free_port_on(host: str) -> int:
    """A port free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` until true; the seconds it took (TimeoutError past the bound)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            msg = f"waited {timeout_s} s for {what}"
            raise TimeoutError(msg)
        time.sleep(0.1)
    return time.monotonic() - start


def http_ready(url: str) -> Callable[[], bool]:
    """True once ``url`` answers 200."""
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
    return check


def flight_ready(location: str) -> Callable[[], bool]:
    """True once the Flight server at ``location`` answers its ``health`` action."""
    def check() -> bool:
        try:
            with fl.connect(location) as client:
                list(client.do_action(fl.Action("health", b""),
                                      options=fl.FlightCallOptions(timeout=2.0)))
        except (fl.FlightError, OSError):
            return False
        return True
    return check


def tree_usage(pid: int) -> dict[str, int] | None:
    """RSS bytes, the part of it backed by files and shared memory (``shared``: mapped
    tiers, libraries), and open files of a process and its children (None once it is
    gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    rss = shared = fds = 0
    for p in procs:
        try:
            mem = p.memory_info()
            rss += mem.rss
            shared += getattr(mem, "shared", 0)
            fds += p.num_fds()
        except psutil.Error:
            continue
    return {"rss": rss, "shared": shared, "fds": fds, "procs": len(procs)}


@dataclass
class Proc:
    """One role's process; :meth:`start` again after :meth:`kill` restarts it the same way."""

    role: str
    cmd: list[str]
    env: dict[str, str]
    log: Path
    ready: Callable[[], bool] | None = None
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    incarnations: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)  # this incarnation's
    history: list[dict[str, Any]] = field(default_factory=list)  # one per incarnation

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def start(self, *, wait_s: float = 120.0, wait: bool = True) -> float:
        """Start; wait until ready (if a check was given and ``wait``); the seconds that
        took."""
        self._close_incarnation()
        out = self.log.open("ab")
        self.popen = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.started_at = time.time()
        self.incarnations += 1
        return self.wait_ready(wait_s) if wait else 0.0

    def wait_ready(self, wait_s: float = 120.0) -> float:
        """Seconds until the ready check passes (RuntimeError if the process ends first)."""
        if self.ready is None:
            return 0.0
        return wait_for(self._ready_or_died, wait_s, f"{self.role} to be ready")

    def _ready_or_died(self) -> bool:
        assert self.popen is not None
        assert self.ready is not None
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-1500:]
            msg = f"{self.role} exited with {self.popen.returncode}: {tail}"
            raise RuntimeError(msg)
        return self.ready()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL, *, wait_s: float = 30.0) -> None:
        """Send ``sig`` to the process (SIGKILL: its whole group, DataLoader workers too)
        and reap it (SIGKILL after ``wait_s`` if it did not end)."""
        if self.popen is None or self.popen.poll() is not None:
            return
        if sig == signal.SIGKILL:
            os.killpg(self.popen.pid, signal.SIGKILL)
        else:
            self.popen.send_signal(sig)
        try:
            self.popen.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def sample(self, now: float) -> None:
        """Record this incarnation's RSS and open files now."""
        if self.alive() and self.pid is not None:
            usage = tree_usage(self.pid)
            if usage is not None:
                self.samples.append({"at": now, **usage})

    def _close_incarnation(self) -> None:
        if self.samples:
            self.history.append({"started_at": self.started_at, "samples": self.samples})
        self.samples = []

    def incarnation_history(self) -> list[dict[str, Any]]:
        """Every incarnation's samples, the running one last."""
        current = [{"started_at": self.started_at, "samples": self.samples}] if self.samples \
            else []
        return [*self.history, *current]
