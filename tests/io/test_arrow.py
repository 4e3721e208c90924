"""The Arrow types advcli reads (advcli.io.arrow.readable_schema): a column of any type a
Parquet log can hold is read as it is, converted without loss, or refused in one line; and
what the JSONL writer cannot write is refused before it writes."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli.errors import DataError
from advcli.io.arrow import cast_by_name, readable_schema
from tests.conftest import one_line, run

N = 4  # rows of the log


def _log(extra: pa.Array | None = None, **roles: pa.Array) -> pa.Table:
    """A valid log of two groups of two, with ``extra`` passed through and ``roles`` columns
    in place of the plain ones."""
    columns = {
        "prompt_id": pa.array([0, 0, 1, 1]),
        "rollout_id": pa.array([0, 1, 2, 3]),
        "input_ids": pa.array([[1, 2, 3]] * N),
        "action_mask": pa.array([[0, 1, 1]] * N),
        "reward": pa.array([0.0, 1.0, 0.0, 1.0]),
        **roles,
    }
    if extra is not None:
        columns["extra"] = extra
    return pa.table(columns)


def _uuids() -> pa.Array:
    storage = pa.array([uuid.UUID(int=i).bytes for i in range(N)], pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _decimals(precision: int) -> pa.Array:
    return pa.array([decimal.Decimal("1.5")] * N, pa.decimal256(precision, 1))


def _struct(**fields: pa.Array) -> pa.Array:
    return pa.StructArray.from_arrays(list(fields.values()), list(fields))


# id: (the pass-through column, its JSON value on row 0, or what refuses it: (exit code, text)).
# Bytes cannot go to JSON lines (exit 2); a type advcli cannot read is refused for both (1).
CASES: dict[str, tuple[Callable[[], pa.Array], object]] = {
    "uuid": (_uuids, (2, "holds bytes")),
    "decimal256(20)": (lambda: _decimals(20), "1.5"),
    "decimal256(40)": (lambda: _decimals(40), (1, "type decimal256(40, 1), which advcli cannot")),
    "list_view": (lambda: pa.array([[1, 2]] * N, pa.list_view(pa.int64())), [1, 2]),
    "large_list_view": (lambda: pa.array([[1]] * N, pa.large_list_view(pa.int8())), [1]),
    "binary_view": (lambda: pa.array([b"\xff"] * N, pa.binary_view()), (2, "holds bytes")),
    "string_view": (lambda: pa.array(["é"] * N, pa.string_view()), "é"),
    "dictionary": (lambda: pa.array(["a", "b", "a", "c"]).dictionary_encode(), "a"),
    "fixed_size_binary": (lambda: pa.array([b"ab"] * N, pa.binary(2)), (2, "holds bytes")),
    "map": (lambda: pa.array([[("k", 1)]] * N, pa.map_(pa.string(), pa.int64())), {"k": 1}),
    "map_int_keys": (
        lambda: pa.array([[(1, 2)]] * N, pa.map_(pa.int64(), pa.int64())),
        (2, "holds map<int64, int64"),
    ),
    "float16": (lambda: pa.array(np.full(N, 1.5, np.float16)), 1.5),
    "timestamp_tz": (
        lambda: pa.array([3600 * 10**6] * N, pa.timestamp("us", tz="Asia/Kolkata")),
        "1970-01-01T06:30:00+05:30",
    ),
    "timestamp_offset": (  # a zone polars does not know: the same instants, in UTC
        lambda: pa.array([3600 * 10**6] * N, pa.timestamp("us", tz="+05:30")),
        "1970-01-01T01:00:00+00:00",
    ),
    "duration": (lambda: pa.array([90] * N, pa.duration("s")), "PT90S"),
    "date": (lambda: pa.array([datetime.date(2020, 1, 2)] * N), "2020-01-02"),
    "time": (lambda: pa.array([datetime.time(1, 2, 3)] * N, pa.time32("s")), "01:02:03"),
    "null": (lambda: pa.nulls(N), None),
    "uint64": (lambda: pa.array([2**64 - 1] * N, pa.uint64()), 2**64 - 1),
    "fixed_size_list": (lambda: pa.array([[1.0, 2.0]] * N, pa.list_(pa.float32(), 2)), [1, 2]),
    "json_extension": (
        lambda: pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"a": 1}'] * N)),
        '{"a": 1}',
    ),
    "struct_of_views": (
        lambda: _struct(
            ids=pa.array([[7]] * N, pa.list_view(pa.int32())),
            text=pa.array(["x"] * N, pa.string_view()),
            price=_decimals(20),
            tags=pa.array(["t"] * N).dictionary_encode(),
        ),
        {"ids": [7], "text": "x", "price": "1.5", "tags": "t"},
    ),
    "struct_of_uuid": (lambda: _struct(id=_uuids()), (2, "holds bytes")),
    "list_of_decimal256(40)": (
        lambda: pa.array([[decimal.Decimal("1")]] * N, pa.list_(pa.decimal256(40, 0))),
        (1, "(its decimal256(40, 0))"),
    ),
}


def _case(name: str) -> tuple[pa.Array, object]:
    make, expected = CASES[name]
    try:
        return make(), expected
    except AttributeError as exc:  # a type this pyarrow does not have yet
        pytest.skip(f"pyarrow {pa.__version__}: {exc}")


def _stored(value: object) -> object:
    """``value`` (from ``to_pylist``) with each UUID as the 16 bytes that store it."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, list):
        return [_stored(v) for v in value]
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_pass_through_column_of_any_type_is_written_back_or_refused_in_one_line(
    tmp_path: Path, name: str, fmt: str
):
    extra, expected = _case(name)
    log, out = tmp_path / "log.parquet", tmp_path / f"out.{fmt}"
    pq.write_table(_log(extra), log)
    proc = run("annotate", log, "--method", "grpo", "--out", out, "-q")
    refusal = expected if isinstance(expected, tuple) else None
    if refusal is not None and (refusal[0] == 1 or fmt == "jsonl"):
        assert proc.returncode == refusal[0]
        assert refusal[1] in one_line(proc)
        assert "'extra'" in one_line(proc)
        assert not out.exists()
        return
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    if fmt == "parquet":  # the same values (an extension type's as its storage's)
        assert pq.read_table(out)["extra"].to_pylist() == _stored(extra.to_pylist())
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == N
        assert rows[0]["extra"] == expected


