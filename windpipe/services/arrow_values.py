"""Arrow arrays to and from numpy and Python strings without pyarrow's pandas bridge.

``pa.Array.to_numpy`` (and ``np.asarray`` on an Arrow array) runs pyarrow's pandas
conversion, and ``pa.array`` of Python or numpy values checks for pandas types first:
either imports pandas on its first call wherever pandas is installed, ~46 MiB of RSS
and ~0.3 s in every process that converts one array, a training process and each of
its loader workers included, though nothing there uses pandas. The readers of
batches, plans and decoded chunks and the builders of a batch's provenance convert
fixed-width numbers and booleans (:func:`to_numpy` from an array's buffers,
:func:`from_numpy` into one) and strings (:func:`string_array`, into buffers built
here).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

__all__ = ["from_numpy", "string_array", "to_numpy"]


_DTYPES: dict[int, np.dtype[np.generic]] = {  # by type id: hashing a DataType costs more
    kind.id: np.dtype(f"<{code}{kind.bit_width // 8}")
    for code, kinds in (("i", (pa.int8(), pa.int16(), pa.int32(), pa.int64())),
                        ("u", (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())),
                        ("f", (pa.float16(), pa.float32(), pa.float64())))
    for kind in kinds
}


def _dtype(kind: pa.DataType) -> np.dtype[np.generic]:
    """The numpy dtype of a fixed-width numeric Arrow type (TypeError for any other)."""
    dtype = _DTYPES.get(kind.id)
    if dtype is None:
        msg = f"an Arrow array of {kind} has no fixed-width numpy form here"
        raise TypeError(msg)
    return dtype


def _bits(buffer: pa.Buffer, offset: int, length: int) -> np.ndarray:
    """``length`` bits of an Arrow bitmap from bit ``offset`` on, as bool."""
    packed = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(packed, count=offset + length, bitorder="little")[offset:].view(np.bool_)


def to_numpy(array: pa.Array | pa.ChunkedArray, *, null: float | None = None) -> np.ndarray:
    """``array`` (numbers or booleans) as numpy, as ``array.to_numpy(zero_copy_only=False)``
    gives it, without importing pandas.

    Without nulls: numbers a read-only view of the Arrow buffer (no copy), booleans a new
    bool array (Arrow packs them in bits). With nulls: a new array holding ``null`` where
    null (default NaN for floats); integers or booleans with nulls and no ``null`` given,
    and other types: ``TypeError`` (pandas' form of those is a float or object array no
    caller here wants).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    length = len(array)
    dtype = _DTYPES.get(array.type.id)
    if dtype is not None and length and not array.null_count:  # a batch's columns: 1 us
        values = np.frombuffer(array.buffers()[1], dtype=dtype, count=length,
                               offset=array.offset * dtype.itemsize)
        values.flags.writeable = False  # Arrow's memory is immutable, as pyarrow's views say
        return values
    return _converted(array, null=null)


def _converted(array: pa.Array, *, null: float | None) -> np.ndarray:
    """:func:`to_numpy` of what is not a non-empty numeric array without nulls."""
    kind, length, offset = array.type, len(array), array.offset
    nulls = array.null_count
    floating = pa.types.is_floating(kind)
    if nulls and null is None and not floating:
        msg = f"an Arrow array of {kind} with {nulls} nulls and no value given for them"
        raise TypeError(msg)
    if pa.types.is_boolean(kind):
        values = (_bits(array.buffers()[1], offset, length) if length
                  else np.zeros(0, dtype=np.bool_))
    else:
        dtype = _dtype(kind)
        if length == 0:
            return np.zeros(0, dtype=dtype)
        values = np.frombuffer(array.buffers()[1], dtype=dtype, count=length,
                               offset=offset * dtype.itemsize)
    if not nulls:
        return values  # booleans: unpacked into memory of their own
    out = values.copy()
    out[~_bits(array.buffers()[0], offset, length)] = np.nan if null is None else null
    return out


def string_array(values: Iterable[str]) -> pa.Array:
    """``pa.array(list(values), type=pa.string())`` (no nulls) without importing pandas."""
    encoded = [v.encode() for v in values]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
    if ends.shape[0] and int(ends[-1]) > np.iinfo(np.int32).max:
        msg = f"{int(ends[-1])} bytes of strings do not fit one Arrow string array"
        raise ValueError(msg)
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    offsets[1:] = ends
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def from_numpy(values: np.ndarray) -> pa.Array:
    """``pa.array(values)`` of a 1-D numeric or bool numpy array (no nulls) without
    importing pandas: numbers share ``values``' memory when it is contiguous."""
    if values.ndim != 1:
        msg = f"an Arrow array is made of 1-D values, got shape {values.shape}"
        raise ValueError(msg)
    n = int(values.shape[0])
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])
    if values.dtype.kind not in "iuf":
        msg = f"an Arrow array of numpy {values.dtype} is not made here"
        raise TypeError(msg)
    data = np.ascontiguousarray(values)
    if not data.dtype.isnative:
        data = data.astype(data.dtype.newbyteorder("="))
    return pa.Array.from_buffers(pa.from_numpy_dtype(data.dtype), n,
                                 [None, pa.py_buffer(data)])
