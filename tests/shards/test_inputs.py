"""An annotated log as shard's input (advcli.shards.inputs): the roles its metadata records are
checked against the log."""

from __future__ import annotations

import json

from advcli.io.outputs import metadata_path
from tests.conftest import one_line, rollout, run, write_jsonl


def test_broken_roles_in_an_annotated_logs_metadata_are_the_datas_fault(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [rollout(f"p{i % 2}", i % 3) for i in range(6)])
    out = tmp_path / "a.jsonl"
    assert run("annotate", log, "--method", "grpo", "--out", str(out)).returncode == 0
    meta = metadata_path(out)
    record = json.loads(meta.read_text())
    record["roles"] = {"nosuchrole": "reward"}
    meta.write_text(json.dumps(record))
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {meta}: its 'roles' are not roles advcli")
    record["roles"] = {"reward": "nosuch"}
    meta.write_text(json.dumps(record))
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {meta}: its 'roles' name a column the log lacks (reward=nosuch). "
        "Hint: annotate the raw log again"
    )
    assert not (tmp_path / "sh").exists()
