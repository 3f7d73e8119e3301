"""A config mistake on the client side is an SDK exception naming the field."""

from __future__ import annotations

import pytest

import windpipe.sdk as sdk
from windpipe.services.contract.errors import ErrorType


def test_a_scaling_typo_is_invalid_config_with_a_suggestion():
    with pytest.raises(sdk.InvalidConfig) as info:
        sdk.ScalingSpec(colum="current_a", input_min=-10.0, input_max=10.0)  # type: ignore[call-arg]
    err = info.value
    assert isinstance(err, sdk.WindpipeError)
    assert err.type is ErrorType.INVALID_CONFIG
    assert "did you mean 'column'?" in err.message
    assert err.details["config"] == "ScalingSpec"
    fields = {p["field"] for p in err.details["problems"]}
    assert fields == {"colum", "column"}


def test_nested_config_mistakes_name_their_path():
    with pytest.raises(sdk.WindpipeError,
                       match=r"invalid LoaderConfig: default_window.batch_size"):
        sdk.LoaderConfig(inputs={"cycling": ("a",)}, targets={"cycling": ("v",)},
                         default_window={"batch_size": 0, "seq_len": 8})
    with pytest.raises(sdk.InvalidConfig, match="seq_len"):
        sdk.WindowConfig(batch_size=2, seq_len=-1)
    with pytest.raises(sdk.InvalidConfig, match="fraction"):
        sdk.ValidationConfig.sample(fraction=1.5)


def test_validation_of_stored_or_sent_configs_keeps_pydantic_errors():
    # the servers validate request bodies through model_validate and answer their own 4xx
    from pydantic import ValidationError  # noqa: PLC0415

    with pytest.raises(ValidationError):
        sdk.WindowConfig.model_validate({"batch_size": 0, "seq_len": 8})