# id: (a type pyarrow writes to no Parquet file, the type within it that is refused)
NOT_IN_PARQUET: dict[str, tuple[Callable[[], pa.DataType], str | None]] = {
    "interval": (pa.month_day_nano_interval, None),
    "struct_of_interval": (
        lambda: pa.struct([("when", pa.month_day_nano_interval())]),
        "month_day_nano_interval",
    ),
    "union": (lambda: pa.dense_union([pa.field("a", pa.int64())]), None),
    "run_end_encoded": (lambda: pa.run_end_encoded(pa.int32(), pa.int64()), None),
    "dictionary_of_struct": (lambda: pa.dictionary(pa.int8(), pa.struct([("x", pa.int8())])), None),
    "list_of_decimal256(76)": (lambda: pa.list_(pa.decimal256(76, 0)), "decimal256(76, 0)"),
}


@pytest.mark.parametrize("name", list(NOT_IN_PARQUET))
def test_a_type_that_no_parquet_writer_makes_is_refused_naming_column_and_type(name: str):
    make, inner = NOT_IN_PARQUET[name]
    schema = pa.schema([("reward", pa.float64()), ("extra", make())])
    with pytest.raises(DataError) as refused:
        readable_schema(schema, "log.parquet")
    message = str(refused.value)
    assert message.startswith(f"log.parquet: column 'extra' has type {schema.field('extra').type}")
    assert "which advcli cannot read" in message and "Hint: " in message
    assert (f"(its {inner})" in message) if inner else "(its" not in message
    assert "\n" not in message


def _views(lists: Callable[[pa.DataType], pa.DataType]) -> dict[str, pa.Array]:
    return {"input_ids": pa.array([[1, 2, 3]] * N, lists(pa.int64())),
            "action_mask": pa.array([[0, 1, 1]] * N, lists(pa.int8()))}  # fmt: skip


# id: the role columns, typed otherwise than a plain log's
ROLE_CASES: dict[str, Callable[[], dict[str, pa.Array]]] = {
    "list_view": lambda: _views(pa.list_view),
    "large_list_view": lambda: _views(pa.large_list_view),
    "large_list": lambda: _views(pa.large_list),
    "split_list_view": lambda: {
        "prompt_ids": pa.array([[1]] * N, pa.list_view(pa.int64())),
        "response_ids": pa.array([[2, 3]] * N, pa.list_view(pa.int32())),
        "response_mask": pa.array([[1, 1]] * N, pa.large_list_view(pa.int8())),
    },
    "string_view_key": lambda: {"prompt_id": pa.array(["a", "a", "b", "b"], pa.string_view())},
    "dictionary_key": lambda: {"prompt_id": pa.array(["a", "a", "b", "b"]).dictionary_encode()},
}


