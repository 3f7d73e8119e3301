"""Arrow arrays to numpy and back without pandas: every conversion equal to pyarrow's own
(the reference), and a catalog, a Flight server and the SDK in a fresh process that
register, plan and stream without ever importing pandas."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from windpipe.services.arrow_values import from_numpy, string_array, to_numpy
from windpipe.services.synth import write_synthetic_dataset

ROOT = Path(__file__).resolve().parents[2]

_NUMBERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(),
            pa.uint64(), pa.float16(), pa.float32(), pa.float64()]


def _same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)  # NaN equals NaN here


@pytest.mark.parametrize("kind", _NUMBERS, ids=str)
def test_numbers_read_as_pyarrow_reads_them_sliced_or_not(kind: pa.DataType) -> None:
    values = np.arange(0 if pa.types.is_unsigned_integer(kind) else -5, 45)
    array = pa.array(values.astype(kind.to_pandas_dtype()))
    assert array.type == kind
    for part in (array, array.slice(7), array.slice(3, 11), array.slice(50)):
        _same(to_numpy(part), part.to_numpy(zero_copy_only=False))
    chunked = pa.chunked_array([array.slice(0, 9), array.slice(9)])
    _same(to_numpy(chunked), chunked.to_numpy())


def test_numbers_without_nulls_are_views_of_the_arrow_buffer() -> None:
    array = pa.array(np.arange(10, dtype=np.float32)).slice(2)
    out = to_numpy(array)
    assert out.ctypes.data == array.buffers()[1].address + 2 * 4
    assert not out.flags.writeable


@pytest.mark.parametrize("offset", [0, 1, 5, 8, 13])
def test_booleans_and_nulls_read_as_pyarrow_reads_them(offset: int) -> None:
    rng = np.random.default_rng(offset)
    flags = pa.array(rng.random(40) < 0.5).slice(offset)
    _same(to_numpy(flags), flags.to_numpy(zero_copy_only=False))
    floats = pa.array([None if v < 0.3 else v for v in rng.random(40).tolist()],
                      type=pa.float64()).slice(offset)
    assert floats.null_count
    _same(to_numpy(floats), floats.to_numpy(zero_copy_only=False))
    ints = pa.array([None if v % 3 == 0 else v for v in range(40)], type=pa.int32()).slice(offset)
    expected = ints.fill_null(-1).to_numpy()
    _same(to_numpy(ints, null=-1), expected)
    with pytest.raises(TypeError, match="nulls"):
        to_numpy(ints)


def test_what_has_no_numpy_form_here_is_refused() -> None:
    with pytest.raises(TypeError, match="string"):
        to_numpy(pa.array(["a"]))
    with pytest.raises(TypeError, match="nulls"):
        to_numpy(pa.array([True, None]))
    _same(to_numpy(pa.array([], type=pa.int64())), np.zeros(0, dtype=np.int64))
    _same(to_numpy(pa.chunked_array([], type=pa.float32())), np.zeros(0, dtype=np.float32))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint16", "float32", "float64", "bool",
                                   ">i8"])
def test_from_numpy_makes_what_pa_array_makes(dtype: str) -> None:
    values = (np.arange(23) % 7).astype(dtype)
    for part in (values, values[3:], values[::2]):
        got = from_numpy(part)
        expected = pa.array(part.astype(part.dtype.newbyteorder("=")))  # pyarrow: native only
        assert got.equals(expected)
        assert got.type == expected.type


def test_from_numpy_refuses_other_shapes_and_kinds() -> None:
    with pytest.raises(ValueError, match="1-D"):
        from_numpy(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="numpy"):
        from_numpy(np.array(["a"]))


def test_string_array_makes_what_pa_array_makes() -> None:
    for values in ([], [""], ["a", "", "ünï", '{"k": [1, 2]}'], [str(i) * i for i in range(50)]):
        got = string_array(values)
        assert got.equals(pa.array(values, type=pa.string()))


_PROCESS = """
    import json, sys, urllib.request
    from pathlib import Path
    from windpipe.catalog.api.server import start_catalog_server
    from windpipe.catalog.flight_adapters import DatabaseBackend
    from windpipe.flight_server.runner import start_flight_server
    from windpipe.sdk import Catalog, LoaderConfig, ValidationConfig, WindowConfig
    from windpipe.sdk._arrays import AlignedMemory, array_batches
    from windpipe.services.settings import Settings

    base, data = Path(sys.argv[1]), Path(sys.argv[2])
    settings = Settings(data_dir=base / "state", port=0, flight_port=0, log_level="WARNING",
                        tier_bytes=64 << 20, tier_dir=base / "tier", allowed_roots=(str(data),))
    flight = start_flight_server(settings, backend=DatabaseBackend.from_settings(settings))
    catalog = start_catalog_server(
        settings.model_copy(update={"flight_locations": (flight.location,)}), port=0)
    out = {"pages": []}
    with Catalog(catalog.url) as cat:
        split = cat.register("arrow", root=data.as_uri(), manifest="manifest.parquet",
                             progress=False).split(ValidationConfig.sample(fraction=0.2, seed=1))
        out["stats"] = sorted({e.column for e in split.stats(side="train").stats})
        for strategy in ("shuffled", "block_shuffled"):
            plan = split.plan(LoaderConfig(
                default_window=WindowConfig(batch_size=4, seq_len=32), strategy=strategy,
                seed=2, shuffle_block_bytes=1 << 20 if strategy == "block_shuffled" else None,
                inputs={"cycling": ("current_a", "temperature_c")},
                targets={"cycling": ("voltage_v",)}))
            out[strategy] = {"batches": plan.n_batches}
            for transport in ("flight", "local"):
                source = plan._source(epoch=0, progress=False, transport=transport)
                arrays = list(array_batches(source.records(
                    epoch=0, rank=0, world_size=1, start_batch=0, memory=AlignedMemory())))
                out[strategy][f"numpy {transport}"] = [
                    len(arrays), float(sum(a.inputs.sum() for a in arrays)),
                    arrays[-1].state.segments[0].path]
                torch_batches = list(plan.batches(1, transport=transport, progress=False))
                out[strategy][f"torch {transport}"] = [
                    len(torch_batches), torch_batches[0].state.segments[0].path]
        for page in ("/ui", f"/ui/splits/{split.id}", f"/ui/plans/{plan.id}"):
            with urllib.request.urlopen(catalog.url + page, timeout=60) as answer:
                out["pages"].append(answer.status)
    catalog.stop(grace_s=5.0)
    flight.stop(grace_s=5.0)
    out["pandas"] = sorted(m for m in sys.modules if m.split(".")[0] == "pandas")
    print(json.dumps(out))
"""


def test_a_server_and_its_readers_register_plan_and_stream_without_importing_pandas(
        tmp_path: Path) -> None:
    # pyarrow's own conversions import pandas (~46 MiB, ~0.3 s) in a process that needs none:
    # a catalog and a Flight server in one process (as `windpipe serve`) and the SDK beside
    data = write_synthetic_dataset(tmp_path / "data", cells=2, cycles=2, rows_per_cycle=400,
                                   seed=3)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PROCESS), str(tmp_path), str(data.path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "voltage_v" in out["stats"]
    for strategy in ("shuffled", "block_shuffled"):
        got = out[strategy]
        assert got["numpy flight"][0] == got["numpy local"][0] == got["batches"] > 0
        assert got["numpy flight"][1:] == got["numpy local"][1:]  # the same batches both ways
        assert got["torch flight"][0] == got["torch local"][0] > 0
        assert got["numpy flight"][2].startswith("segments/")  # the provenance decoded
    assert out["pages"] == [200, 200, 200]
    assert out["pandas"] == []
