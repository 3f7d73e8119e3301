"""The exception tree: one class per ErrorType, from REST envelopes and Flight errors."""

from __future__ import annotations

import pickle

import pyarrow.flight as fl
import pytest

import windpipe.sdk as sdk
from windpipe.sdk._exceptions import error_from_envelope, error_from_flight
from windpipe.services.contract.errors import (
    ERROR_TABLE,
    ErrorType,
    WindpipeError,
    error_class,
    error_envelope,
)

EXPECTED = {
    ErrorType.INVALID_REQUEST: sdk.InvalidRequest,
    ErrorType.INVALID_CONFIG: sdk.InvalidConfig,
    ErrorType.INVALID_MANIFEST: sdk.InvalidManifest,
    ErrorType.NOT_FOUND: sdk.NotFound,
    ErrorType.CONFLICT: sdk.Conflict,
    ErrorType.UNAUTHENTICATED: sdk.Unauthenticated,
    ErrorType.FORBIDDEN: sdk.Forbidden,
    ErrorType.INVALID_TICKET: sdk.InvalidTicket,
    ErrorType.SEGMENT_ERROR: sdk.SegmentError,
    ErrorType.SEGMENT_CHANGED: sdk.SegmentChanged,
    ErrorType.RESOURCE_EXHAUSTED: sdk.ResourceExhausted,
    ErrorType.UNAVAILABLE: sdk.Unavailable,
    ErrorType.INTERNAL: sdk.InternalError,
}


def test_one_class_per_type():
    assert set(EXPECTED) == set(ErrorType)
    assert len(set(EXPECTED.values())) == len(ErrorType)
    for kind, cls in EXPECTED.items():
        assert error_class(kind) is cls
        assert issubclass(cls, sdk.WindpipeError)
        assert issubclass(cls, WindpipeError)
    assert error_class("something_new") is sdk.InternalError


@pytest.mark.parametrize("kind", list(ErrorType))
def test_from_rest_envelope(kind):
    env = error_envelope(kind, f"problem of kind {kind}", {"path": "x.parquet"})
    err = error_from_envelope(env, status=ERROR_TABLE[kind].http_status)
    assert type(err) is EXPECTED[kind]
    assert err.type == kind
    assert str(err) == f"problem of kind {kind}"
    assert err.details == {"path": "x.parquet"}
    assert err.status == ERROR_TABLE[kind].http_status
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err)
    assert copy.details == err.details


@pytest.mark.parametrize("kind", list(ErrorType))
def test_from_flight_extra_info(kind):
    original = error_class(kind)(f"flight says {kind}", details={"segment": "a/b.zarr"})
    flight_cls = getattr(fl, ERROR_TABLE[kind].flight_error)
    err = error_from_flight(flight_cls("wire text", extra_info=original.to_json()))
    assert type(err) is EXPECTED[kind]
    assert err.message == f"flight says {kind}"
    assert err.details == {"segment": "a/b.zarr"}


def test_flight_errors_without_envelope_map_by_class():
    assert type(error_from_flight(fl.FlightUnavailableError("down"))) is sdk.Unavailable
    assert type(error_from_flight(fl.FlightUnauthenticatedError("x"))) is sdk.Unauthenticated
    assert type(error_from_flight(fl.FlightUnauthorizedError("x"))) is sdk.InvalidTicket
    err = error_from_flight(fl.FlightInternalError("boom. Detail: grpc noise"), where="DoGet")
    assert type(err) is sdk.InternalError
    assert err.message == "DoGet: boom"


def test_non_envelope_answers():
    err = error_from_envelope(None, status=502, fallback="<html>bad gateway</html>")
    assert type(err) is sdk.Unavailable
    assert "HTTP 502" in err.message
    err = error_from_envelope({"detail": "x"}, status=500, fallback='{"detail": "x"}')
    assert type(err) is sdk.InternalError
    assert "x" in err.message