@pytest.mark.parametrize("name", list(ROLE_CASES))
def test_role_columns_are_read_as_the_plain_types_they_convert_to(tmp_path: Path, name: str):
    try:
        typed = ROLE_CASES[name]()
    except AttributeError as exc:
        pytest.skip(f"pyarrow {pa.__version__}: {exc}")
    base = _log()
    if "prompt_ids" in typed:  # the split layout
        base = base.drop_columns(["input_ids", "action_mask"])
    plain = {column: pa.array(array.to_pylist()) for column, array in typed.items()}
    advantages = []
    for label, columns in (("typed", typed), ("plain", plain)):
        table = base.drop_columns([c for c in columns if c in base.column_names])
        for column, array in columns.items():
            table = table.append_column(column, array)
        log, out = tmp_path / f"{label}.parquet", tmp_path / f"{label}.out.parquet"
        pq.write_table(table, log)
        proc = run("annotate", log, "--method", "grpo", "--out", out, "-q")
        assert proc.returncode == 0, proc.stderr.decode()
        advantages.append(pq.read_table(out)["advantages"].to_pylist())
    assert advantages[0] == advantages[1]
    assert advantages[0][1][-1] == pytest.approx(1.0, abs=1e-5)  # rewards 0 and 1: -1 and 1


def test_a_log_of_parquet_and_jsonl_reads_the_parquet_types_alike(tmp_path: Path):
    """Parquet and JSONL together are read into memory (advcli.io.file_sources.read_inputs)."""
    try:
        extra = pa.array([[1, 2]] * N, pa.list_view(pa.int64()))
    except AttributeError as exc:
        pytest.skip(f"pyarrow {pa.__version__}: {exc}")
    pq.write_table(_log(extra), tmp_path / "a.parquet")
    rows = [dict(r, prompt_id=r["prompt_id"] + 2, rollout_id=r["rollout_id"] + N)
            for r in _log(pa.array([[3]] * N)).to_pylist()]  # fmt: skip
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    proc = run("annotate", tmp_path / "a.parquet", tmp_path / "b.jsonl", "--method", "grpo",
               "--out", out, "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    written = [json.loads(line)["extra"] for line in out.read_text().splitlines()]
    assert written == [[1, 2]] * N + [[3]] * N
    pq.write_table(_log(_decimals(40)), tmp_path / "a.parquet")
    proc = run("annotate", tmp_path / "a.parquet", tmp_path / "b.jsonl", "--method", "grpo",
               "--out", tmp_path / "again.jsonl")  # fmt: skip
    assert proc.returncode == 1
    assert f"{tmp_path / 'a.parquet'}: column 'extra' has type decimal256(40, 1)" in one_line(proc)


@pytest.mark.parametrize(
    "extra",
    [
        lambda v: _struct(score=pa.array(v)),
        lambda v: pa.array([[("k", x)] for x in v], pa.map_(pa.string(), pa.float64())),
        lambda v: pa.array([[{"s": x}] for x in v]),
    ],
    ids=["struct", "map", "list_of_struct"],
)
def test_a_nan_within_a_struct_or_map_bound_for_jsonl_is_refused(tmp_path: Path, extra):
    log, out = tmp_path / "log.parquet", tmp_path / "out.jsonl"
    pq.write_table(_log(extra([1.0, 2.0, float("nan"), 4.0])), log)
    proc = run("annotate", log, "--method", "grpo", "--out", out)
    assert proc.returncode == 1
    assert "out.jsonl: row 2 of the output, column 'extra': nan" in one_line(proc)
    proc = run("annotate", log, "--method", "grpo", "--out", out, "--nonfinite", "null", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["nonfinite_nulls"] == 1


def test_cast_by_name_matches_struct_fields_by_name_at_any_depth():
    """Chat messages whose keys two files ordered differently: the fields are matched by name
    (inside lists too), a field one file lacks is null, nulls and slices kept."""
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    other = pa.struct([("content", pa.string()), ("name", pa.string()), ("role", pa.string())])
    rows = [[{"role": "user", "content": "hi"}], None, [{"role": "tool", "content": None}], []]
    given = pa.array(rows, pa.list_(message)).slice(0, 4)
    got = cast_by_name(given, pa.large_list(other))
    assert got.type == pa.large_list(other)
    assert got.to_pylist() == [
        [{"content": "hi", "name": None, "role": "user"}],
        None,
        [{"content": None, "name": None, "role": "tool"}],
        [],
    ]
    tail = cast_by_name(given.slice(2), pa.list_(other))
    assert tail.to_pylist() == [[{"content": None, "name": None, "role": "tool"}], []]
