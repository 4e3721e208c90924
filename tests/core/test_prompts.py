"""Each prompt's history from flat per-rollout arrays: a worked example by hand, and random
runs against a float64 loop over the rollouts; the run view's reward quantiles per step and
the prompts moving most between steps."""

from __future__ import annotations

import numpy as np
import pytest

from advcli.core.prompts import (
    REWARD_QUANTILES,
    default_success,
    largest_moves,
    prompt_stats,
    selected,
    step_quantiles,
)


def test_a_worked_example():
    """Prompt 0 at steps 1, 2, 3 with rewards [1, 0], [0, 0], [1, 1]; prompt 1 at step 2 with
    [0, 0, 0]; prompt 2 has no rollout. A rollout passes at reward >= 1."""
    prompt = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1])
    step = np.array([1, 1, 2, 2, 3, 3, 2, 2, 2], dtype=np.float64)
    reward = np.array([1, 0, 0, 0, 1, 1, 0, 0, 0], dtype=np.float64)
    s = prompt_stats(prompt, step, reward, 1.0, 3)
    assert s.rollouts.tolist() == [6, 3, 0]
    assert s.passes.tolist() == [3, 0, 0]
    assert s.pass_rate.tolist() == [0.5, 0.0, 0.0]
    assert s.mean_reward[:2].tolist() == [0.5, 0.0] and np.isnan(s.mean_reward[2])
    assert s.reward_variance[:2].tolist() == [0.25, 0.0]
    assert s.steps_seen.tolist() == [3, 1, 0]
    assert s.zero_variance_steps.tolist() == [2, 1, 0]  # [0, 0] and [1, 1]; [0, 0, 0]
    assert s.first_solved_step[0] == 1 and s.last_solved_step[0] == 3
    assert np.isnan(s.first_solved_step[1:]).all() and np.isnan(s.last_solved_step[1:]).all()
    assert s.forgotten.tolist() == [True, False, False]  # solved at 1, failed at 2
    assert s.always_solved.tolist() == [False, False, False]
    # rates 0.5, 0, 1 at steps 1, 2, 3: s̄ = 2, ȳ = 0.5, slope = (−1·0 + 0 + 1·0.5) / 2
    assert s.trend[0] == 0.25 and np.isnan(s.trend[1:]).all()
    assert s.cells.prompt.tolist() == [0, 0, 0, 1]
    assert s.cells.step.tolist() == [1, 2, 3, 2]
    assert s.cells.pass_rate.tolist() == [0.5, 0.0, 1.0, 0.0]
    assert selected(s).tolist() == [True, True, False]  # a prompt without rollouts: none
    assert selected(s, band=(0.5, 0.5)).tolist() == [True, False, False]
    assert selected(s, never_solved=True).tolist() == [False, True, False]
    assert selected(s, forgotten=True).tolist() == [True, False, False]
    assert selected(s, min_steps=2).tolist() == [True, False, False]


def test_default_success_is_the_higher_of_two_rewards():
    assert default_success(np.array([0.0, 1.0, 1.0, 0.0])) == 1.0
    assert default_success(np.array([-1.0, 1.0])) == 1.0
    assert default_success(np.array([0.0, 0.5, 1.0])) is None
    assert default_success(np.array([1.0, 1.0])) is None


@pytest.mark.parametrize("seed", range(5))
def test_random_runs_equal_a_float64_loop(seed):
    rng = np.random.default_rng(seed)
    n, n_prompts = 400, 30
    prompt = rng.integers(0, n_prompts, n)
    step = rng.integers(0, 6, n).astype(np.float64) * 10
    reward = rng.choice([0.0, 0.5, 1.0], n)
    s = prompt_stats(prompt, step, reward, 0.5, n_prompts, tol=0.0)
    for p in range(n_prompts):
        mine = prompt == p
        if not mine.any():
            assert s.rollouts[p] == 0
            continue
        r = reward[mine].tolist()
        mean = sum(r) / len(r)
        assert s.mean_reward[p] == pytest.approx(mean, rel=1e-12)
        assert s.reward_variance[p] == pytest.approx(
            sum((x - mean) ** 2 for x in r) / len(r), rel=1e-12, abs=1e-15
        )
        steps = sorted(set(step[mine].tolist()))
        rate = {t: float(np.mean(reward[mine & (step == t)] >= 0.5)) for t in steps}
        solved = [t for t in steps if rate[t] > 0]
        assert s.steps_seen[p] == len(steps)
        assert s.first_solved_step[p] == (
            min(solved) if solved else pytest.approx(np.nan, nan_ok=True)
        )
        assert s.forgotten[p] == (
            bool(solved) and any(rate[t] == 0 and t > solved[0] for t in steps)
        )
        assert s.always_solved[p] == (len(solved) == len(steps))
        if len(steps) >= 2:
            mx, my = np.mean(steps), np.mean(list(rate.values()))
            slope = sum((t - mx) * (rate[t] - my) for t in steps) / sum(
                (t - mx) ** 2 for t in steps
            )
            assert s.trend[p] == pytest.approx(slope, rel=1e-12, abs=1e-15)
        zero = sum(
            (mine & (step == t)).sum() >= 2 and np.ptp(reward[mine & (step == t)]) == 0
            for t in steps
        )
        assert s.zero_variance_steps[p] == zero


