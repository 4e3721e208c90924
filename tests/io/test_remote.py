"""Logs and outputs in object storage, against a real S3 API server on 127.0.0.1 (moto's
standalone server, started here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from tests.conftest import MOTO_SERVER, SAMPLE, one_line, run

pytestmark = pytest.mark.skipif(not MOTO_SERVER.exists(), reason="moto[server] is not installed")


def advcli(env, *args):
    return subprocess.run([sys.executable, "-m", "advcli", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)  # fmt: skip


def test_annotate_reads_and_writes_object_storage(s3, tmp_path):
    env, fs = s3
    local = tmp_path / "local.parquet"
    log = tmp_path / "log.parquet"
    pq.write_table(pq.read_table(SAMPLE / "rollouts.parquet"), log)
    args = ["--method", "gae", "--convention", "verl", "--gamma", "0.99"]
    assert advcli(env, "annotate", str(log), *args, "--out", str(local)).returncode == 0
    proc = advcli(env, "annotate", "s3://logs/in/", *args, "--out", "s3://logs/out/gae.parquet")
    assert proc.returncode == 0, proc.stderr
    with fs.open_input_file("logs/out/gae.parquet") as f:
        written = pq.read_table(f)
        kv = pq.read_metadata(f).metadata
    mine = pq.read_table(local)
    assert (
        written.drop_columns([])
        .replace_schema_metadata(None)
        .equals(mine.replace_schema_metadata(None))
    )
    meta = json.loads(kv[b"advcli"])
    assert meta["inputs"] == ["s3://logs/in/a.parquet", "s3://logs/in/b.parquet"]
    again = advcli(env, "annotate", "s3://logs/in/*.parquet", *args,
                   "--out", "s3://logs/out/gae.parquet")  # fmt: skip
    assert again.returncode == 2 and "already exists" in again.stderr


def test_audit_and_report_read_object_storage(s3, tmp_path):
    env, _ = s3
    here = json.loads(advcli(env, "audit", str(SAMPLE / "rollouts.parquet"), "--json").stdout)
    there = json.loads(advcli(env, "audit", "s3://logs/in", "--json").stdout)
    assert {k: v for k, v in there.items() if k != "files"} == {
        k: v for k, v in here.items() if k != "files"
    }
    proc = advcli(env, "report", "s3://logs/in", "--method", "grpo",
                  "--out", str(tmp_path / "r.html"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_clear_errors(s3, tmp_path):
    env, _ = s3
    cases = {
        ("annotate", "s3://logs/nothing/", "--method", "grpo",
         "--out", str(tmp_path / "o.parquet")):
            "s3://logs/nothing/: no such file or folder",
        ("annotate", "s3://logs/in/a.parquet", "--method", "grpo",
         "--out", "s3://logs/in/a.parquet", "--force"):
            "s3://logs/in/a.parquet: this is one of the inputs",
        ("annotate", "s3://logs/in", "--method", "grpo", "--out", "s3://logs/o.jsonl"):
            "JSONL outputs go to a local disk",
        ("shard", "s3://logs/in", "--method", "grpo", "--out", "s3://logs"):
            "s3://logs: holds the input s3://logs/in/a.parquet",
    }  # fmt: skip
    for args, message in cases.items():
        proc = advcli(env, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("advcli: error: ") and proc.stderr.count("\n") == 1
        assert message in proc.stderr, proc.stderr


def test_shards_to_object_storage_and_verify_them_there(s3, tmp_path):
    """The folder is uploaded with its manifest last; verify reads it where it is; --force
    replaces an earlier output, its objects this one lacks deleted."""
    env, fs = s3
    local = tmp_path / "shards"
    args = ["--method", "grpo", "--split", "val=0.25", "--tokens-per-shard", "40"]
    assert advcli(env, "shard", str(SAMPLE / "rollouts.parquet"), *args,
                  "--out", str(local)).returncode == 0  # fmt: skip
    proc = advcli(env, "shard", "s3://logs/in", *args, "--out", "s3://logs/shards", "--json")
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    listed = fs.get_file_info(pafs.FileSelector("logs/shards", recursive=True))
    there = sorted(i.path.removeprefix("logs/shards/") for i in listed if i.is_file)
    assert there == names and len(names) > 4
    for name in names:  # the same shards, byte for byte (the manifests name other inputs)
        if name.startswith(("part-", "train/", "val/")):
            with fs.open_input_file(f"logs/shards/{name}") as f:
                assert f.read() == (local / name).read_bytes()
    checked = json.loads(advcli(env, "verify", "s3://logs/shards", "--json").stdout)
    assert checked["ok"] and checked["rows"] == json.loads(proc.stdout)["rows"]
    with fs.open_output_stream("logs/shards/extra.txt") as f:
        f.write(b"stray")
    bad = advcli(env, "verify", "s3://logs/shards")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "s3://logs/shards/extra.txt: a file the manifest does not list" in bad.stderr
    again = advcli(env, "shard", "s3://logs/in", *args, "--out", "s3://logs/shards")
    assert again.returncode == 2
    assert one_line(again).startswith("advcli: error: s3://logs/shards: already exists.")
    force = ["shard", "s3://logs/in", "--method", "grpo", "--out", "s3://logs/shards", "--force"]
    refused = advcli(env, *force)  # a file no manifest lists: not advcli's to delete
    assert refused.returncode == 2 and "holds extra.txt, which no advcli manifest" in refused.stderr
    assert fs.get_file_info("logs/shards/extra.txt").type == pafs.FileType.File
    fs.delete_file("logs/shards/extra.txt")
    again = advcli(env, *force)
    assert again.returncode == 0, again.stderr
    assert json.loads(advcli(env, "verify", "s3://logs/shards", "--json").stdout)["ok"]


def test_an_object_is_read_by_the_name_it_has(s3):
    """An object whose name holds glob characters is that object, not the pattern (which
    would match another object, x.parquet)."""
    env, fs = s3
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    for name, rows in (("[x].parquet", table.slice(0, 6)), ("x.parquet", table.slice(6))):
        with fs.open_output_stream(f"logs/odd/{name}") as out:
            pq.write_table(rows, out)
    proc = advcli(env, "audit", "s3://logs/odd/[x].parquet", "--json")
    assert proc.returncode == 0, proc.stderr
    audited = json.loads(proc.stdout)
    assert audited["files"] == ["s3://logs/odd/[x].parquet"]
    assert audited["rollouts"] == len(set(table.slice(0, 6).column("rollout_id").to_pylist()))


def test_a_file_uri_reads_the_local_file_it_names(tmp_path):
    """`advcli schema file:///abs/rollouts.parquet` said "no such file": a file:// URI is the
    local path it names (percent-decoded; the host empty or localhost); another host is
    refused in one line."""
    log = tmp_path / "a b.parquet"
    shutil.copy(SAMPLE / "rollouts.parquet", log)
    want = json.loads(run("schema", str(log), "--json").stdout)
    for uri in (f"file://{tmp_path}/a%20b.parquet", f"FILE://localhost{tmp_path}/a%20b.parquet"):
        proc = run("schema", uri, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == want
    proc = run("schema", f"file://elsewhere{log}")
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith(f"advcli: error: file://elsewhere{log}: not a local")
