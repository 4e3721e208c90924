"""Log sources: struct fields named with a dotted --col path become columns of their own."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run, write_jsonl

ROWS = [
    {"group": {"id": "a", "turns": 1}, "reward": 1.0},
    {"group": {"id": "a", "turns": 2}, "reward": 0.0},
    {"group": {"id": "b", "turns": 1}, "reward": 1.0},
    {"group": {"id": "b", "turns": 3}, "reward": 0.5},
]


def test_a_dotted_col_names_a_struct_field(tmp_path):
    log = write_jsonl(tmp_path / "nested.jsonl", ROWS)
    out = tmp_path / "o.parquet"
    args = ("--col", "prompt_id=group.id")
    proc = run("annotate", log, *args, "--method", "rloo", "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr.decode()
    df = pl.read_parquet(out)
    assert df["group.id"].to_list() == ["a", "a", "b", "b"]  # the field, as a column too
    np.testing.assert_allclose(df["advantage"].to_numpy(), [1.0, -1.0, 0.5, -0.5])
    report = json.loads(run("audit", log, *args, "--json").stdout)
    assert report["groups"] == 2 and report["group_sizes"] == {"2": 2}


def test_a_dotted_col_that_is_no_field_is_an_error(tmp_path):
    log = write_jsonl(tmp_path / "nested.jsonl", ROWS)
    proc = run("audit", log, "--col", "prompt_id=group.nope")
    assert proc.returncode == 2  # the flag names what is not there: usage
    assert "--col prompt_id=group.nope: no column 'group.nope'" in proc.stderr.decode()


def _span_rows() -> list[dict]:
    return [
        {"prompt_id": "p", "input_ids": [1, 2, 3, 4, 5],
         "spans": [{"start": 0, "end": 2, "kind": "prompt"},
                   {"start": 2, "end": 5, "kind": "action"}],
         "reward": float(i % 2)}
        for i in range(6)
    ]  # fmt: skip


@pytest.mark.parametrize("key", ["kind", "start", "end"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_key_given_twice_inside_a_span_is_refused_naming_it(tmp_path, key, fmt):
    """{"kind": "action", "kind": "observation"} inside a span: JSON readers keep one or the
    other (polars the first), Parquet holds both as fields of one name; refused, never read as
    either."""
    rows = _span_rows()
    path = tmp_path / f"log.{fmt}"
    if fmt == "jsonl":
        lines = [json.dumps(r) for r in rows]
        pairs = [("start", 2), ("end", 5), ("kind", "action")]
        pairs.append((key, {"kind": "observation", "start": 3, "end": 4}[key]))  # the other
        second = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs)
        lines[3] = lines[3].replace('{"start": 2, "end": 5, "kind": "action"}', f"{{{second}}}")
        path.write_text("\n".join(lines) + "\n")
        where = f"line 4, column 'spans.{key}': the key appears twice in one object"
    else:
        spans = pa.Table.from_pylist(rows).column("spans").combine_chunks()
        inner = spans.values
        fields = [*inner.type, inner.type.field(key)]
        arrays = [*inner.flatten(), inner.field(key)]
        twice = pa.ListArray.from_arrays(
            spans.offsets, pa.StructArray.from_arrays(arrays, fields=fields)
        )
        table = pa.Table.from_pylist(rows)
        pq.write_table(
            table.set_column(table.schema.get_field_index("spans"), "spans", twice), path
        )
        where = f"column 'spans.{key}' appears twice"
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.startswith(f"advcli: error: {path}: {where}") and err.count("\n") == 1, err
    assert not (tmp_path / "o.parquet").exists()


def test_span_keys_found_elsewhere_in_a_line_are_not_taken_for_a_key_twice(tmp_path):
    """A "kind" outside the spans (a column, a text, a null field) counts more keys than the
    spans hold: the lines are then parsed, and nothing is refused."""
    rows = [dict(r, kind="kind", note={"start": None}) for r in _span_rows()]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", path, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr.decode()
