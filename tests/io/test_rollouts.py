"""The rows a method reads (advcli.io.rollouts): a null id, an index or token of the wrong kind
or sign, a number beyond float32, and one rollout in two files, each one line naming the file, row
(or line) and column."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import SAMPLE, group_log, one_line, rollout, run, write_jsonl, write_parquet


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_null_rollout_id_names_the_row(tmp_path, suffix):
    rows = group_log(2, 2)
    rows[2]["rollout_id"] = None
    writer = write_parquet if suffix == ".parquet" else write_jsonl
    log = writer(tmp_path / f"log{suffix}", rows)
    for command in (["annotate", "--method", "grpo", "--out", str(tmp_path / "o.parquet")],
                    ["shard", "--method", "grpo", "--out", str(tmp_path / "sh")]):  # fmt: skip
        proc = run(command[0], log, *command[1:])
        assert proc.returncode == 1
        where = "line 3" if suffix == ".jsonl" else "row 2"  # Parquet rows count from 0
        assert f"{where}, column 'rollout_id': rollout id is missing" in one_line(proc)


def test_a_segment_index_that_is_no_number(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [rollout("a", 1.0, segment_index={})])
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "column 'segment_index'" in one_line(proc)


def test_inputs_beyond_float32_are_refused_by_row_and_column(tmp_path):
    rows = group_log(2, 2)
    rows[1]["values"] = [0.0, 0.0, 3e39, 0.0, 0.0]
    for r in rows[:1] + rows[2:]:
        r["values"] = [0.0] * 5
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "gae", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'values': value 3e+39 is beyond float32's range "
        "(±3.4e38), which advcli writes. Hint: scale the column"
    )
    rows[1]["reward"] = -1e300
    proc = run("annotate", write_jsonl(tmp_path / "r.jsonl", rows), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 2, column 'reward': value -1e+300 is beyond float32's range" in one_line(proc)
    assert not (tmp_path / "o.parquet").exists()
    rows[1]["reward"] = 1.0
    rows[2].update(truncated=True, bootstrap_value=1e300)  # a truncated row's bootstrap too
    proc = run("annotate", write_jsonl(tmp_path / "b.jsonl", rows), "--method", "reinforce-pp",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 3, column 'bootstrap_value': value 1e+300 is beyond float32's" in one_line(proc)


def test_negative_segment_index_and_token_id(tmp_path):
    rows = [rollout("a", 1.0, rollout_id="r", segment_index=-1)]
    proc = run("annotate", write_jsonl(tmp_path / "s.jsonl", rows), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 1, column 'segment_index': segment index -1 is negative" in one_line(proc)
    rows = [rollout("a", 1.0), rollout("a", 0.0, input_ids=[1, 2, -3, 4, 5])]
    log = write_parquet(tmp_path / "t.parquet", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "row 1, column 'input_ids': token id -3 is negative" in one_line(proc)


def test_a_folder_holding_one_log_in_two_formats_names_both_files(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in ("rollouts.jsonl", "rollouts.parquet"):
        shutil.copy(SAMPLE / name, folder / name)
    proc = run("audit", str(folder))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {folder}/rollouts.parquet: row 0, column 'segment_index': rollout "
        f"'r00' (segment 0) is also at {folder}/rollouts.jsonl line 1; two files hold the same "
        "rollouts (one log in two formats in one folder?). Hint: give only one of them"
    )
    rows = group_log(2, 2)
    a = write_jsonl(tmp_path / "a.jsonl", rows)
    b = write_jsonl(tmp_path / "b.jsonl", rows[2:])  # no segment_index: ids must be unique
    proc = run("annotate", a, b, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert f"{b}: line 1, column 'rollout_id': rollout 'p1-r0' is also at {a} line 3" in \
        one_line(proc)  # fmt: skip
