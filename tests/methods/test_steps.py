"""The agent-step methods against their authors' own functions (``tests/fixtures/refs``:
verl-agent's ``compute_gigpo_outcome_advantage``, Trinity-RFT's ``GiGPOAdvantageFn`` and
``StepWiseGRPOAdvantageFn``, ROLL's pipeline for ``gigpo``, ``step_reinforce`` and
``agentic_reinforce``), a float64 loop of our own, worked examples and the real command."""

from __future__ import annotations

import os
from collections import defaultdict
from difflib import SequenceMatcher
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.core.steps import similar_states, step_returns, turn_returns
from advcli.errors import UsageError
from tests.conftest import run, write_jsonl
from tests.methods.refs import cases, ids

NORMS = {"identity": "none", "mean": "mean", "mean_std": "std", "asym_clip": "std"}


def _unique_trajectories(table: pa.Table) -> pa.Table:
    """verl-agent's and Trinity-RFT's trajectory ids are unique within a group only."""
    joined = pc.binary_join_element_wise(table["prompt_id"], table["rollout_id"], "/")
    return table.set_column(table.column_names.index("rollout_id"), "rollout_id", joined)


def _check(
    case: dict[str, Any], method: str, table: pa.Table, *, skip_off_action: bool = False,
    **options: Any,
) -> None:  # fmt: skip
    """The case's per-token advantages, to 1e-6 (and 2e-6 of their size: ROLL whitens twice
    in float32 in one case, which leaves 1.1e-6 of rounding on a value of 0.57).
    ``skip_off_action``: leave out the rows whose last token is not an action."""
    out = advcli.annotate_table(table, method=method, **options)
    expected = [e for e in case["expected"] if e is not None and e["advantages"] is not None]
    assert out.num_rows == len(expected)
    masks = out["action_mask"].to_pylist() if "action_mask" in out.column_names else None
    for i, (got, want) in enumerate(zip(out["advantages"].to_pylist(), expected, strict=True)):
        if skip_off_action and masks is not None and masks[i] and not masks[i][-1]:
            continue
        np.testing.assert_allclose(got, want["advantages"], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("case", cases("verl-agent", "compute_gigpo_outcome_advantage"),
                         ids=ids("verl-agent", "compute_gigpo_outcome_advantage"))  # fmt: skip
def test_gigpo_reproduces_verl_agent(case) -> None:
    p = case["params"]
    _check(case, "gigpo", _unique_trajectories(case["table"]), step_gamma=p["gamma"],
           step_weight=p["step_advantage_w"], eps=p["epsilon"],
           step_norm="mean" if p["mode"] == "mean_norm" else "std",
           similarity=p["similarity_thresh"] if p["enable_similarity"] else 0.0)  # fmt: skip


@pytest.mark.parametrize("case", cases("trinity", "GiGPOAdvantageFn"),
                         ids=ids("trinity", "GiGPOAdvantageFn"))  # fmt: skip
def test_gigpo_reproduces_trinity(case) -> None:
    p = case["params"]
    _check(case, "gigpo", _unique_trajectories(case["table"]), implementation="trinity",
           step_gamma=p["gamma"], step_weight=p["omega"], eps=p["epsilon"],
           step_norm="std" if p["fnorm"] == "std" else "mean")  # fmt: skip


@pytest.mark.parametrize("case", cases("trinity", "StepWiseGRPOAdvantageFn"),
                         ids=ids("trinity", "StepWiseGRPOAdvantageFn"))  # fmt: skip
def test_step_grpo_reproduces_trinity(case) -> None:
    p = case["params"]
    _check(case, "step-grpo", _unique_trajectories(case["table"]), eps=p["epsilon"],
           divide_by_steps=p["enable_step_norm"], std_threshold=p["std_threshold"],
           norm_scope=p["std_cal_level"])  # fmt: skip


def _roll(case: dict[str, Any], method: str) -> dict[str, Any]:
    """advcli's options for a ROLL case: its RewardNormalizationConfig after __post_init__
    (explicit mean and std types, else those of its method)."""
    p = case["params"]
    norm = p.get("reward_normalization", {"grouping": "batch", "method": "identity"})
    options = {
        "convention": "roll",
        "step_norm": NORMS[norm["method"]],
        # the fixtures' rows all carry one tag: grouping by tags is the batch
        "norm_scope": "group" if norm["grouping"] == "traj_group_id" else "batch",
        "reward_clip": p.get("reward_clip"),
        "norm_mean": norm.get("norm_mean_type") or "none",
        "norm_std": norm.get("norm_std_type") or "none",
        "advantage_clip": p["advantage_clip"],
    }
    options.update(whiten_rewards=p["whiten_rewards"], whiten_advantages=p["whiten_advantages"])
    if method == "agentic-reinforce":
        return {**options, "step_gamma": float(p["gamma"])}
    options.update(step_gamma=p["step_reward_gamma"], token_gamma=float(p["gamma"]))
    if method == "gigpo":
        options.update(episode_weight=p["episode_reward_weight"],
                       step_weight=p["step_reward_weight"])  # fmt: skip
    return options


ROLL = [("gigpo", "gigpo"), ("step_reinforce", "step-reinforce"),
        ("agentic_reinforce", "agentic-reinforce"),
        ("compute_agentic_reinforce_return", "agentic-reinforce"),
        ("step_reinforce_obs_tail", "step-reinforce"),
        ("agentic_reinforce_obs_tail", "agentic-reinforce")]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "method", "function"),
    [(case, method, function) for function, method in ROLL for case in cases("roll", function)],
    ids=[f"{function}-{name}" for function, _ in ROLL for name in ids("roll", function)],
)
def test_roll_methods_reproduce_roll(case, method, function) -> None:
    """The ``*_obs_tail`` cases are logs whose step rows end with the environment's reply
    after the action, their expected advantages ROLL's on the same steps as its own env
    managers lay them out (the reply dropped: it is the next step's prompt), so the step's
    reward is on the last action token. The older cases fed ROLL's functions a row that ends
    with observation tokens, a layout ROLL never writes, where the reward falls on a masked
    token: those rows are left out of them (and a case that whitens over the batch, whose
    statistics that reward enters, is left out whole)."""
    p = case["params"]
    ends_off = any(not r["action_mask"][-1] for r in case["rows"] if r["action_mask"])
    whitens = p.get("whiten_rewards") or p.get("whiten_advantages")
    if not function.endswith("_obs_tail") and ends_off and whitens:
        pytest.skip("a row ends with observation tokens, which ROLL never writes, and the "
                    "case whitens over the batch: the *_obs_tail cases cover it")  # fmt: skip
    _check(case, method, case["table"], skip_off_action=not function.endswith("_obs_tail"),
           **_roll(case, method))  # fmt: skip


