"""``--method focal-grpo`` against verl's own ``compute_f_grpo_outcome_advantage`` (the F-GRPO
branch, ``tests/fixtures/refs/verl``), a hand-computed group and a float64 loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import advcli
from tests.conftest import rollout, run, write_jsonl
from tests.methods.refs import cases, ids

FUNCTION = "compute_f_grpo_outcome_advantage"
PARAMS = {"f_grpo_gamma": "focal_gamma", "f_grpo_reward_correct": "reward_correct",
          "f_grpo_reward_wrong": "reward_wrong", "epsilon": "eps"}  # fmt: skip


@pytest.mark.parametrize("case", cases("verl", FUNCTION), ids=ids("verl", FUNCTION))
def test_reproduces_verls_function(case) -> None:
    params = {PARAMS[k]: v for k, v in case["params"].items() if k in PARAMS}
    if not case["params"].get("norm_adv_by_std_in_grpo", True):
        params["scale"] = "none"
    table = advcli.annotate_table(case["table"], method="focal-grpo", convention="verl", **params)
    groups: dict[str, list[float]] = {}
    for row in case["rows"]:
        groups.setdefault(row["prompt_id"], []).append(row["reward"])
    advantages = table["advantages"].to_pylist()
    for got, row, want in zip(advantages, case["rows"], case["expected"], strict=True):
        expected = np.asarray(want["advantages"])
        group = groups[row["prompt_id"]]
        if len(group) > 1 and len(set(group)) == 1:
            # verl divides a tied group's float32 rounding of its mean (6e-8 for 0.9s) by its
            # std floor sqrt(1e-6): 6e-5 of noise where advcli writes the group's 0
            assert np.abs(expected).max() < 1e-4
            expected = np.zeros_like(expected)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6, err_msg=row["rollout_id"])


def _focal_by_loop(rewards: list[float], gamma: float, right: float, wrong: float) -> list[float]:
    """One group, verl's GRPO (ddof 1, std + 1e-6), then the focal weight."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5
    rate = min(1.0, max(0.0, (mean - wrong) / (right - wrong)))
    return [(1 - rate) ** gamma * (r - mean) / (std + 1e-6) for r in rewards]


def test_by_hand_and_loop() -> None:
    rows = [rollout("a", r) for r in (1.0, 0.0, 0.0, 0.0)]
    rows += [rollout("b", r) for r in (3, -1, 0.5)]
    options: dict[str, Any] = {"convention": "verl", "focal_gamma": 2.0, "reward_wrong": -1.0}
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="focal-grpo", **options)
    got = table["advantage"].to_numpy()
    # group a: GRPO [1.5, -0.5, -0.5, -0.5]; mu = (0.25 + 1) / 2 = 0.625, weight 0.375² = 0.140625
    grpo = np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)
    np.testing.assert_allclose(got[:4], 0.140625 * grpo, rtol=1e-6)
    np.testing.assert_allclose(got[4:], _focal_by_loop([3, -1, 0.5], 2.0, 1.0, -1.0), rtol=1e-6)


def test_cli_refuses_equal_rewards(tmp_path) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", [rollout("a", 1.0), rollout("a", 0.0)])
    proc = run("annotate", log, "--method", "focal-grpo", "--reward-correct", "0", "--out",
               str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (b"advcli: error: --reward-correct 0.0 equals --reward-wrong: "
                           b"focal-grpo's success rate divides by their difference\n")  # fmt: skip
