"""The batch-identity harness (bench/identity.py) on the current tree: it records every
plan shape over both transports, digests tell batches apart, and a changed batch is
reported as a difference."""

from __future__ import annotations

import json
from pathlib import Path

from bench.identity import compare, main, shapes


def test_record_and_compare(tmp_path: Path) -> None:
    out = tmp_path / "head.json"
    assert main(["record", str(out), "--rows-per-cycle", "200"]) == 0
    record = json.loads(out.read_text())
    assert {key.split("/")[0] for key in record} == set(shapes())
    assert all(record[key] for key in record if "/e0/r0of1" in key)  # every shape streams
    for key, digests in record.items():  # the same batches in process and over Flight,
        if "/flight/" in key:             # from blocks and from chunks
            assert digests == record[key.replace("/flight/", "/local/")], key
        if "/blocks/" in key:
            assert digests == record[key.replace("/blocks/", "/chunks/")], key
    every = [d for digests in record.values() for d in digests]
    one_path = [d for k, digests in record.items() if "/blocks/flight/" in k for d in digests]
    assert len(set(one_path)) > len(one_path) // 5  # digests see the batches, not a constant
    key = "shuffled/chunks/flight/e0/r0of1"
    changed = {**record, key: list(reversed(record[key]))}
    runs, batches, differ = compare(record, changed)
    assert (runs, batches) == (len(record), len(every))
    assert differ == [key]
    assert main(["compare", str(out), str(out)]) == 0
