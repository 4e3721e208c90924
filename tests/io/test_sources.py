"""Log sources: struct fields named with a dotted --col path become columns of their own; a
local file is read by the name it has (glob characters or a colon in it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.conftest import rollout, run, write_jsonl, write_parquet

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


def _log(path: Path, prompt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [rollout(prompt, float(i % 2), rollout_id=f"{prompt}{i}") for i in range(4)]
    (write_jsonl if path.suffix == ".jsonl" else write_parquet)(path, rows)


# Names a shell passes as they are: glob characters in a file's own name, and a colon that is
# no URI's (only scheme:// is); as given, and as ./NAME.
LOCAL_NAMES = [
    "[x].parquet",
    "run[1]/log.jsonl",
    "s3:b.parquet",
    "./s3:b.parquet",
    "gs:logs/step[2].parquet",
    "hf:x.jsonl",
]


@pytest.mark.parametrize("name", LOCAL_NAMES)
@pytest.mark.parametrize("command", ["audit", "annotate"])
def test_a_local_file_is_read_by_the_name_it_has(tmp_path, name, command):
    _log(tmp_path / name, "p")
    args = ["--json"] if command == "audit" else ["--method", "grpo", "-q", "--out", "o.parquet"]
    proc = run(command, name, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    if command == "audit":
        assert json.loads(proc.stdout)["rollouts"] == 4
    else:
        assert pq.read_metadata(tmp_path / "o.parquet").num_rows == 4


def test_a_pattern_matches_where_no_file_has_its_name(tmp_path):
    """An existing file wins over a glob; a name no file has is a pattern."""
    for name, prompt in (("log1.parquet", "a"), ("log2.parquet", "b"), ("log[12].parquet", "c")):
        _log(tmp_path / name, prompt)
    literal = json.loads(run("audit", "log[12].parquet", "--json", cwd=tmp_path).stdout)
    assert literal["groups"] == 1 and literal["files"] == ["log[12].parquet"]
    (tmp_path / "log[12].parquet").unlink()
    matched = json.loads(run("audit", "log[12].parquet", "--json", cwd=tmp_path).stdout)
    assert matched["groups"] == 2 and matched["files"] == ["log1.parquet", "log2.parquet"]
