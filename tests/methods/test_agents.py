"""``hierarchical-grpo`` and ``rae`` against prime-rl's own ``HierarchicalGRPOAlgorithm`` and
``RAEAlgorithm`` (``score_group`` run unchanged, ``tests/fixtures/refs/prime-rl``), worked
examples and the real command."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.methods.agents import moving_baselines
from tests.conftest import ROOT, run, write_jsonl
from tests.methods.refs import cases, ids


def _table(case) -> pa.Table:
    """The fixture's traces as a log: prime-rl's episode id as ``episode``, and the traces it
    skips (not ok, not trainable, no sampled token) as rollouts without a reward."""
    table = case["table"]
    rows = table.to_pylist()
    skipped = [r.get("ok") is False or r.get("trainable") is False or not any(r["action_mask"])
               for r in rows]  # fmt: skip
    keep = [n for n in table.column_names if n not in ("ok", "trainable", "episode_id")]
    return (table.select(keep)
            .append_column("episode", table.column("episode_id"))
            .append_column("unscored", pa.array(skipped)))  # fmt: skip


def _expected(case) -> list[float]:
    return [0.0 if e["advantage"] is None else e["advantage"] for e in case["expected"]]


@pytest.mark.parametrize("case", cases("prime-rl", "hierarchical_grpo"),
                         ids=ids("prime-rl", "hierarchical_grpo"))  # fmt: skip
def test_hierarchical_grpo_reproduces_prime_rl(case) -> None:
    scoped = ",".join(case["params"]["episode_agents"])
    out = advcli.annotate_table(_table(case), method="hierarchical-grpo", episode_agents=scoped)
    np.testing.assert_allclose(out["advantage"].to_numpy(), _expected(case), rtol=0, atol=1e-7)


@pytest.mark.parametrize("case", cases("prime-rl", "rae"), ids=ids("prime-rl", "rae"))
def test_rae_reproduces_prime_rl(case) -> None:
    out = advcli.annotate_table(_table(case), method="rae",
                                baseline_decay=case["params"]["decay"])  # fmt: skip
    np.testing.assert_allclose(out["advantage"].to_numpy(), _expected(case), rtol=0, atol=1e-7)


def _rae_by_loop(rewards, agents, decay):
    baselines: dict[str, float] = {}
    out = []
    for r, a in zip(rewards, agents, strict=True):
        b = baselines.get(a, 0.0)
        out.append(r - b)
        baselines[a] = decay * b + (1 - decay) * r
    return out


def test_moving_baselines_match_a_loop() -> None:
    rng = np.random.default_rng(5)
    rewards, agents = rng.normal(size=300), rng.integers(0, 4, 300)
    got = rewards - moving_baselines(rewards, agents, 0.9)
    np.testing.assert_allclose(got, _rae_by_loop(rewards.tolist(), agents.tolist(), 0.9),
                               rtol=0, atol=1e-12)  # fmt: skip


def test_worked_examples_and_the_command(tmp_path) -> None:
    rows = [
        {"prompt_id": "t", "episode": "e0", "agent": "proposer", "reward": 0.6},
        {"prompt_id": "t", "episode": "e0", "agent": "solver", "reward": 1.0},
        {"prompt_id": "t", "episode": "e0", "agent": "solver", "reward": 0.0},
        {"prompt_id": "t", "episode": "e0", "agent": "solver", "reward": 0.0},
        {"prompt_id": "t", "episode": "e1", "agent": "proposer", "reward": 0.2},
    ]
    for row in rows:
        row.update(input_ids=[1, 2], action_mask=[0, 1])
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "hierarchical-grpo", "--episode-agents", "solver",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = pq.read_table(out)["advantage"].to_numpy()
    np.testing.assert_allclose(got, [0.2, 2 / 3, -1 / 3, -1 / 3, -0.2], rtol=1e-6)
    proc = run("annotate", log, "--method", "rae", "--baseline-decay", "0.5", "--out",
               str(tmp_path / "rae.parquet"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = pq.read_table(tmp_path / "rae.parquet")["advantage"].to_numpy()
    # proposer: 0.6 − 0, then b = 0.3: 0.2 − 0.3; solver: 1 − 0, 0 − 0.5, 0 − 0.25
    np.testing.assert_allclose(got, [0.6, 1.0, -0.5, -0.25, -0.1], rtol=1e-6)
    no_agent = write_jsonl(tmp_path / "plain.jsonl", [
        {k: v for k, v in r.items() if k != "agent"} for r in rows])  # fmt: skip
    proc = run("annotate", no_agent, "--method", "rae", "--out", str(tmp_path / "x.parquet"))
    assert proc.returncode == 1 and proc.stderr.count(b"\n") == 1
    assert b"no 'agent' column" in proc.stderr


def test_an_unknown_episode_agent_is_one_line(tmp_path) -> None:
    rows = [{"prompt_id": "t", "episode": "e0", "agent": a, "reward": r, "input_ids": [1],
             "action_mask": [1]} for a, r in (("solver", 1.0), ("solver", 0.0))]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "hierarchical-grpo", "--episode-agents", "solvr",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (b"advcli: error: --episode-agents: no rollout of agent 'solvr' in the "
                           b"log. Hint: its agents are solver\n")  # fmt: skip


def test_prime_rl_traces_carry_their_agent_and_episode(tmp_path) -> None:
    """``--from prime-rl`` reads ``trace.agent.name`` and the episode's id; one agent per
    group, hierarchical-grpo is R − the group's mean, as dr-grpo."""
    dump = str(ROOT / "tests" / "fixtures" / "real" / "prime-rl" / "default")
    got = {}
    for method in ("hierarchical-grpo", "dr-grpo"):
        out = tmp_path / f"{method}.parquet"
        proc = run("annotate", "--from", "prime-rl", dump, "--method", method, "--out", out)
        assert proc.returncode == 0, proc.stderr.decode()
        got[method] = pq.read_table(out)
    table = got["hierarchical-grpo"]
    assert set(table["agent"].to_pylist()) == {"agent"}
    assert None not in table["episode"].to_pylist()
    np.testing.assert_allclose(table["advantage"].to_numpy(),
                               got["dr-grpo"]["advantage"].to_numpy(), atol=1e-7)  # fmt: skip
