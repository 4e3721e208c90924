"""Token ids (advcli.io.tokens): a null id or one beyond int64 is one line naming its row and
token."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import groups_of_four, one_line, refused, run, write_jsonl


@pytest.mark.parametrize("command", ["annotate", "shard"])
def test_a_null_or_out_of_range_token_id_names_its_row_and_token(tmp_path, command):
    rows = groups_of_four()
    rows[3]["input_ids"] = [rows[3]["input_ids"][0], None, *rows[3]["input_ids"][2:]]
    path = write_jsonl(tmp_path / "null.jsonl", rows)
    line = refused(tmp_path, path, command)
    assert line.startswith(f"advcli: error: {path}: line 4, column 'input_ids': token id null")
    assert "at token 1" in line
    table = pa.Table.from_pylist(groups_of_four())
    ids = [[1, 2**63 + 5, *r[2:]] for r in table.column("input_ids").to_pylist()]
    at = table.schema.get_field_index("input_ids")
    wide = table.set_column(at, "input_ids", pa.array(ids, pa.list_(pa.uint64())))
    big = tmp_path / "u64.parquet"
    pq.write_table(wide, big)
    line = refused(tmp_path, str(big), command)
    assert "row 0, column 'input_ids': token id 9223372036854775813 is beyond int64" in line


def test_the_trainers_log_probs_are_finite_on_action_tokens(tmp_path):
    """Read where a run takes them (the KL penalty's policy log-probs): anything off the action
    tokens, a non-finite value on one refused at its row, column and token."""
    rows = groups_of_four()
    for row in rows:
        row["old_log_probs"] = [float("nan")] * 2 + [-0.5] * 3  # the prompt's: not read
        row["ref_logprobs"] = [0.0] * 5
    path = write_jsonl(tmp_path / "ok.jsonl", rows)
    out = tmp_path / "o.parquet"
    done = run("annotate", path, "--method", "grpo", "--kl-coef", "0.1", "--out", str(out))
    assert done.returncode == 0, done.stderr.decode()
    rows[5]["old_log_probs"][3] = float("inf")
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    done = run(
        "annotate",
        bad,
        "--method",
        "grpo",
        "--kl-coef",
        "0.1",
        "--out",
        str(tmp_path / "o2.parquet"),
    )
    line = one_line(done)
    assert done.returncode == 1 and "line 6, column 'old_log_probs'" in line, line