def test_step_quantiles_by_hand():
    """Step 0: rewards 3, 1, 2, 0 (ascending 0 1 2 3); step 1: 5; step 2: none."""
    step = np.array([0, 0, 1, 0, 0])
    reward = np.array([3.0, 1.0, 5.0, 2.0, 0.0])
    got = step_quantiles(step, reward, 3, (0.1, 0.5, 0.9))
    # step 0: h = 0.3, 1.5, 2.7 → 0 + 0.3·1, 1 + 0.5·1, 2 + 0.7·1
    assert got[0] == pytest.approx([0.3, 1.5, 2.7], abs=1e-15)
    assert got[1].tolist() == [5.0, 5.0, 5.0]
    assert np.isnan(got[2]).all()
    assert np.isnan(step_quantiles(np.zeros(0, np.int64), np.zeros(0), 2, (0.5,))).all()


@pytest.mark.parametrize("seed", range(5))
def test_step_quantiles_equal_numpys_per_step(seed):
    rng = np.random.default_rng(seed)
    step = rng.integers(0, 7, 300)
    reward = rng.normal(size=300).round(1)  # ties among the rewards
    got = step_quantiles(step, reward, 8, REWARD_QUANTILES)
    for s in range(7):
        assert got[s] == pytest.approx(np.quantile(reward[step == s], REWARD_QUANTILES), rel=1e-12)
    assert np.isnan(got[7]).all()


def test_largest_moves_by_hand():
    """Prompt 0: rates 0.5, 0, 1 at steps 1, 2, 3 (moves −0.5, +1); prompt 1: 0 at step 2
    only (no move); prompt 2: 1, 0.5 at steps 1, 3 (−0.5); prompt 3: 0, 0.5, 0 (+0.5 then
    −0.5: the earlier)."""
    prompt = np.repeat([0, 0, 0, 1, 2, 2, 3, 3, 3], 2)
    step = np.repeat([1, 2, 3, 2, 1, 3, 1, 2, 3], 2).astype(np.float64)
    reward = np.array([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0], dtype=np.float64)
    cells = prompt_stats(prompt, step, reward, 1.0, 4).cells
    moves = largest_moves(cells, cells.pass_rate)
    assert moves.prompt.tolist() == [0, 2, 3]  # |+1| first; |−0.5| and |+0.5|: the lower prompt
    assert moves.change.tolist() == [1.0, -0.5, 0.5]
    assert cells.step[moves.before].tolist() == [2, 1, 1]
    assert cells.step[moves.after].tolist() == [3, 3, 2]


@pytest.mark.parametrize("seed", range(5))
def test_largest_moves_equal_a_loop(seed):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 25, 300)
    step = rng.integers(0, 5, 300).astype(np.float64)
    reward = rng.choice([0.0, 1.0], 300)
    stats = prompt_stats(prompt, step, reward, 1.0, 25)
    moves = largest_moves(stats.cells, stats.cells.mean_reward)
    want = {}
    for p in range(25):
        by = {}
        for s in sorted(set(step[prompt == p].tolist())):
            rewards = reward[(prompt == p) & (step == s)].tolist()
            by[s] = sum(rewards) / len(rewards)
        pairs = list(zip(list(by)[:-1], list(by)[1:], strict=True))
        if pairs:
            a, b = max(pairs, key=lambda ab: abs(by[ab[1]] - by[ab[0]]))  # the first of equals
            want[p] = (a, b, by[b] - by[a])
    cells = stats.cells
    got = {
        int(p): (cells.step[i], cells.step[j], c)
        for p, i, j, c in zip(moves.prompt, moves.before, moves.after, moves.change, strict=True)
    }
    assert got.keys() == want.keys()
    for p, (a, b, change) in want.items():
        assert got[p][:2] == (a, b) and got[p][2] == pytest.approx(change, rel=1e-12)
    assert np.all(np.diff(np.abs(moves.change)) <= 0)
