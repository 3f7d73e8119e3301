"""Stable hashing and the error vocabulary."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import numpy as np

from windpipe.services.contract.errors import (
    ERROR_TABLE,
    ErrorType,
    NotFound,
    error_from_envelope,
    retired_error,
)
from windpipe.services.contract.identity import (
    canonical_json,
    hash64,
    hash64_each,
    manifest_row_id,
    unit_interval,
)


def test_manifest_row_id_is_stable_across_processes_and_types():
    here = manifest_row_id("s1", "A", 3, "cycling")
    code = ("from windpipe.services.contract.identity import manifest_row_id as m; "
            "print(m('s1', 'A', 3, 'cycling'))")
    there = int(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert here == there
    assert 0 <= here < 2**63
    assert manifest_row_id("s1", "A", 3.0, "cycling") == here  # type: ignore[arg-type]
    assert manifest_row_id("s1", "A", 4, "cycling") != here


def test_canonical_json_and_unit_interval():
    assert canonical_json({"b": 1, "a": [2.0, "x"]}) == b'{"a":[2,"x"],"b":1}'
    u = unit_interval(69, ["s1", "A", 3])
    assert 0.0 <= u < 1.0
    assert hash64(1, 2) != hash64(2, 1)


def test_hash64_each_is_hash64_of_each_key_between_head_and_tail():
    keys = [["set_00", f"cell_{i:03d}", i] for i in range(300)] + [["é", None, 1.5], []]
    encoded = [canonical_json(k) for k in keys]
    got = hash64_each((canonical_json("phase"), canonical_json(7)), encoded,
                      (canonical_json(3),))
    assert got.dtype == np.uint64
    assert [int(h) for h in got] == [hash64("phase", 7, k, 3) for k in keys]
    assert [int(h) for h in hash64_each((), encoded[:3], ())] == [hash64(k) for k in keys[:3]]
    assert hash64_each((b'"x"',), [], ()).shape == (0,)


def test_every_error_type_has_a_status_and_flight_error():
    assert set(ERROR_TABLE) == set(ErrorType)
    err = NotFound("no version v-1", details={"id": "v-1"})
    assert err.http_status == 404
    env = err.envelope()
    assert env == {"error": {"type": "not_found", "message": "no version v-1",
                             "details": {"id": "v-1"}}}
    back = error_from_envelope(env)
    assert (back.type, back.message, back.details) == (err.type, err.message, err.details)
    assert error_from_envelope({"error": {"type": "??"}}).type is ErrorType.INTERNAL


def test_the_retired_conflict_has_one_wording():
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    err = retired_error("plan", "p-1", when)
    assert (err.type, err.http_status) == (ErrorType.CONFLICT, 409)
    assert err.message == f"plan 'p-1' is retired (since {when.isoformat()})"
    assert err.details == {"plan": "p-1", "retired_at": when.isoformat()}
    assert retired_error("plan", "p-1", when.isoformat()).envelope() == err.envelope()
