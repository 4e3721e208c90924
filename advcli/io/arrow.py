"""Arrow list columns as flat arrays plus offsets, and back; the Arrow types advcli reads.

A list column is a flat child array and ``offsets`` (row ``i`` is
``values[offsets[i]:offsets[i + 1]]``), the layout the numerical core works on. These helpers
take a column apart without copying its values and build one from numpy.
:func:`readable_schema` decides, for every input read as Arrow, which types advcli reads as
they are, which it converts without loss, and which it refuses.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

from advcli.errors import DataError
from advcli.lazy_imports import np, pa, pl


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


def cast_by_name(array: pa.Array, to: pa.DataType) -> pa.Array:
    """``array`` cast to ``to``, a struct's fields matched by name at any depth (pyarrow before
    17 casts structs only field for field in order, and framework files order a chat
    message's keys as each file first met them; a field ``array`` lacks is null)."""
    if array.type == to:
        return array
    if pa.types.is_struct(to) and pa.types.is_struct(array.type):
        given = dict(zip((f.name for f in array.type), array.flatten(), strict=True))
        children = [
            cast_by_name(given[f.name], f.type) if f.name in given
            else pa.nulls(len(array), f.type)
            for f in to
        ]  # fmt: skip
        return pa.StructArray.from_arrays(children, fields=list(to), mask=array.is_null())
    if (pa.types.is_list(to) or pa.types.is_large_list(to)) and is_list(array.type):
        offsets = array.offsets.to_numpy()
        start, end = int(offsets[0]), int(offsets[-1])
        values = cast_by_name(array.values.slice(start, end - start), to.value_type)
        large = pa.types.is_large_list(to)
        rebased = pa.array(offsets - start, pa.int64() if large else pa.int32())
        kind = pa.LargeListArray if large else pa.ListArray
        return kind.from_arrays(rebased, values, mask=array.is_null())
    return array.cast(to)


def cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` column by column, structs matched by name
    (:func:`cast_by_name`)."""
    columns = [
        pa.chunked_array(
            [cast_by_name(chunk, f.type) for chunk in table.column(f.name).chunks], f.type
        )
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


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


def is_type(kind: str, t: pa.DataType) -> bool:
    """``pa.types.is_<kind>(t)``; False where this pyarrow has no such type (views: >= 16)."""
    test: Callable[[pa.DataType], bool] = getattr(pa.types, f"is_{kind}", lambda _: False)
    return bool(test(t))


# Types advcli (pyarrow and polars both) holds as they are.
_PLAIN = (
    "null", "boolean", "integer", "floating", "decimal32", "decimal64", "decimal128", "string",
    "large_string", "binary", "large_binary", "fixed_size_binary", "date", "time", "timestamp",
    "duration",
)  # fmt: skip
MAX_DECIMAL_DIGITS = 38  # polars' decimals: 128 bits


class _Unreadable(Exception):
    """A type advcli cannot hold (``args[0]``: the innermost one)."""


def readable_type(t: pa.DataType) -> pa.DataType:
    """``t`` as advcli reads it: itself, or a type that holds the same values and that polars
    (which writes every output) holds too. Views become lists and strings with offsets, an
    extension type its storage, a dictionary its values, a decimal256 of at most 38 digits a
    decimal128, a timestamp in a time zone polars does not know UTC. Raises
    :class:`_Unreadable` for the rest (intervals, unions, run-end encoded arrays, wider
    decimals), innermost type first."""
    if isinstance(t, pa.BaseExtensionType):
        return readable_type(t.storage_type)
    if pa.types.is_dictionary(t) and not pa.types.is_nested(t.value_type):
        return readable_type(t.value_type)  # (pyarrow casts no nested dictionary to its values)
    if pa.types.is_decimal256(t) and t.precision <= MAX_DECIMAL_DIGITS:
        return pa.decimal128(t.precision, t.scale)
    if is_type("string_view", t):
        return pa.large_string()
    if is_type("binary_view", t):
        return pa.large_binary()
    # A view becomes a list with offsets of the other width: pyarrow 26's cast to the same
    # width reuses the view's offsets, one short (an invalid array)
    if pa.types.is_list(t) or is_type("large_list_view", t):
        return pa.list_(_readable_field(t.value_field))
    if pa.types.is_large_list(t) or is_type("list_view", t):
        return pa.large_list(_readable_field(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_readable_field(t.value_field), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([_readable_field(field) for field in t])
    if pa.types.is_map(t):
        key, item = _readable_field(t.key_field), _readable_field(t.item_field)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pa.types.is_timestamp(t) and t.tz is not None and not _polars_knows_zone(t.tz):
        return pa.timestamp(t.unit, "UTC")  # the same instants: Arrow keeps them in UTC
    if any(is_type(kind, t) for kind in _PLAIN):
        return t
    raise _Unreadable(t)


@functools.cache
def _polars_knows_zone(tz: str) -> bool:
    """Whether polars reads the time zone ``tz`` (an IANA name or a whole-hour offset; not
    ``+05:30``). Asked of polars, imported only for a log with a zoned timestamp."""
    try:
        pl.from_arrow(pa.table({"t": pa.nulls(1, pa.timestamp("us", tz))}))  # (0 rows: a panic)
    except pl.exceptions.PolarsError:
        return False
    return True


def _readable_field(field: pa.Field) -> pa.Field:
    return field.with_type(readable_type(field.type))


def readable_schema(schema: pa.Schema, shown: str) -> pa.Schema:
    """``schema`` (of the input ``shown``) with every column's type as advcli reads it
    (:func:`readable_type`); a column of a type it cannot read is an error naming it."""
    fields = []
    for field in schema:
        try:
            fields.append(_readable_field(field))
        except _Unreadable as exc:
            inner = "" if exc.args[0] == field.type else f" (its {exc.args[0]})"
            msg = (
                f"{shown}: column '{field.name}' has type {field.type}, which advcli cannot "
                f"read{inner}. Hint: write the log without that column, or with it cast to "
                "another type (a string, or a decimal of at most 38 digits)"
            )
            raise DataError(msg) from None
    return pa.schema(fields, metadata=schema.metadata)


def readable_table(table: pa.Table, shown: str) -> pa.Table:
    """``table`` (the input ``shown``) in the types advcli reads (:func:`readable_schema`)."""
    schema = readable_schema(table.schema, shown)
    return table if schema.equals(table.schema) else table.cast(schema)