@pytest.mark.parametrize("case", cases("roll", "compute_discounted_returns"),
                         ids=ids("roll", "compute_discounted_returns"))  # fmt: skip
def test_step_returns_reproduce_roll(case) -> None:
    if case["params"]["adv_estimator"] not in ("gigpo", "step_reinforce"):
        return  # ROLL computes none for other estimators
    t = case["table"]
    _, trajectories = np.unique(t["rollout_id"].to_numpy(zero_copy_only=False),
                                return_inverse=True)  # fmt: skip
    got = step_returns(t["step_reward"].to_numpy(), trajectories,
                       t["segment_index"].to_numpy(), case["params"]["gamma"])  # fmt: skip
    np.testing.assert_allclose(got, [e["advantage"] for e in case["expected"]], atol=1e-6)


def _gigpo_by_loop(rows, gamma, weight, norm, eps, similarity=0.0):
    """verl-agent's GiGPO, one step at a time, in float64."""
    by_traj = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[row["rollout_id"]].append(i)
    G = [0.0] * len(rows)
    for steps in by_traj.values():
        later = 0.0
        for i in sorted(steps, key=lambda i: -rows[i]["segment_index"]):
            later = rows[i]["step_reward"] + gamma * later
            G[i] = later

    def normed(indices, x, lone_raw):
        if len(indices) == 1:
            return {indices[0]: x[indices[0]] / ((1 + eps) if norm == "std" else 1) if lone_raw
                    else 0.0}  # fmt: skip
        values = [x[i] for i in indices]
        mean, std = np.mean(values), np.std(values, ddof=1)
        return {i: (x[i] - mean) / (std + eps) if norm == "std" else x[i] - mean for i in indices}

    returns = [row["reward"] for row in rows]
    episode, step = {}, {}
    for prompt in dict.fromkeys(row["prompt_id"] for row in rows):
        mine = [i for i, row in enumerate(rows) if row["prompt_id"] == prompt]
        episode.update(normed(mine, returns, True))
        clusters: list[list[int]] = []
        for i in mine:
            state = rows[i]["state"]
            for cluster in clusters:
                first = rows[cluster[0]]["state"]
                same = state == first if not similarity else (
                    SequenceMatcher(None, state, first).ratio() >= similarity)  # fmt: skip
                if same:
                    cluster.append(i)
                    break
            else:
                clusters.append([i])
        for cluster in clusters:
            step.update(normed(cluster, G, False))
    return [episode[i] + weight * step[i] for i in range(len(rows))]


