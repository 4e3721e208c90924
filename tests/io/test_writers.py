"""Annotated outputs and their metadata (advcli.io.writers): the metadata names the data it
describes, survives a kill between the two moves of a JSONL output, is refused when malformed;
and what JSON lines cannot hold (NaN, bytes) is refused before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli.io.outputs import metadata_path
from tests.conftest import dead_pid, digest, groups_of_four, metadata_of, one_line, run


def test_jsonl_metadata_names_the_data_it_describes(small_log, tmp_path):
    out = tmp_path / "out.jsonl"
    assert run("annotate", small_log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    meta = json.loads(metadata_path(out).read_text())
    assert meta["data"] == {"bytes": out.stat().st_size, "sha256": digest(out)}
    out.write_bytes(out.read_bytes().replace(b'"a"', b'"z"'))  # as if another run's data
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert "describes another version of" in one_line(proc)


def test_a_kill_between_the_two_moves_of_a_jsonl_output_loses_no_metadata(small_log, tmp_path):
    """Killed after the data moved and before its metadata did: the new data sits with the
    old metadata, and the new metadata under its temporary name, where advcli looks."""
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    for out, method in ((old, "rloo"), (new, "grpo")):
        assert (
            run("annotate", small_log, "--method", method, "-q", "--out", str(out)).returncode == 0
        )
    shutil.copy(new, old)  # the data moved...
    pending = tmp_path / f"..old.jsonl.meta.json.advcli-{dead_pid()}-1-0c0c.tmp"
    shutil.copy(metadata_path(new), pending)  # ...its metadata did not
    assert metadata_of(old)["method"] == "grpo"
    summary = json.loads(run("shard", str(old), "--out", str(tmp_path / "sh"), "--json").stdout)
    assert summary["method"] == "grpo"
    pending.unlink()  # without it the old metadata describes other data: an error, not a guess
    proc = run("shard", str(old), "--out", str(tmp_path / "sh2"))
    assert proc.returncode == 1 and "describes another version" in one_line(proc)


@pytest.mark.parametrize(
    "meta",
    ["[1, 2", '"text"', '{"method": 5}', '{"method": "grpo", "roles": {"reward": 3}}'],
)
def test_malformed_metadata_of_an_annotated_log(small_log, tmp_path, meta):
    out = tmp_path / "ann.jsonl"
    assert run("annotate", small_log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    metadata_path(out).write_text(meta)
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {metadata_path(out)}: ")


def test_an_annotated_jsonl_keeps_its_metadata_hidden_and_reads_an_old_sidecar(
    small_log, tmp_path, monkeypatch
):
    """``.out.jsonl.meta.json``: HF datasets reads the folder's data alone (it skips hidden
    files); polars reads it through a glob (it refuses a folder of two kinds of files, hidden
    ones too). A metadata file beside the data (``out.jsonl.meta.json``, as advcli wrote it
    before) still reads, and a new write replaces it."""
    import polars as pl

    folder = tmp_path / "annotated"
    folder.mkdir()
    out = folder / "out.jsonl"
    assert run("annotate", small_log, "--method", "rloo", "-q", "--out", str(out)).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == [".out.jsonl.meta.json", "out.jsonl"]
    assert metadata_of(out)["method"] == "rloo"
    assert pl.read_ndjson(folder / "*.jsonl").height == 6
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = datasets.load_dataset("json", data_dir=str(folder), cache_dir=str(tmp_path / "c"))
    assert loaded["train"].num_rows == 6 and "advantages" in loaded["train"].column_names
    metadata_path(out).rename(folder / "out.jsonl.meta.json")  # the layout before
    assert metadata_of(out)["method"] == "rloo"
    summary = json.loads(run("shard", str(out), "--out", str(tmp_path / "sh"), "--json").stdout)
    assert summary["method"] == "rloo"
    again = run("annotate", small_log, "--method", "grpo", "-q", "--force", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".out.jsonl.meta.json", "out.jsonl"]
    assert metadata_of(out)["method"] == "grpo"


def _with_pass_through(tmp_path: Path, column: pa.Array) -> str:
    table = pa.Table.from_pylist(groups_of_four()).append_column("extra", column)
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    return str(path)


def test_a_nan_bound_for_jsonl_is_refused_unless_null_is_asked_for(tmp_path):
    values = pa.array([1.0, float("nan"), 2, 3, float("inf"), 5, 6, 7])
    path = _with_pass_through(tmp_path, values)
    out = tmp_path / "o.jsonl"
    proc = run("annotate", path, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 1
    assert "o.jsonl: row 1 of the output, column 'extra': nan" in one_line(proc)
    assert "--nonfinite null" in one_line(proc)
    assert not out.exists() and not metadata_path(out).exists()
    proc = run("annotate", path, "--method", "grpo", "--out", str(out), "--nonfinite", "null",
               "--json")  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["nonfinite_nulls"] == 2
    assert [json.loads(line)["extra"] for line in out.read_text().splitlines()][:2] == [1.0, None]
    assert run("annotate", path, "--method", "grpo", "--out", str(tmp_path / "o.parquet")
               ).returncode == 0  # Parquet holds NaN as it is  # fmt: skip
    proc = run("annotate", path, "--method", "grpo", "--out", str(out), "--nonfinite", "zero")
    assert proc.returncode == 2
    assert "--nonfinite zero: expected one of error, null" in one_line(proc)


def test_a_bytes_column_bound_for_jsonl_is_one_line(tmp_path):
    path = _with_pass_through(tmp_path, pa.array([b"\x00\xff"] * 8, pa.binary()))
    out = tmp_path / "o.jsonl"
    proc = run("annotate", path, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 2
    assert "column 'extra' holds bytes, which JSON lines cannot hold" in one_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]
