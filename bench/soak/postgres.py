"""A private PostgreSQL for the soak: its own data directory and port, so the soak can
restart it (a failover, as the catalog and the Flight servers see one) without touching
the shared server on 5432.

``initdb`` and ``pg_ctl`` come from ``/usr/lib/postgresql/*/bin`` (or ``PATH``).
PostgreSQL refuses to run as root, so as root the cluster runs as the ``postgres``
user (``runuser``), in a directory it owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PrivatePostgres", "pg_bin"]


def pg_bin(name: str) -> str:
    """The newest ``/usr/lib/postgresql/*/bin/NAME``, else ``NAME`` on ``PATH``."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path is None:
        msg = f"{name} not found (install PostgreSQL's server binaries)"
        raise FileNotFoundError(msg)
    return on_path


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster in ``directory``, listening on 127.0.0.1:``port`` only."""

    directory: Path
    port: int
    _as_user: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if os.geteuid() == 0:  # initdb and postgres refuse root
            user = pwd.getpwnam("postgres")
            self.directory.mkdir(parents=True, exist_ok=True)
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``postgres`` database (trust auth, loopback)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as_user, *args], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            msg = f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr[-800:]}"
            raise RuntimeError(msg)

    def init(self) -> PrivatePostgres:
        """``initdb`` (trust auth, no fsync: a soak's data is thrown away)."""
        self._run(pg_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")
        return self

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.directory} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.directory / "postgres.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop (``fast``: open sessions are ended, as a failover ends them)."""
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60",
                  "stop")

    def pid(self) -> int | None:
        """The postmaster's pid, or None when it is not running."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
