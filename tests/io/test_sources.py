"""Log sources: struct fields named with a dotted --col path become columns of their own."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

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
