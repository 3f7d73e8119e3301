"""``from windpipe import ...`` is the documented import: the SDK's names, lazily."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

import windpipe
import windpipe.sdk as sdk


def test_the_public_face_is_the_sdks_names() -> None:
    # and ``embedded``: the catalog in this process (the top layer, tests/windpipe/test_embedded.py)
    assert set(windpipe.__all__) - {"__version__", "embedded"} == set(sdk.__all__)
    for name in sdk.__all__:
        assert getattr(windpipe, name) is getattr(sdk, name), name
    assert windpipe.__version__ == metadata.version("windpipe")
    assert set(sdk.__all__) <= set(dir(windpipe))


def test_a_star_import_binds_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from windpipe import *", namespace)
    assert set(windpipe.__all__) <= set(namespace)
    assert namespace["Catalog"] is sdk.Catalog


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Katalog'"):
        _ = windpipe.Katalog  # type: ignore[attr-defined]


def test_importing_windpipe_alone_stays_cheap() -> None:
    code = ("import sys, windpipe; "
            "print(sorted(m for m in ('sdk', 'torch', 'polars', 'pyarrow', 'fastapi') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "[]"