@pytest.mark.parametrize("norm", ["mean", "std"])
def test_gigpo_matches_a_loop(norm) -> None:
    rng = np.random.default_rng(11)
    rows = []
    for g in range(6):
        for t in range(int(rng.integers(1, 5))):
            steps = int(rng.integers(1, 6))
            rewards = rng.choice([0.0, 0.5, 1.0], size=steps)
            for k in range(steps):
                rows.append({"prompt_id": f"p{g}", "rollout_id": f"p{g}/t{t}", "segment_index": k,
                             "state": f"s{int(rng.integers(0, 3))}", "step_reward": rewards[k],
                             "reward": float(rewards.sum()), "input_ids": [1, 2],
                             "action_mask": [1, 1]})  # fmt: skip
    rng.shuffle(rows)
    out = advcli.annotate_table(pa.Table.from_pylist(rows), method="gigpo", step_gamma=0.9,
                                step_weight=0.7, step_norm=norm)  # fmt: skip
    np.testing.assert_allclose(out["advantage"].to_numpy(),
                               _gigpo_by_loop(rows, 0.9, 0.7, norm, 1e-6), atol=1e-6)  # fmt: skip


def test_turn_returns_restart_in_each_row() -> None:
    got = turn_returns(np.array([1.0, 0.0, 2.0, 1.0]), np.array([2, 2]), 0.5, np.array([0, 4.0]))
    assert got.tolist() == [1.0, 0.0, 3.5, 3.0]


def _worked_rows() -> list[dict[str, Any]]:
    """Two trajectories of one group (the docstring of advcli.methods.steps)."""
    steps = [("a", 0, "s0", 0.0), ("a", 1, "s1", 1.0), ("b", 0, "s0", 0.0), ("b", 1, "s2", 0.0)]
    return [{"prompt_id": "q", "rollout_id": t, "segment_index": k, "state": s,
             "step_reward": r, "reward": 1.0 if t == "a" else 0.0, "input_ids": [5, 6, 7],
             "action_mask": [0, 1, 1]} for t, k, s, r in steps]  # fmt: skip


def test_worked_example_and_the_command(tmp_path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", _worked_rows())
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "gigpo", "--out", out)
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    assert table["advantage"].to_pylist() == [1.0, 0.5, -1.0, -0.5]
    assert table["advantages"].to_pylist()[1] == [0.0, 0.5, 0.5]
    assert table["step_return"].to_pylist() == [1.0, 1.0, 0.0, 0.0]
    assert table["no_step_signal"].to_pylist() == [False, True, False, True]
    assert b"steps with no signal" in proc.stdout + proc.stderr


def test_parquet_and_jsonl_agree(tmp_path) -> None:
    rows = _worked_rows()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "steps.parquet")
    write_jsonl(tmp_path / "steps.jsonl", rows)
    got = []
    for name in ("steps.parquet", "steps.jsonl"):
        out = tmp_path / f"{name}.out.parquet"
        proc = run("annotate", tmp_path / name, "--method", "step-reinforce", "--out", out,
                   "--convention", "roll")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        got.append(pq.read_table(out)["advantage"].to_pylist())
    # G = r + 0.95 G': a: [0.95, 1], b: [0, 0]
    np.testing.assert_allclose(got[0], [0.95, 1.0, 0.0, 0.0], atol=1e-7)
    assert got[0] == got[1]


