"""Log sources: struct fields named with a dotted --col path become columns of their own; a
local file is read by the name it has (glob characters or a colon in it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import (
    READING_COMMANDS,
    groups_of_four,
    refused,
    rollout,
    run,
    write_jsonl,
    write_parquet,
)

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


def test_a_fifo_or_a_symlink_loop_as_input_is_refused_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.parquet").symlink_to("b.parquet")
    (folder / "b.parquet").symlink_to("a.parquet")
    for command in READING_COMMANDS:
        assert "not a regular file" in refused(tmp_path, str(fifo), command, code=2)
        assert "Too many levels of symbolic links" in refused(
            tmp_path, str(folder), command, code=2
        )


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("when", ["between passes", "during the last pass"])
def test_an_input_changed_under_a_multi_pass_run_is_refused(tmp_path, suffix, when):
    """The log rewritten (other rewards, the same size) after the passes that plan the run:
    no output mixing the two versions. A Parquet log is read from disk at every pass: one
    line instead. A JSONL log's later passes read what its first pass parsed (kept in a
    temporary file): the output is the first version's, whole."""

    import advcli
    from advcli.errors import DataError

    rows = groups_of_four()
    writer = write_parquet if suffix == ".parquet" else write_jsonl
    path = Path(writer(tmp_path / f"log{suffix}", rows))
    other = [{**r, "reward": 1.0 - r["reward"]} for r in rows]  # the same bytes in size

    def rewrite() -> None:
        writer(tmp_path / f"new{suffix}", other)
        os.replace(tmp_path / f"new{suffix}", path)

    class Rewrite(advcli.Reporter):
        def stage(self, name: str) -> None:
            if name == "pass 2/2: annotating" and when == "between passes":
                rewrite()

        def advance(self, rows: int, tokens: int) -> None:
            if when == "during the last pass" and rows:
                rewrite()

    out = tmp_path / "o.parquet"
    if suffix == ".jsonl":
        with advcli.reporting(Rewrite()):
            advcli.annotate([str(path)], str(out), method="grpo", batch_rows=2)
        assert pq.read_table(out).column("reward").to_pylist() == [r["reward"] for r in rows]
        return
    refused = pytest.raises(DataError, match="changed while advcli read it")
    with refused, advcli.reporting(Rewrite()):
        advcli.annotate([str(path)], str(out), method="grpo", batch_rows=2)
    assert not out.exists()
