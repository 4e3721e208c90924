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
    method = () if "--method" in options else ("--method", "grpo")
    proc = run("annotate", str(inputs), "--from", "tinker", *method, *options,
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return pq.read_table(out).to_pylist(), proc.stderr


def _truth(case: str, split: str = "train") -> list[dict]:
    rows = json.loads((TINKER / case / "truth.json").read_text())["rows"]
    return [r for r in rows if r["split"] == split]


def _trajectories(rows: list[dict]) -> list[dict]:
    """A trajectory's first step row (every row carries its trajectory's fields)."""
    return [r for r in rows if r["segment_index"] == 0]


def test_tinker_gives_tinkers_own_advantages(tmp_path: Path) -> None:
    """A folder reads the train files of every iteration (not the evaluators'), one row per
    step; the advantage is the total reward minus its group's mean, on every step; a step's
    reward is kept per step, the group's final reward on the last."""
    rows, stderr = _annotated(tmp_path, TINKER / "default")
    truth = _truth("default")
    firsts = _trajectories(rows)
    assert [(r["iteration"], r["group_idx"], r["traj_idx"]) for r in firsts] == [
        (t["iteration"], t["group_idx"], t["traj_idx"]) for t in truth
    ]
    assert [r["advantage"] for r in firsts] == pytest.approx([t["advantage"] for t in truth],
                                                             abs=1e-6)  # fmt: skip
    by_trajectory: dict[str, list[dict]] = {}
    for row in rows:
        by_trajectory.setdefault(row["rollout_id"], []).append(row)
    assert len(by_trajectory) == len(truth) < len(rows)
    finals = 0
    for steps, t in zip(by_trajectory.values(), truth, strict=True):
        assert [s["segment_index"] for s in steps] == list(range(len(t["step_rewards"])))
        assert {s["advantage"] for s in steps} == {steps[0]["advantage"]}
        want = [*t["step_rewards"][:-1], t["step_rewards"][-1] + t["final_reward"]]
        assert [s["step_reward"] for s in steps] == pytest.approx(want)
        assert sum(s["step_reward"] for s in steps) == pytest.approx(t["total_reward"])
        finals += t["final_reward"] != 0
    assert finals  # the 'group' mode's reward is the final reward alone
    assert "tinker's trajectories are read one row per step" in stderr
    assert rows[1]["stop_reason"] is None and json.loads(rows[1]["step_logs"])["turn"] == 1


def test_tinker_steps_feed_the_step_methods(tmp_path: Path) -> None:
    """step-reinforce on a log without tokens: each step's discounted return (γ = 0.5) less
    the mean over its group's steps, against a float64 loop of our own."""
    rows, _ = _annotated(tmp_path, TINKER / "default", "--method", "step-reinforce",
                         "--step-gamma", "0.5", "--step-norm", "mean")  # fmt: skip
    returns: dict[int, float] = {}
    for i in reversed(range(len(rows))):
        later = i + 1 < len(rows) and rows[i + 1]["rollout_id"] == rows[i]["rollout_id"]
        returns[i] = rows[i]["step_reward"] + (0.5 * returns[i + 1] if later else 0.0)
    groups: dict[str, list[float]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row["prompt_id"], []).append(returns[i])
    for i, row in enumerate(rows):
        mean = sum(groups[row["prompt_id"]]) / len(groups[row["prompt_id"]])
        assert row["step_return"] == pytest.approx(returns[i], abs=1e-12)
        assert row["advantage"] == pytest.approx(returns[i] - mean, abs=1e-6)
    proc = run("annotate", str(TINKER / "default"), "--from", "tinker", "--method", "gigpo",
               "--out", str(tmp_path / "g.parquet"))  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "no 'state' column" in proc.stderr


def test_tinker_evaluation_file_when_named(tmp_path: Path) -> None:
    path = TINKER / "default" / "iteration_000000" / "eval_test_rollout_summaries.jsonl"
    rows = _trajectories(_annotated(tmp_path, path)[0])
    want = [t for t in _truth("default", "eval/test") if t["iteration"] == 0]
    assert [(r["split"], r["group_idx"], r["traj_idx"]) for r in rows] == [
        (t["split"], t["group_idx"], t["traj_idx"]) for t in want
    ]


def test_tinker_constant_groups_dropped_as_tinker_does(tmp_path: Path) -> None:
    """``remove_constant_reward_groups=True``: the group is written but not trained on."""
    rows = _trajectories(
        _annotated(tmp_path, TINKER / "remove-constant", "--zero-variance", "drop")[0]
    )
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
