"""What the spawned-DataLoader tests share: the loader options and a dataset over a toy
Flight server (``tests.sdk.wire_toys``), read through a worker's own connection."""

from __future__ import annotations

from typing import Any

from tests.sdk.wire_toys import ToyFlightServer
from windpipe.sdk import WindpipeIterableDataset
from windpipe.sdk._state import ClientSettings, WorkerSource

SPAWN: dict[str, Any] = {"batch_size": None, "num_workers": 2,
                         "multiprocessing_context": "spawn"}


def toy_dataset(toy: ToyFlightServer) -> WindpipeIterableDataset:
    """The toy plan ``p-toy`` as a dataset whose workers stream from ``toy``."""
    source = WorkerSource("p-toy", settings=ClientSettings(
        url="http://127.0.0.1:9", timeout=5.0, flight_locations=(toy.location,)))
    return WindpipeIterableDataset(source, plan_id="p-toy")
