"""WindpipeIterableDataset over a real (toy) Flight server: resumption, ranks, workers."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from tests.sdk.wire_toys import ToyFlightServer
from windpipe.sdk import InvalidConfig, WindpipeIterableDataset
from windpipe.sdk._state import ClientSettings, WorkerSource


@pytest.fixture
def toy():
    server = ToyFlightServer(n_batches=11)
    yield server
    server.shutdown()


def _dataset(toy, **kwargs) -> WindpipeIterableDataset:
    source = WorkerSource("p-toy", settings=ClientSettings(
        url="http://127.0.0.1:9", timeout=5.0, flight_locations=(toy.location,)))
    return WindpipeIterableDataset(source, plan_id="p-toy", **kwargs)


def _ids(batches) -> list[tuple[int, float]]:
    return [(b.state.batch_idx, float(b.inputs[0, 0, 0])) for b in batches]


def test_epochs_and_dataloader_batch_size_none(toy):
    ds = _dataset(toy)
    full = _ids(DataLoader(ds, batch_size=None))
    assert full == [(i, float(i)) for i in range(11)]
    ds.set_epoch(3)
    assert _ids(ds)[0] == (0, 3000.0)


def test_resume_from_state_dict_equals_uninterrupted_tail(toy):
    ds = _dataset(toy)
    full = _ids(ds)
    ds2 = _dataset(toy)
    seen = []
    for batch in ds2:
        seen.append(batch)
        if len(seen) == 4:
            break
    state = ds2.state_dict()
    assert state == {"plan_id": "p-toy", "epoch": 0, "batch": 4}
    assert ds2.state_dict(after=seen[2])["batch"] == 3
    ds3 = _dataset(toy)
    ds3.load_state_dict(state)
    assert _ids(seen) + _ids(ds3) == full
    # the next pass starts the epoch over
    assert _ids(ds3) == full
    with pytest.raises(InvalidConfig, match="belongs to plan"):
        ds3.load_state_dict({**state, "plan_id": "p-other"})


def test_ranks_get_disjoint_batches(toy):
    values = []
    for rank in range(3):
        got = _ids(_dataset(toy, rank=rank, world_size=3))
        values.append({v for _, v in got})
    assert all(not (a & b) for i, a in enumerate(values) for b in values[i + 1:])
    assert set().union(*values) == {float(g) for g in range(11)}
    with pytest.raises(InvalidConfig, match="rank 3"):
        list(_dataset(toy, rank=3, world_size=3))


@pytest.mark.parametrize("start", [5])
def test_workers_keep_the_single_process_order(toy, start):
    ds = _dataset(toy)
    ds.load_state_dict({"plan_id": "p-toy", "epoch": 0, "batch": start})
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    got = _ids(loader)
    assert got == [(i, float(i)) for i in range(start, 11)]
