"""Arrow's allocator options, set by the entry points before pyarrow loads (importing a
package sets nothing), the imports a server warms and the heap it freezes once started.

Each check runs a fresh interpreter: what they test happens once per process.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from windpipe.services.runtime import ALLOCATOR_DEFAULTS, prefer_small_pages

_MIMALLOC = pa.default_memory_pool().backend_name == "mimalloc"


def _run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          env={**base, **env}, capture_output=True, text=True, timeout=120,
                          check=True)


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


@pytest.mark.parametrize("package", ["windpipe.services", "windpipe.sdk", "windpipe.catalog",
                                     "windpipe.flight_server", "windpipe"])
def test_importing_a_package_leaves_the_environment_alone(package: str) -> None:
    code = f"""
        import os
        import {package}
        print(sorted(name for name in os.environ if name.startswith("MIMALLOC_")))
    """
    assert _run(code).stdout.strip() == "[]"


_SYNTH = """
    import sys
    from windpipe.cli import main
    sys.exit(main(["synth", sys.argv[1], "--cells", "1", "--cycles", "1",
                   "--rows-per-cycle", "40"]))
"""


@pytest.mark.skipif(not _MIMALLOC, reason="pyarrow's default pool is not mimalloc here")
@pytest.mark.parametrize(("given", "expected"), [({}, "0"), ({"MIMALLOC_ALLOW_THP": "1"}, "1")])
def test_the_cli_turns_huge_pages_off_unless_the_environment_chose(
        tmp_path: Path, given: dict[str, str], expected: str) -> None:
    # every server starts as ``windpipe serve``: the command's main runs before pyarrow loads
    result = _run(_SYNTH, str(tmp_path / "data"), MIMALLOC_VERBOSE="1", **given)
    assert _allow_thp(result.stderr) == expected


@pytest.mark.skipif(not _MIMALLOC, reason="pyarrow's default pool is not mimalloc here")
def test_a_benchmark_script_turns_huge_pages_off_before_arrow_allocates() -> None:
    code = """
        import bench
        import pyarrow as pa
        pa.allocate_buffer(1 << 20)
    """
    assert _allow_thp(_run(code, MIMALLOC_VERBOSE="1").stderr) == "0"


def test_warming_loads_no_pandas_and_windpipes_conversions_import_nothing_more() -> None:
    code = """
        import sys
        import numpy as np
        import pyarrow as pa
        from windpipe.services.arrow_values import from_numpy, string_array, to_numpy
        from windpipe.services.runtime import warm_imports
        warm_imports()
        before = set(sys.modules)
        to_numpy(from_numpy(np.arange(3.0)))
        to_numpy(pa.chunked_array([from_numpy(np.array([True, False]))]))
        string_array(["a", "b"])
        print(sorted(set(sys.modules) - before), "pandas" in sys.modules)
    """
    assert _run(code).stdout.strip() == "[] False"
    if importlib.util.find_spec("pandas") is None:
        return
    # the reason: where pandas is installed, pyarrow's own conversion imports it
    code = """
        import sys
        import numpy as np
        import pyarrow as pa
        pa.array(np.arange(3.0))
        print("pandas" in sys.modules)
    """
    assert _run(code).stdout.strip() == "True"


_SERVE = """
    import gc
    import sys
    import windpipe.commands.serve as serve
    from windpipe.cli import main
    serve._wait_for_stop = lambda: print(  # serving: what the collector still walks
        "heap", gc.get_freeze_count(), len(gc.get_objects()), flush=True)
    sys.exit(main(["serve", "catalog", "--port", "0", "--data-dir", sys.argv[1]]))
"""


def test_a_started_server_leaves_its_startup_heap_out_of_full_collections(
        tmp_path: Path) -> None:
    # a full collection holds the GIL while it walks every object: the event loop waits
    result = _run(_SERVE, str(tmp_path / "state"))
    line = next(x for x in result.stdout.splitlines() if x.startswith("heap "))
    frozen, walked = map(int, line.split()[1:])
    assert frozen > 10 * walked
