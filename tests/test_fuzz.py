"""Seeded mutation fuzzing of the sample log, Parquet and JSONL, through ``schema`` and
``annotate``: every run exits 0, 1 or 2; a failure is exactly one line on stderr, never a
traceback or a panic, and leaves nothing at ``--out``.

The mutants: random bytes flipped, cut or repeated (JSONL and the data pages of Parquet, whose
footer stays intact), JSON values swapped for odd ones (null, negative, huge, text, nested), and
Parquet columns dropped, retyped, emptied or nulled. Runs are in-process (the real entry point,
``advcli.cli.main``) so that a few hundred fit in seconds; stderr is read at the file
descriptor, where a native panic would print.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from advcli import cli
from tests.conftest import SAMPLE

MUTANTS = 300  # of each kind
METHODS = ["grpo", "rloo", "gae", "reinforce-pp", "batch-mean", "mc"]
ODD_VALUES = [b"null", b"-1", b"1e999", b"-1e400", b'"7"', b"{}", b"[]", b"[[1]]", b"true",
              b"18446744073709551616", b'"\\u0000"', b"0.5", b"NaN", b""]  # fmt: skip


def main(capfd, *args: str) -> tuple[int, str]:
    """advcli ARGS in-process: the exit code and everything written to stderr."""
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, capfd.readouterr().err


def check(capfd, path: Path, out: Path, method: str) -> None:
    code, err = main(capfd, "schema", str(path), "--json")
    assert code in (0, 1, 2), err
    if code:
        assert_one_line(err)
    code, err = main(capfd, "annotate", str(path), "--method", method, "-q", "--out", str(out))
    assert code in (0, 1, 2), err
    if code:
        assert_one_line(err)
        assert not out.exists()
        assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    out.unlink(missing_ok=True)
    Path(f"{out}.meta.json").unlink(missing_ok=True)


def assert_one_line(err: str) -> None:
    assert "Traceback" not in err and "panicked" not in err, err
    assert err.count("\n") == 1 and err.startswith("advcli: error: "), err


# ----------------------------------------------------------------------------- JSONL


def flip_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for at in rng.integers(0, len(out), rng.integers(1, 6)):
        out[at] = int(rng.integers(0, 256))
    return bytes(out)


def cut_or_repeat(data: bytes, rng: np.random.Generator) -> bytes:
    a, b = sorted(rng.integers(0, len(data), 2))
    return data[:a] + data[b:] if rng.random() < 0.5 else data[:b] + data[a:]


def odd_value(data: bytes, rng: np.random.Generator) -> bytes:
    """One JSON scalar (a number, a string, true/false/null) replaced by an odd value."""
    scalars = list(re.finditer(rb'-?\d+(\.\d+)?([eE][-+]?\d+)?|"[^"\\]*"|true|false|null', data))
    m = scalars[int(rng.integers(len(scalars)))]
    value = ODD_VALUES[int(rng.integers(len(ODD_VALUES)))]
    return data[: m.start()] + value + data[m.end() :]


JSONL_MUTATIONS: list[Callable[[bytes, np.random.Generator], bytes]] = [
    flip_bytes, cut_or_repeat, odd_value, odd_value,
]  # fmt: skip


def longer_log() -> bytes:
    """The sample eight times over (ids made unique): past the lines that type a JSONL log."""
    rows = [orjson.loads(line) for line in (SAMPLE / "rollouts.jsonl").read_bytes().splitlines()]
    return b"".join(
        orjson.dumps({**row, "prompt_id": f"{row['prompt_id']}-{k}",
                      "rollout_id": f"{row['rollout_id']}-{k}"}) + b"\n"
        for k in range(8)
        for row in rows
    )  # fmt: skip


def test_mutated_jsonl(capfd, tmp_path):
    source = longer_log()
    rng = np.random.default_rng(13)
    outcomes = set()
    for i in range(MUTANTS):
        mutate = JSONL_MUTATIONS[i % len(JSONL_MUTATIONS)]
        path = tmp_path / f"m{i}.jsonl"
        path.write_bytes(mutate(source, rng))
        check(capfd, path, tmp_path / "out" / "o.parquet", METHODS[i % len(METHODS)])
        outcomes.add(i)
    assert len(outcomes) == MUTANTS


# ----------------------------------------------------------------------------- Parquet


def parquet_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    """Bytes flipped in the data pages; the footer (schema, offsets) intact."""
    footer = int.from_bytes(data[-8:-4], "little") + 8
    out = bytearray(data)
    for at in rng.integers(4, len(data) - footer, rng.integers(1, 9)):
        out[at] ^= int(rng.integers(1, 256))
    return bytes(out)


def column_change(table: pa.Table, rng: np.random.Generator) -> pa.Table:
    """A column dropped, nulled, emptied, negated or retyped."""
    name = table.column_names[int(rng.integers(table.num_columns))]
    i = table.column_names.index(name)
    column = table.column(i)
    kind = int(rng.integers(5))
    if kind == 0:
        return table.drop_columns([name])
    if kind == 1:
        nulls = pa.nulls(table.num_rows, column.type)
        mask = pa.array(rng.random(table.num_rows) < 0.3)
        return table.set_column(i, name, pc.if_else(mask, nulls, column))
    if kind == 2:
        return table.set_column(i, name, pa.array([None] * table.num_rows, column.type))
    if kind == 3 and (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        return table.set_column(i, name, pc.negate(column))
    text = pa.list_(pa.string()) if pa.types.is_list(column.type) else pa.string()
    return table.set_column(i, name, column.cast(text, safe=False))


def test_mutated_parquet(capfd, tmp_path):
    source = SAMPLE / "rollouts.parquet"
    data, table = source.read_bytes(), pq.read_table(source)
    rng = np.random.default_rng(17)
    for i in range(MUTANTS):
        path = tmp_path / f"m{i}.parquet"
        if i % 2:
            path.write_bytes(parquet_bytes(data, rng))
        else:
            try:
                pq.write_table(column_change(table, rng), path)
            except (pa.ArrowException, ValueError):
                continue  # a change pyarrow itself cannot write
        check(capfd, path, tmp_path / "out" / "o.jsonl", METHODS[i % len(METHODS)])


@pytest.fixture(autouse=True)
def out_folder(tmp_path):
    (tmp_path / "out").mkdir()
