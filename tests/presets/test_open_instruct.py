"""``--from open-instruct`` on traces open-instruct's own ``save_traces`` writer and advantage
code wrote (``tools/dumps/open_instruct.py``, main @e6c3044), against its logged advantages."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.presets.test_real_dumps import REAL, run

OPEN_INSTRUCT = REAL / "open-instruct"


def _check(case: str, *options: str) -> tuple[int, dict, str]:
    proc = run("check", str(OPEN_INSTRUCT / case), "--from", "open-instruct", *options, "--json")
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _annotated(tmp_path: Path, inputs: Path) -> tuple[list[dict], dict]:
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(inputs), "--from", "open-instruct", "--method", "grpo",
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return pq.read_table(out).to_pylist(), json.loads(proc.stdout)


@pytest.mark.parametrize("case", ["default", "tools", "shards"])
def test_centered_runs_reproduce_open_instructs_advantages(case: str) -> None:
    """The default (R − group mean): every shard of a run folder, tool calls, an empty
    completion whose log-probability is a bare NaN."""
    code, result, stderr = _check(case)
    assert code == 0, stderr
    truth = json.loads((OPEN_INSTRUCT / case / "truth.json").read_text())["rows"]
    assert result["ok"] and result["rows"] == len(truth)
    assert result["max_abs_difference"] <= 1e-6


def test_the_advantage_of_each_sample_is_open_instructs(tmp_path: Path) -> None:
    rows, summary = _annotated(tmp_path, OPEN_INSTRUCT / "default")
    truth = json.loads((OPEN_INSTRUCT / "default" / "truth.json").read_text())["rows"]
    by_sample = {(t["step"], t["sample_idx"]): t for t in truth}
    for row in rows:
        expected = by_sample[(row["step"], row["sample_idx"])]
        assert row["prompt_id"].endswith(f":{expected['step']}:{expected['prompt_idx']}")
        assert row["advantage"] == pytest.approx(expected["advantage"], abs=1e-6)
        assert row["source_advantage"] == expected["advantage"]
    assert any(math.isnan(x) for r in rows for x in r["logprobs"][-1:])  # the empty completion
    assert any("filter_zero_std_samples" in w for w in summary["warnings"])


@pytest.mark.parametrize("case", ["standard", "n3_float_edge"])
def test_standard_normalisation_is_named_by_check_and_reproduced(case: str) -> None:
    """advantage_normalization_type standard, (R − mean) / (std + 1e-8): check names it; with
    it, every row agrees, the zero-variance group's 0 and float64's near-tie too."""
    code, result, _ = _check(case)
    assert code == 4 and result["reproduced_by"].startswith("--scale group")
    code, result, stderr = _check(case, "--scale", "group")
    assert code == 0, stderr
    assert result["ok"] and result["max_abs_difference"] <= 1e-6


def test_tool_tokens_are_said_to_count_as_actions() -> None:
    _, result, _ = _check("tools")
    assert any("mask_tool_use" in w for w in result["warnings"])


def test_a_resumed_run_logging_a_step_again_reads_the_later_lines(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    shutil.copytree(OPEN_INSTRUCT / "default", folder)
    shard = next(folder.glob("*_rollouts_000000.jsonl"))
    lines = shard.read_text().splitlines(keepends=True)
    again = [json.loads(x) for x in lines if json.loads(x)["step"] == 1]
    for record in again:
        record["reward"], record["advantage"] = 10.0 - record["reward"], -record["advantage"]
    shard.write_text("".join(lines) + "".join(json.dumps(r) + "\n" for r in again))
    rows, summary = _annotated(tmp_path, folder)
    assert len(rows) == 16
    assert any(f"{len(again)} sample(s) logged again" in w for w in summary["warnings"])
    flipped = {r["sample_idx"]: r for r in again}
    for row in rows:
        if row["step"] == 1:
            assert row["source_advantage"] == flipped[row["sample_idx"]]["advantage"]


def test_a_log_probability_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    shutil.copytree(OPEN_INSTRUCT / "default", folder)
    shard = next(folder.glob("*_rollouts_000000.jsonl"))
    first, *rest = shard.read_text().splitlines(keepends=True)
    record = json.loads(first)
    record["logprobs"][0] = "x"
    shard.write_text(json.dumps(record) + "\n" + "".join(rest))
    proc = run("annotate", str(folder), "--from", "open-instruct", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"{shard}: line 1, column 'logprobs': a value is not a number" in proc.stderr


def test_log_probabilities_of_the_wrong_count_are_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    shutil.copytree(OPEN_INSTRUCT / "default", folder)
    shard = next(folder.glob("*_rollouts_000000.jsonl"))
    first, *rest = shard.read_text().splitlines(keepends=True)
    record = json.loads(first)
    record["logprobs"].append(-0.5)
    shard.write_text(json.dumps(record) + "\n" + "".join(rest))
    proc = run("annotate", str(folder), "--from", "open-instruct", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    n = len(record["response_tokens"])
    assert (f"{shard}: line 1, column 'logprobs': {n + 1} log-probabilities for {n} response "
            "tokens") in proc.stderr  # fmt: skip
