"""Arrow list columns as flat arrays plus offsets, and back.

A list column is a flat child array and ``offsets`` (row ``i`` is
``values[offsets[i]:offsets[i + 1]]``), the layout the numerical core works on. These helpers
take a column apart without copying its values and build one from numpy.
"""

from __future__ import annotations

import struct

from advcli.lazy_imports import np, pa


def fast_ipc() -> pa.ipc.IpcWriteOptions:
    """Arrow IPC options for advcli's own scratch files: lz4, fast to write and read back."""
    return pa.ipc.IpcWriteOptions(compression="lz4")


def one_binary(data: bytes) -> pa.Array:
    """``data`` as a one-row large-binary array, without a copy (``pa.array([data])`` would
    make pyarrow import pandas, a quarter of a second, to ask whether the list is a Series)."""
    offsets = pa.py_buffer(struct.pack("<2q", 0, len(data)))
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])


def flat_list(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list column as (flat child values, int64 offsets from 0), handling sliced arrays."""
    arr = column
    if isinstance(column, pa.ChunkedArray):  # one chunk needs no copy
        arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64, copy=False)
    values = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
    return values, offsets - offsets[0]


def list_array(
    values: pa.Array | np.ndarray, offsets: np.ndarray, *, large: bool | None = None
) -> pa.Array:
    """A list array of ``values`` cut at ``offsets``: 32-bit offsets where they fit, else a large
    list. ``large`` decides instead (a shard uses one list type for all its row groups)."""
    if isinstance(values, np.ndarray):
        values = pa.array(values)
    if not (offsets[-1] >= 2**31 if large is None else large):
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), values)


def float_list(flat: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A list<float32> column from flat values and offsets (advantages, returns, values)."""
    return list_array(np.asarray(flat, dtype=np.float32), offsets)


def is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def narrow(t: pa.DataType) -> pa.DataType:
    """The type with 32-bit offsets (polars writes 64-bit ones), so that a log and its copy
    written by advcli read back alike."""
    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.list_(narrow(t.value_type))
    return t


def nul_name(fields: pa.Schema | list[pa.Field]) -> str | None:
    """A column or nested field name holding a NUL character, which Arrow's C interface (how
    polars and pyarrow exchange tables) cannot carry; None if there is none."""
    for field in fields:
        name: str = field.name
        if "\x00" in name:
            return name
        t = field.type
        while pa.types.is_list(t) or pa.types.is_large_list(t):
            t = t.value_type
        if pa.types.is_struct(t) and (inner := nul_name(list(t))) is not None:
            return inner
    return None


def repeated_name(fields: pa.Schema | list[pa.Field], prefix: str = "") -> str | None:
    """A column or nested struct field named twice among its siblings (``spans.kind``: Parquet
    can hold it, and readers disagree on which to keep), as a dotted path; None if none is."""
    names = [field.name for field in fields]
    if len(set(names)) < len(names):
        return prefix + next(n for i, n in enumerate(names) if n in names[:i])
    for field in fields:
        t = field.type
        while pa.types.is_list(t) or pa.types.is_large_list(t):
            t = t.value_type
        if pa.types.is_struct(t) and (inner := repeated_name(list(t), f"{prefix}{field.name}.")):
            return inner
    return None
