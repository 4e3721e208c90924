"""``--from tinker`` on logs tinker-cookbook 0.6.1's own RL loop wrote (``tools/dumps/tinker.py``:
``train.main`` unchanged, the Tinker service stood in), against its ``compute_advantages``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.presets.test_real_dumps import REAL, run

TINKER = REAL / "tinker"


def _annotated(tmp_path: Path, inputs: Path, *options: str) -> tuple[list[dict], str]:
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(inputs), "--from", "tinker", "--method", "grpo", *options,
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return pq.read_table(out).to_pylist(), proc.stderr


def _truth(case: str, split: str = "train") -> list[dict]:
    rows = json.loads((TINKER / case / "truth.json").read_text())["rows"]
    return [r for r in rows if r["split"] == split]


def test_tinker_gives_tinkers_own_advantages(tmp_path: Path) -> None:
    """A folder reads the train files of every iteration (not the evaluators'); the advantage
    is the total reward minus its group's mean; the per-step rewards are kept."""
    rows, stderr = _annotated(tmp_path, TINKER / "default")
    truth = _truth("default")
    assert [(r["iteration"], r["group_idx"], r["traj_idx"]) for r in rows] == [
        (t["iteration"], t["group_idx"], t["traj_idx"]) for t in truth
    ]
    assert [r["advantage"] for r in rows] == pytest.approx([t["advantage"] for t in truth],
                                                           abs=1e-6)  # fmt: skip
    assert [r["step_rewards"] for r in rows] == [t["step_rewards"] for t in truth]
    assert "tinker's per-step rewards are kept as 'step_rewards'" in stderr
    assert json.loads(rows[1]["steps"])[2]["reward"] == -0.5


def test_tinker_evaluation_file_when_named(tmp_path: Path) -> None:
    path = TINKER / "default" / "iteration_000000" / "eval_test_rollout_summaries.jsonl"
    rows, _ = _annotated(tmp_path, path)
    want = [t for t in _truth("default", "eval/test") if t["iteration"] == 0]
    assert [(r["split"], r["group_idx"], r["traj_idx"]) for r in rows] == [
        (t["split"], t["group_idx"], t["traj_idx"]) for t in want
    ]


def test_tinker_constant_groups_dropped_as_tinker_does(tmp_path: Path) -> None:
    """``remove_constant_reward_groups=True``: the group is written but not trained on."""
    rows, _ = _annotated(tmp_path, TINKER / "remove-constant", "--zero-variance", "drop")
    trained = [t for t in _truth("remove-constant") if t["advantage"] is not None]
    assert len(rows) == len(trained) < len(_truth("remove-constant"))
    assert [r["advantage"] for r in rows] == pytest.approx([t["advantage"] for t in trained],
                                                           abs=1e-6)  # fmt: skip
    audit = json.loads(run("audit", str(TINKER / "remove-constant"), "--from", "tinker",
                           "--json").stdout)  # fmt: skip
    assert audit["zero_variance_groups"] == 1


def test_tinker_a_step_reward_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    source = TINKER / "default" / "iteration_000000" / "train_rollout_summaries.jsonl"
    records = [json.loads(line) for line in source.read_text().splitlines()]
    records[1]["steps"][1]["reward"] = "high"
    path = tmp_path / "iteration_000000" / "train_rollout_summaries.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = run("annotate", str(path), "--from", "tinker", "--method", "grpo", "--out",
               str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.endswith(
        "train_rollout_summaries.jsonl: line 2, column 'steps': step 1's reward 'high' is not a "
        "number\n"
    )
