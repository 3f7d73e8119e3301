"""Plan schedules on the edges of SEMANTICS sections 3, 4 and 7, over real HTTP.

A purpose-built dataset (B=3, T=4, so B*T=12) holds streams of N = 0, 1, 2, T-1,
T, T+1, B*T-1, B*T, B*T+1, 2*B*T and longer, some split over 2-3 segments (one
with an empty segment in the middle). The expected streams are written down here
from what the test wrote (never read back from the server), and every served
schedule (all pages, every rank of world sizes 1, 2, 3, 7) and the report's
per-rank counts are compared with ``tests/reference/schedule_ref.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.catalog.api_support import served_schedule
from tests.fixtures.data import write_manifest, write_parquet_segment
from tests.reference.schedule_ref import RefBatch, RefStream, reference_rank
from windpipe.services.contract.configs import LoaderConfig

B, T = 3, 4
SET = "s"
WORLD_SIZES = (1, 2, 3, 7)

# (cell_id, cidx, protocol, rows of each segment in stream order)
SPEC: tuple[tuple[str, int, str, tuple[int, ...]], ...] = (
    ("c00", 0, "cycling", (0,)),
    ("c01", 0, "cycling", (1,)),
    ("c02", 0, "cycling", (2,)),
    ("c03", 0, "cycling", (T,)),
    ("c03", 0, "hppc", (9,)),
    ("c04", 0, "cycling", (T + 1,)),
    ("c05", 0, "cycling", (B * T,)),
    ("c05", 0, "hppc", (2,)),
    ("c06", 0, "cycling", (B * T + 1,)),
    ("c07", 0, "cycling", (7, 4)),
    ("c08", 0, "cycling", (10, 10, 5)),
    ("c08", 0, "hppc", (5, 8)),
    ("c08", 1, "cycling", (6, 0, 7)),
    ("c09", 0, "cycling", (20, 17)),
    ("c10", 0, "cycling", (T - 1,)),
    ("c10", 0, "hppc", (0,)),
    ("c11", 0, "cycling", (2 * B * T,)),
    ("c11", 0, "hppc", (1,)),
    ("c12", 0, "hppc", (14,)),
)

_WINDOW = {"batch_size": B, "seq_len": T}
_ONE = {"inputs": {"cycling": ["voltage_v"]}, "targets": {"cycling": ["voltage_v"]}}
_TWO = {
    "inputs": {"cycling": ["voltage_v", "current_a"], "hppc": ["voltage_v"]},
    "targets": {"cycling": ["voltage_v"], "hppc": ["voltage_v"]},
}

CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"default_window": _WINDOW, **_ONE},
    "plain-drop-incomplete": {"default_window": {**_WINDOW, "drop_incomplete": True}, **_ONE},
    "plain-step-below": {"default_window": {**_WINDOW, "step_rows": 5}, **_ONE,
                         "drop_incomplete_distributed": False},
    "plain-step-above": {"default_window": {**_WINDOW, "step_rows": 17}, **_ONE},
    "plain-step-above-drop": {
        "default_window": {**_WINDOW, "step_rows": 17, "drop_incomplete": True}, **_ONE
    },
    "plain-drop-batches": {"default_window": _WINDOW, **_ONE, "drop_incomplete_batches": True,
                           "drop_incomplete_distributed": False},
    "plain-two-protocols": {
        "default_window": _WINDOW, "window_by_protocol": {"hppc": {"batch_size": 2,
                                                                   "seq_len": 3}},
        "protocol_order": ["hppc", "cycling"], **_TWO,
    },
    "plain-coarse-group-key": {"default_window": _WINDOW, **_ONE,
                               "group_key": ["set_id", "cell_id", "protocol"]},
    "seq-k1": {"default_window": _WINDOW, **_ONE, "stateful_n_windows": 1},
    "seq-k3": {"default_window": _WINDOW, **_ONE, "stateful_n_windows": 3,
               "drop_incomplete_distributed": False},
    "seq-k-1": {"default_window": _WINDOW, **_ONE, "stateful_n_windows": -1},
    "seq-k3-drop-batches": {"default_window": {**_WINDOW, "drop_incomplete": True}, **_ONE,
                            "stateful_n_windows": 3, "drop_incomplete_batches": True},
    "shuffled-k0": {"default_window": _WINDOW, **_ONE, "strategy": "shuffled", "seed": 5},
    "shuffled-k1": {"default_window": _WINDOW, **_TWO, "strategy": "shuffled", "seed": 6,
                    "stateful_n_windows": 1,
                    "window_by_protocol": {"hppc": {"batch_size": 2, "seq_len": 3}}},
    "shuffled-k3": {"default_window": {**_WINDOW, "drop_incomplete": True}, **_ONE,
                    "strategy": "shuffled", "seed": 7, "stateful_n_windows": 3,
                    "drop_incomplete_distributed": False},
    "shuffled-k-1": {"default_window": _WINDOW, **_ONE, "strategy": "shuffled", "seed": 8,
                     "stateful_n_windows": -1, "drop_incomplete_batches": True},
    "shuffled-k3-no-phase": {"default_window": _WINDOW, **_ONE, "strategy": "shuffled",
                             "seed": 9, "stateful_n_windows": 3, "phase_shift": False},
    "chain-seq-k-1": {"default_window": _WINDOW, **_TWO, "stateful_n_windows": -1,
                      "cross_protocol_state_carry": "chain",
                      "protocol_order": ["cycling", "hppc"]},
    "chain-seq-k2": {"default_window": _WINDOW, **_TWO, "stateful_n_windows": 2,
                     "cross_protocol_state_carry": "chain",
                     "protocol_order": ["hppc", "cycling"], "drop_incomplete_batches": True},
    "chain-shuffled-k3": {"default_window": _WINDOW, **_TWO, "strategy": "shuffled",
                          "seed": 4, "stateful_n_windows": 3,
                          "cross_protocol_state_carry": "chain",
                          "protocol_order": ["hppc", "cycling"],
                          "drop_incomplete_distributed": False},
}


def _write(root: Path) -> None:
    rows = []
    for cell, cidx, protocol, pieces in SPEC:
        for j, n in enumerate(pieces):
            rel = f"{protocol}/{cell}_{cidx}_{j}.parquet"
            write_parquet_segment(root, rel, {
                "voltage_v": np.linspace(3.0, 4.0, n, dtype=np.float32),
                "current_a": np.arange(n, dtype=np.float32),
            })
            rows.append({"set_id": SET, "cell_id": cell, "cidx": cidx, "protocol": protocol,
                         "segment_path": rel, "row_count": n})
    write_manifest(root, rows)


def expected_streams(config: LoaderConfig) -> list[RefStream]:
    """The plan's streams from ``SPEC`` alone: identities in index order, grouped by
    ``group_key``, rows summed over the segments of every member."""
    members = sorted(
        (row for row in SPEC if row[2] in config.inputs), key=lambda r: (r[0], r[1], r[2])
    )
    streams: dict[tuple[Any, ...], list[Any]] = {}
    for cell, cidx, protocol, pieces in members:
        values = {"set_id": SET, "cell_id": cell, "cidx": cidx, "protocol": protocol}
        key = tuple(values[c] for c in config.group_key)
        entry = streams.setdefault(key, [protocol, 0, (SET, cell, cidx)])
        entry[1] += sum(pieces)
    return [
        RefStream(protocol=p, n_rows=n, group_key=key, alignment_key=align)
        for key, (p, n, align) in streams.items()
    ]


@pytest.fixture
def client(catalog_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog_server, timeout=60) as c:
        yield c


def _comparable(batches: list[RefBatch]) -> list[tuple[Any, ...]]:
    """Batches without ``unit``/``group`` numbering (the served ones are global ids)."""
    return [(b.lanes, b.lane_streams, b.lane_protocols, b.seq_len, b.protocol, b.step,
             b.steps) for b in batches]


def _check_report(client: httpx.Client, plan_id: str, streams: list[RefStream],
                  config: LoaderConfig) -> None:
    untrimmed_config = config.model_copy(update={"drop_incomplete_distributed": False})
    for world in WORLD_SIZES:
        report = client.get(f"/v1/plans/{plan_id}/report", params={"world_size": world})
        assert report.status_code == 200, report.text
        body = report.json()
        untrimmed = [len(reference_rank(streams, untrimmed_config, 0, rank=r, world_size=world))
                     for r in range(world)]
        trimmed = [len(reference_rank(streams, config, 0, rank=r, world_size=world))
                   for r in range(world)]
        assert body["world_size"] == world
        assert body["batches_per_rank_untrimmed"] == untrimmed
        assert body["batches_per_rank"] == trimmed
        assert body["dropped"]["distributed_trimmed_batches"] == sum(untrimmed) - sum(trimmed)
        if config.drop_incomplete_distributed:
            assert len(set(trimmed)) <= 1
        else:
            assert trimmed == untrimmed


def _check_totals(report: dict[str, Any], batches: list[RefBatch],
                  streams: list[RefStream]) -> None:
    lanes = [(lane, b.seq_len) for b in batches for lane in b.lanes]
    assert report["batches"] == len(batches)
    assert report["streams"] == len(streams)
    assert report["rows"] == sum(s.n_rows for s in streams)
    assert report["lanes"] == len(lanes)
    assert report["padding_lanes"] == sum(lane is None for lane, _ in lanes)
    assert report["tokens"] == sum(t for _, t in lanes)
    assert report["real_tokens"] == sum(
        min(t, streams[lane[0]].n_rows - 1 - lane[1]) for lane, t in lanes if lane is not None
    )


def test_schedule_edges_match_reference(client: httpx.Client, tmp_path: Path) -> None:
    _write(tmp_path)
    version = client.post("/v1/datasets/edges/versions",
                          json={"root": tmp_path.as_uri(), "manifest": "manifest.parquet"})
    assert version.status_code == 201, version.text
    assert version.json()["n_rows"] == sum(sum(p) for *_, p in SPEC)
    split = client.post(f"/v1/versions/{version.json()['id']}/splits",
                        json={"strategy": "sample", "fraction": 0.0})
    assert split.status_code == 201, split.text
    split_id = split.json()["id"]

    seen_lengths: set[int] = set()
    for name, body in CONFIGS.items():
        config = LoaderConfig.model_validate(body)
        streams = expected_streams(config)
        seen_lengths |= {s.n_rows for s in streams}
        created = client.post(f"/v1/splits/{split_id}/plans", json=body)
        assert created.status_code == 201, f"{name}: {created.text}"
        plan = created.json()
        assert plan["n_streams"] == len(streams), name

        full = reference_rank(streams, config, 0, rank=0, world_size=1)
        assert full, name
        assert plan["n_batches"] == len(full), name
        for world in WORLD_SIZES:
            for rank in range(world):
                served = served_schedule(client, plan["id"], page_size=5 if world == 1 else 1000,
                                 rank=rank, world_size=world)
                expected = reference_rank(streams, config, 0, rank=rank, world_size=world)
                assert served == expected, f"{name}: rank {rank} of {world}"
        if config.strategy == "shuffled":
            for rank in range(3):
                served = served_schedule(client, plan["id"], page_size=1000, epoch=1, rank=rank,
                                 world_size=3)
                expected = reference_rank(streams, config, 1, rank=rank, world_size=3)
                assert served == expected, f"{name}: epoch 1, rank {rank} of 3"
            # Another epoch cuts and orders differently (the reference agrees above).
            assert _comparable(reference_rank(streams, config, 1, rank=0, world_size=1)) != \
                _comparable(full), name

        report = client.get(f"/v1/plans/{plan['id']}/report")
        assert report.status_code == 200
        _check_totals(report.json(), full, streams)
        _check_report(client, plan["id"], streams, config)

    assert {0, 1, 2, T - 1, T, T + 1, B * T - 1, B * T, B * T + 1, 2 * B * T} <= seen_lengths
