"""A Flight server that stops answering (SIGSTOP) is failed over like a dead one.

Server A runs in its own process, server B in this one; both serve the same stored
plan with the same ticket secret. The SDK streams from A; A is stopped mid-pass
(not killed: its sockets stay open and silent). Within the per-batch read deadline
the stream gives up on A and resumes on B at the next batch: every batch arrives
exactly once, in order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.servers import free_port
from tests.flight_server.helpers import COLUMNS, StreamSpec, start_server, write_dataset
from windpipe.sdk import _stream as sdk_stream
from windpipe.sdk._stream import FlightStream
from windpipe.services.contract.configs import LoaderConfig, WindowConfig
from windpipe.services.contract.wire import FlightCommand

READ_TIMEOUT_S = 2.0
CONFIG = LoaderConfig(
    inputs={"cycling": COLUMNS["cycling"]}, targets={"cycling": ("voltage_v",)},
    default_window=WindowConfig(batch_size=64, seq_len=512), strategy="sequential",
)
SERVE = """
import sys, time
from pathlib import Path
from pydantic import SecretStr
from windpipe.flight_server.runner import start_flight_server
from windpipe.services.planning.artifact import PlanArtifact
from windpipe.services.settings import Settings
artifact = PlanArtifact.from_ipc(Path(sys.argv[1]).read_bytes())
settings = Settings(flight_host="127.0.0.1", ticket_secret=SecretStr("test-secret"),
                    tier_bytes=0, log_level="ERROR")
running = start_flight_server(settings, port=int(sys.argv[2]),
                              plan_source=lambda plan_id: artifact)
print("READY", flush=True)
while True:
    time.sleep(3600)
"""


@pytest.mark.slow
def test_a_stopped_server_is_failed_over_within_the_read_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    timed_out: list[str] = []  # where the read deadline, not an error, ended a read
    chunks = sdk_stream._chunks

    def watched(reader: Any, timeout: float | None, uri: str) -> Iterator[Any]:
        try:
            yield from chunks(reader, timeout, uri)
        except sdk_stream._ReadTimedOut:
            timed_out.append(uri)
            raise

    monkeypatch.setattr(sdk_stream, "_chunks", watched)
    specs = [StreamSpec("cycling", f"c{c}", 0, (64 * 512 * 12 + 1,)) for c in range(8)]
    ds = write_dataset(tmp_path / "data", specs, fmt="parquet", chunk_rows=1 << 15)
    plan = ds.plan(CONFIG, "p-big")
    n_batches = plan.schedule(0).n_batches
    (tmp_path / "plan.arrow").write_bytes(plan.artifact.to_ipc())
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(tmp_path / "plan.arrow"), str(port)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    local = start_server({"p-big": plan}, cache_bytes=1 << 30)
    stopped = False
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        remote = f"grpc://127.0.0.1:{port}"
        stream = FlightStream([remote, local.location], timeout=10.0,
                              read_timeout=READ_TIMEOUT_S)
        seen: list[int] = []
        for _, meta in stream.batches(FlightCommand("p-big")):
            seen.append(meta.batch_idx)
            if len(seen) == 5:
                os.kill(proc.pid, signal.SIGSTOP)
                stopped = True
        failovers, dead = stream.counters.failovers, list(stream.counters.dead)
        stream.close()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)
        local.stop(grace_s=5)
    assert n_batches >= 80
    assert seen == list(range(n_batches))  # none lost, none twice, in order
    assert failovers >= 1
    assert dead == [remote] * failovers
    assert stopped
    assert timed_out == [remote]  # the deadline, not an error, noticed it
