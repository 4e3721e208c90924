"""Logs without token ids (decoded text, as most frameworks dump): per-row methods, audit and
schema work; what needs tokens says so in one line."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from tests.conftest import run, write_jsonl

ROWS = [
    {"prompt_id": "a", "completion": "x", "reward": 1.0},
    {"prompt_id": "a", "completion": "y", "reward": 0.0},
    {"prompt_id": "a", "completion": "z", "reward": 0.0},
    {"prompt_id": "b", "completion": "u", "reward": 1.0},
    {"prompt_id": "b", "completion": "v", "reward": 1.0},
    {"prompt_id": "c", "completion": "w", "reward": 0.5, "truncated": True},
]


def test_outcome_methods_write_the_per_row_advantage(tmp_path):
    log = write_jsonl(tmp_path / "text.jsonl", ROWS)
    out = tmp_path / "o.parquet"
    proc = run("annotate", log, "--method", "rloo", "--out", str(out), "--json", "-q")
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["written"] == "per-row advantage only: the log has no token ids"
    assert "tokens_written" not in summary and summary["rows_written"] == 6
    df = pl.read_parquet(out)
    assert "advantages" not in df.columns and df["completion"].to_list() == list("xyzuvw")
    # rloo: n/(n-1) (R - mean); group b is zero-variance; c is a singleton (truncated: no matter)
    expected = [1.5 * (1 - 1 / 3), 1.5 * (0 - 1 / 3), 1.5 * (0 - 1 / 3), 0.0, 0.0, 0.0]
    np.testing.assert_allclose(df["advantage"].to_numpy(), expected, rtol=1e-6)
    assert summary["advantage_max"] == np.float32(1.0)
    assert df["zero_variance"].to_list() == [False] * 3 + [True] * 2 + [False]


def test_methods_that_need_tokens_say_what_is_missing(tmp_path):
    log = write_jsonl(tmp_path / "text.jsonl", ROWS)
    for args in (["annotate", log, "--method", "gae", "-o", str(tmp_path / "g.parquet")],
                 ["shard", log, "--method", "grpo", "--out", str(tmp_path / "s")]):  # fmt: skip
        proc = run(*args)
        text = proc.stderr.decode()
        assert proc.returncode == 1 and text.count("\n") == 1, text
        assert f"{log}: {'gae' if 'gae' in args else 'shard'} needs token ids" in text
        assert "Columns found: prompt_id, completion, reward, truncated" in text
    assert not (tmp_path / "s").exists() and not (tmp_path / "g.parquet").exists()


def test_audit_and_schema_without_tokens(tmp_path):
    log = write_jsonl(tmp_path / "text.jsonl", ROWS)
    report = json.loads(run("audit", log, "--json").stdout)
    assert report["token_shares"] == "omitted: the log has no token ids"
    assert "action_tokens" not in report and "no_signal_action_token_share" not in report
    assert report["zero_variance_groups"] == 1 and report["singleton_groups"] == 1
    info = json.loads(run("schema", log, "--json").stdout)
    assert info["tokens"] is None and "input_ids" in info["missing_roles"]
    can = info["can_run"]
    assert can["audit"] == can["grpo"] == can["batch-mean"] == "yes"
    assert can["gae"] == "needs input_ids, values" and can["shard"] == "needs input_ids"


def test_schema_lists_problems_instead_of_stopping(tmp_path):
    rows = [dict(ROWS[0], reward=None), *ROWS[1:]]
    log = write_jsonl(tmp_path / "text.jsonl", rows)
    proc = run("schema", log, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    info = json.loads(proc.stdout)
    assert info["problems"] == [f"{log}: line 1, column 'reward': reward is missing (null). "
                                "Hint: every row needs a reward"]  # fmt: skip
    assert info["rows"] == 6