def test_a_missing_state_is_one_line(tmp_path) -> None:
    rows = [{k: v for k, v in row.items() if k != "state"} for row in _worked_rows()]
    log = write_jsonl(tmp_path / "steps.jsonl", rows)
    proc = run("annotate", log, "--method", "gigpo", "--out", tmp_path / "out.parquet")
    assert proc.returncode != 0
    assert b"state" in proc.stderr and b"Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_options_of_another_implementation_are_refused() -> None:
    with pytest.raises(UsageError, match="^`similarity` applies to `implementation='verl-agent'`"):
        advcli.annotate_table(pa.Table.from_pylist(_worked_rows()), method="gigpo",
                              implementation="trinity", similarity=0.9)  # fmt: skip
    with pytest.raises(UsageError, match="`implementation='roll'`"):
        advcli.annotate_table(pa.Table.from_pylist(_worked_rows()), method="gigpo",
                              reward_clip=1.0)  # fmt: skip


def _verl_agent_clusters(texts: list[str], threshold: float) -> list[int]:
    """verl-agent's ``build_step_group``: each state to the first cluster whose first state's
    ratio to it reaches the threshold, every pair compared anew."""
    firsts: list[str] = []
    out = []
    for text in texts:
        same = (k for k, first in enumerate(firsts)
                if SequenceMatcher(None, text, first).ratio() >= threshold)  # fmt: skip
        match = next(same, len(firsts))
        firsts += [text] * (match == len(firsts))
        out.append(match)
    return out


@pytest.mark.parametrize("threshold", [0.3, 0.6, 0.8, 0.9, 0.97])
def test_similar_states_are_verl_agents_clusters(threshold) -> None:
    """The bound on shared characters only skips pairs that cannot match: the same clusters
    on edits of a few texts (any script, empty ones, and texts past SequenceMatcher's
    autojunk length of 200)."""
    rng = np.random.default_rng(int(threshold * 100))
    letters = list("abcde fgé漢😀")
    bases = ["".join(rng.choice(letters, int(n))) for n in (0, 5, 30, 260)]
    texts = []
    for _ in range(120):
        text = list(bases[int(rng.integers(0, len(bases)))])
        for _ in range(int(rng.integers(0, 4))):
            at = int(rng.integers(0, len(text) + 1))
            text[at : at + 1] = [] if text and rng.random() < 0.5 else [str(rng.choice(letters))]
        texts.append("".join(text))
    texts = list(dict.fromkeys(texts))  # distinct, as the method passes them
    assert similar_states(texts, threshold).tolist() == _verl_agent_clusters(texts, threshold)


def test_similarity_beyond_its_bound_of_states_is_refused(tmp_path, monkeypatch) -> None:
    """--similarity compares each distinct state of an episode group with every cluster's
    first: beyond ADVCLI_SIMILARITY_STATES of them (default 1,024) it is refused at the first
    state past the bound, as a quadratic time would be a hang."""
    rows = [{**row, "state": f"{row['state']} seen from {i}"}
            for i, row in enumerate(_worked_rows())]  # fmt: skip
    log = write_jsonl(tmp_path / "steps.jsonl", rows)
    env = {**os.environ, "ADVCLI_SIMILARITY_STATES": "3"}
    proc = run("annotate", log, "--method", "gigpo", "--similarity", "0.9", "--out",
               tmp_path / "o.parquet", env=env)  # fmt: skip
    assert proc.returncode == 1 and not (tmp_path / "o.parquet").exists()
    assert proc.stderr.decode().startswith(
        f"advcli: error: {log}: line 4, column 'state': its episode group has more than 3 "
        "distinct states, and --similarity compares each with the first state of every "
        "cluster it may join"
    )
    assert "Hint: raise ADVCLI_SIMILARITY_STATES (default 1,024)" in proc.stderr.decode()
    table = pa.Table.from_pylist(rows)
    monkeypatch.setenv("ADVCLI_SIMILARITY_STATES", "4")
    advcli.annotate_table(table, method="gigpo", similarity=0.9)
    monkeypatch.setenv("ADVCLI_SIMILARITY_STATES", "0")
    with pytest.raises(UsageError, match="^ADVCLI_SIMILARITY_STATES 0: expected a positive"):
        advcli.annotate_table(table, method="gigpo", similarity=0.9)


