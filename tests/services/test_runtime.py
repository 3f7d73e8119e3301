"""Arrow's allocator options set before pyarrow loads, and the imports a server warms.

Each check runs a fresh interpreter: what they test happens once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from services.runtime import ALLOCATOR_DEFAULTS, prefer_small_pages

_MIMALLOC = pa.default_memory_pool().backend_name == "mimalloc"


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**base, **env},
                          capture_output=True, text=True, timeout=120, check=True)


def test_the_defaults_are_set_only_where_the_environment_is_silent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALLOCATOR_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MIMALLOC_ALLOW_THP", "1")
    prefer_small_pages()
    assert os.environ["MIMALLOC_ALLOW_THP"] == "1"
    monkeypatch.delenv("MIMALLOC_ALLOW_THP")
    prefer_small_pages()
    assert os.environ["MIMALLOC_ALLOW_THP"] == "0"


def _allow_thp(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "option 'allow_thp'" in line]
    if not lines:
        pytest.skip("this pyarrow's mimalloc has no allow_thp option to report")
    return lines[-1].split(":")[-1].strip()


@pytest.mark.skipif(not _MIMALLOC, reason="pyarrow's default pool is not mimalloc here")
@pytest.mark.parametrize("package", ["sdk", "catalog", "flight_server", "windpipe"])
def test_each_package_turns_huge_pages_off_before_arrow_allocates(package: str) -> None:
    code = f"""
        import {package}
        import pyarrow as pa
        pa.allocate_buffer(1 << 20)
    """
    assert _allow_thp(_run(code, MIMALLOC_VERBOSE="1").stderr) == "0"


@pytest.mark.skipif(not _MIMALLOC, reason="pyarrow's default pool is not mimalloc here")
def test_an_operator_choice_in_the_environment_is_kept() -> None:
    code = """
        import sdk
        import pyarrow as pa
        pa.allocate_buffer(1 << 20)
    """
    assert _allow_thp(_run(code, MIMALLOC_VERBOSE="1", MIMALLOC_ALLOW_THP="1").stderr) == "1"


def test_after_warming_a_conversion_imports_nothing_more() -> None:
    code = """
        import sys
        from services.runtime import warm_imports
        warm_imports()
        before = set(sys.modules)
        import numpy as np
        import pyarrow as pa
        pa.array(np.arange(3.0)).to_numpy()
        pa.array([1.0, 2.0])
        print(sorted(set(sys.modules) - before))
    """
    assert _run(code).stdout.strip() == "[]"
