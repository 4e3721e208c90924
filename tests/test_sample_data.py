"""sample_data/'s logs are what sample_data/generate.py writes, and health.parquet shows what
the README's health audit says it shows."""

from __future__ import annotations

import runpy

import numpy as np
import pyarrow.parquet as pq

from tests.conftest import SAMPLE


def test_the_sample_logs_are_what_their_script_writes(tmp_path):
    """The JSONL byte for byte; the Parquet files by content (their bytes depend on the version
    of pyarrow that wrote them)."""
    runpy.run_path(str(SAMPLE / "generate.py"))["write"](tmp_path)
    assert (tmp_path / "rollouts.jsonl").read_bytes() == (SAMPLE / "rollouts.jsonl").read_bytes()
    for name in ("rollouts.parquet", "health.parquet"):
        assert pq.read_table(tmp_path / name).equals(pq.read_table(SAMPLE / name)), name


def test_the_health_log_is_an_async_run_with_stale_rollouts_and_a_few_far_tokens():
    """3 steps of 4 prompts x 4 rollouts; staleness 0, 1 and 2; one all-correct group a step;
    the two longest responses truncated; a 0.5..2 token mask drops some tokens, a larger share
    of the staler rollouts'."""
    log = pq.read_table(SAMPLE / "health.parquet").to_pylist()
    assert len(log) == 48
    assert sorted({r["step"] for r in log}) == [1, 2, 3]
    assert sorted({r["step"] - r["version"] for r in log}) == [0, 1, 2]
    for step in (1, 2, 3):
        rewards = {p: {r["reward"] for r in log if r["step"] == step and r["prompt_id"] == p}
                   for p in {r["prompt_id"] for r in log}}  # fmt: skip
        assert [p for p, seen in rewards.items() if len(seen) == 1] == [f"{step}:p-easy"]
    lengths = [sum(r["action_mask"]) for r in log]
    truncated = [n for n, r in zip(lengths, log, strict=True) if r["truncated"]]
    assert len(truncated) == 2 and min(truncated) >= max(
        n for n, r in zip(lengths, log, strict=True) if not r["truncated"]
    )
    masked_share = {}
    for staleness in (0, 2):
        rows = [r for r in log if r["step"] - r["version"] == staleness]
        action = np.concatenate([np.array(r["action_mask"], bool) for r in rows])
        ratio = np.exp(
            np.concatenate([np.array(r["trainer_logprobs"], np.float64) for r in rows])
            - np.concatenate([np.array(r["logprobs"], np.float64) for r in rows])
        )
        masked_share[staleness] = np.mean((ratio[action] < 0.5) | (ratio[action] > 2))
    assert 0 < masked_share[0] < masked_share[2]