def test_agentic_reinforce_counts_the_turns_of_later_segments() -> None:
    whole: dict[str, Any] = {"prompt_id": "q", "rollout_id": "a", "reward": 1.0,
                             "input_ids": list(range(8)),
                             "action_mask": [0, 1, 1, 0, 1, 0, 1, 1]}  # fmt: skip
    cut = [{**whole, "segment_index": 0, "input_ids": whole["input_ids"][:5],
            "action_mask": whole["action_mask"][:5]},
           {**whole, "segment_index": 1, "input_ids": whole["input_ids"][5:],
            "action_mask": whole["action_mask"][5:]}]  # fmt: skip
    one = advcli.annotate_table(pa.Table.from_pylist([whole]), method="agentic-reinforce",
                                step_gamma=0.5)  # fmt: skip
    two = advcli.annotate_table(pa.Table.from_pylist(cut), method="agentic-reinforce",
                                step_gamma=0.5)  # fmt: skip
    # three turns: γ² = 0.25, γ = 0.5, then 1
    assert one["advantages"].to_pylist() == [[0, 0.25, 0.25, 0, 0.5, 0, 1, 1]]
    assert sum(two["advantages"].to_pylist(), []) == one["advantages"].to_pylist()[0]


def test_audit_counts_the_steps_with_no_signal(tmp_path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", _worked_rows())
    proc = run("audit", log, "--json")
    assert proc.returncode == 0, proc.stderr
    report = orjson.loads(proc.stdout)
    # s0 holds a step of each trajectory (returns 1 and 0); s1 and s2 are alone
    assert (report["steps"], report["state_groups"], report["singleton_state_groups"]) == (4, 3, 2)
    assert report["steps_without_signal"] == 2 and report["no_signal_step_share"] == 0.5
    shown = run("audit", log)
    assert b"steps with no signal" in shown.stdout


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"method": "gigpo"}, [1.0, 0.5, -1.0, -0.5]),
        ({"method": "gigpo", "convention": "roll"}, [1.95, 2.0, 0.0, 0.0]),
        ({"method": "gigpo", "implementation": "trinity"}, [1 / 1.000001, 0.5 / 1.000001,
                                                            -1 / 1.000001, -0.5 / 1.000001]),
        ({"method": "step-reinforce", "convention": "roll"}, [0.95, 1.0, 0.0, 0.0]),
        ({"method": "step-grpo"}, [0.5**0.5] * 2 + [-(0.5**0.5)] * 2),
        ({"method": "step-grpo", "divide_by_steps": True}, [0.5**1.5] * 2 + [-(0.5**1.5)] * 2),
    ],
)  # fmt: skip
def test_the_readme_worked_examples(options, expected) -> None:
    out = advcli.annotate_table(pa.Table.from_pylist(_worked_rows()), **options)
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=0, atol=2e-6)


def test_turn_rewards_in_one_row_land_on_each_turns_last_token(tmp_path) -> None:
    """Three turns, rewards [0.5, 0, 2] and outcome 1, γ = 0.5, no normalisation (one
    trajectory): G_2 = 2 + 1 = 3 (the outcome on the last turn), G_1 = 0 + 0.5·3 = 1.5,
    G_0 = 0.5 + 0.5·1.5 = 1.25."""
    row = {"prompt_id": "q", "rollout_id": "a", "reward": 1.0, "input_ids": list(range(8)),
           "action_mask": [0, 1, 1, 0, 1, 0, 1, 1], "turn_rewards": [0.5, None, 2.0]}  # fmt: skip
    out = advcli.annotate_table(pa.Table.from_pylist([row]), method="agentic-reinforce",
                                step_gamma=0.5)  # fmt: skip
    assert out["advantages"].to_pylist() == [[0, 1.25, 1.25, 0, 1.5, 0, 3, 3]]
    as_tokens = {**row, "token_rewards": [0, 0, 0.5, 0, 0, 0, 0, 2.0]}
    del as_tokens["turn_rewards"]
    same = advcli.annotate_table(pa.Table.from_pylist([as_tokens]), method="agentic-reinforce",
                                 step_gamma=0.5)  # fmt: skip
    assert same["advantages"] == out["advantages"]
    log = write_jsonl(tmp_path / "turns.jsonl", [{**row, "turn_rewards": [0.5, 2.0]}])
    proc = run("annotate", log, "--method", "agentic-reinforce", "-o", tmp_path / "out.parquet")
    assert proc.returncode == 1, proc.stderr
    assert (
        proc.stderr.decode()
        .strip()
        .endswith(
            "turns.jsonl: line 1, column 'turn_rewards': 2 turn rewards but the row has 3 turns. "
            "Hint: give one reward per action span (turn), in order"
        )
    )
