"""The one exception tree: the same class wherever an error is raised or rebuilt."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pyarrow.flight as fl
import pytest

from windpipe.services.contract import errors
from windpipe.services.contract.configs import WindowConfig
from windpipe.services.contract.errors import (
    ErrorType,
    InvalidConfig,
    NotFound,
    ResourceExhausted,
    Transient,
    Unavailable,
    WindpipeError,
    error_class,
    error_from_envelope,
)
from windpipe.services.contract.wire import error_from_flight, to_flight_error


def test_every_error_type_has_exactly_one_class_and_back():
    for kind in ErrorType:
        cls = error_class(kind)
        assert issubclass(cls, WindpipeError)
        assert cls.error_type is kind
        assert cls(f"m {kind}").type is kind


def test_transient_is_the_retryable_branch_and_says_so_on_the_wire():
    assert issubclass(Unavailable, Transient)
    assert not issubclass(ResourceExhausted, Transient)
    assert not issubclass(NotFound, Transient)
    down = Unavailable("the database is unavailable", details={"who": "catalog"})
    assert down.envelope()["error"]["details"] == {"who": "catalog", "retryable": True}
    assert NotFound("x").envelope()["error"]["details"] == {}
    back = error_from_envelope(down.envelope(), status=503)
    assert type(back) is Unavailable
    assert back.details == {"who": "catalog"}
    assert back.status == 503


def test_a_flight_error_comes_back_as_the_class_it_left_as():
    for kind in ErrorType:
        sent = error_class(kind)(f"sent {kind}", details={"n": 1})
        got = error_from_flight(to_flight_error(sent))
        assert type(got) is type(sent)
        assert (got.message, got.details) == (sent.message, sent.details)
    assert type(error_from_flight(fl.FlightUnavailableError("down"))) is Unavailable


def test_errors_pickle_as_their_class():
    err = InvalidConfig("bad", details={"k": [1, 2]}, status=422)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InvalidConfig
    assert (back.message, back.details, back.status) == ("bad", {"k": [1, 2]}, 422)


def test_a_config_error_is_the_same_class_with_or_without_the_sdk_imported():
    code = (
        "import sys\n"
        "from windpipe.services.contract.configs import WindowConfig\n"
        "from windpipe.services.contract.errors import InvalidConfig\n"
        "assert 'windpipe.sdk' not in sys.modules\n"
        "try:\n"
        "    WindowConfig(batch_size=0, seq_len=8)\n"
        "except InvalidConfig as exc:\n"
        "    print(type(exc).__module__, type(exc).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["windpipe.services.contract.errors", "InvalidConfig"]
    import windpipe.sdk as sdk  # noqa: PLC0415 - after the fresh interpreter: the SDK names the same classes

    assert sdk.InvalidConfig is InvalidConfig
    assert sdk.WindpipeError is WindpipeError
    assert sdk.Transient is errors.Transient
    with pytest.raises(sdk.InvalidConfig):
        WindowConfig(batch_size=0, seq_len=8)
