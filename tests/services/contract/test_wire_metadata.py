"""``app_metadata`` of aligned parts (docs/wire.md 4a): it round-trips, plain batches carry
no ``aligned`` key, and malformed part metadata is a typed error."""

from __future__ import annotations

import json

import pytest

from windpipe.services.contract.errors import ErrorType, WindpipeError
from windpipe.services.contract.wire import AlignedPart, BatchMetadata

META = {"batch_idx": 3, "global_batch": 9, "split": "train", "seq_len": 8, "c_in": 2,
        "c_out": 1, "input_columns": ("a", "b"), "target_columns": ("c",)}


def test_an_aligned_part_round_trips_through_app_metadata() -> None:
    part = AlignedPart(protocol="hppc", part=1, parts=3, has_data=(1, 0, 1))
    meta = BatchMetadata(**META, aligned=part)  # type: ignore[arg-type]
    raw = meta.encode()
    assert json.loads(raw)["aligned"] == {"protocol": "hppc", "part": 1, "parts": 3,
                                          "has_data": [1, 0, 1]}
    assert BatchMetadata.decode(raw) == meta


def test_a_plain_batch_has_no_aligned_key() -> None:
    raw = BatchMetadata(**META).encode()  # type: ignore[arg-type]
    assert "aligned" not in json.loads(raw)
    assert BatchMetadata.decode(raw).aligned is None


@pytest.mark.parametrize("aligned", [
    {"protocol": "hppc", "part": 3, "parts": 3, "has_data": [1]},
    {"protocol": "hppc", "part": 0, "parts": 2},
    {"protocol": "hppc", "part": "x", "parts": 2, "has_data": []},
])
def test_malformed_part_metadata_is_an_invalid_request(aligned: dict[str, object]) -> None:
    body = json.loads(BatchMetadata(**META).encode())  # type: ignore[arg-type]
    body["aligned"] = aligned
    with pytest.raises(WindpipeError) as err:
        BatchMetadata.decode(json.dumps(body).encode())
    assert err.value.type == ErrorType.INVALID_REQUEST
    assert "aligned" in err.value.message


@pytest.mark.parametrize("fields", [
    {},
    {"stateful_group_idx": 4, "stateful_step_idx": 0, "stateful_steps": 3},
    {"split": 'va"l\\ü', "input_columns": ("ä", "b\n"), "target_columns": ("€",)},
    {"batch_idx": 0, "global_batch": 2**40, "seq_len": 1, "c_in": 0, "channels": ("c",)},
])
def test_the_fast_encoding_is_the_objects_json_byte_for_byte(fields: dict[str, object]) -> None:
    """``encode`` formats a batch's integers around the shared fields' JSON, made once: the
    same bytes as encoding the whole object (what ``decode`` and other readers parse)."""
    meta = BatchMetadata(**{**META, **fields})  # type: ignore[arg-type]
    for _ in range(2):  # made, then taken from the cache of shared fields
        raw = meta.encode()
        assert raw == meta._encode_object()
        assert BatchMetadata.decode(raw) == meta
    skipped = BatchMetadata(**{**META, **fields},  # type: ignore[arg-type]
                            skipped_lanes=({"lane": 1, "path": "p", "error": "e"},))
    assert json.loads(skipped.encode())["skipped_lanes"] == [{"lane": 1, "path": "p",
                                                              "error": "e"}]
