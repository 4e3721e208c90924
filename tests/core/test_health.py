"""The health figures against float64 loops of their own and hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np

from advcli.core import health as H


def pearson_loop(x: list[float], y: list[float]) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    vx = sum((a - mx) ** 2 for a in x)
    vy = sum((b - my) ** 2 for b in y)
    return cov / math.sqrt(vx * vy)


def test_within_group_correlation_matches_a_loop_and_counts_only_varying_groups():
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(6), 5)
    length = rng.integers(1, 50, len(codes)).astype(np.float64)
    reward = rng.random(len(codes))
    length[codes == 2] = 7.0  # no length spread: left out
    reward[codes == 4] = 1.0  # no reward spread: left out
    mean, counted = H.within_group_correlation(length, reward, codes, 7)  # group 6 is empty
    per_group = [
        pearson_loop(length[codes == g].tolist(), reward[codes == g].tolist()) for g in (0, 1, 3, 5)
    ]
    assert counted == 4
    assert mean is not None and abs(mean - sum(per_group) / 4) < 1e-12


def test_correlation_by_hand():
    # one group: lengths 1, 2, 3 and rewards 0, 0, 1: cov 1, var 2 and 2/3, r = 1/sqrt(4/3)
    mean, counted = H.within_group_correlation(
        np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0]), np.zeros(3, dtype=np.int64), 1
    )
    assert counted == 1 and mean is not None and abs(mean - math.sqrt(3) / 2) < 1e-15


def test_staleness_by_hand():
    # two groups of three; lags 0 0 2 | 1 1 1
    lag = np.array([0, 0, 2, 1, 1, 1])
    reward = np.array([1.0, 0.0, 1.0, 0.5, 0.5, 0.0])
    length = np.array([10.0, 20.0, 30.0, 4.0, 5.0, 6.0])
    advantage = np.array([1.0, -1.0, 1.0, np.nan, 0.5, -0.5])
    mixed = np.array([False, False, True, False, False, False])
    codes = np.array([0, 0, 0, 1, 1, 1])
    s = H.staleness(lag, mixed, reward, length, advantage, codes, 2)
    assert s["lag_histogram"] == {"0": 2, "1": 3, "2": 1}
    assert s["mean_lag"] == 5 / 6 and s["max_lag"] == 2 and s["rollouts"] == 6
    assert s["mixed_version_share"] == 1 / 6
    assert s["by_lag"]["0"] == {"reward_mean": 0.5, "length_mean": 15.0, "advantage_mean": 0.0}
    assert s["by_lag"]["1"] == {"reward_mean": 1 / 3, "length_mean": 5.0, "advantage_mean": 0.0}
    assert s["by_lag"]["2"]["advantage_mean"] == 1.0
    assert s["max_staleness"] == {
        "0": {"rollouts_dropped": 4, "groups_broken": 2},
        "1": {"rollouts_dropped": 1, "groups_broken": 1},
        "2": {"rollouts_dropped": 0, "groups_broken": 0},
    }


def test_lengths_by_hand():
    length = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    truncated = np.array([False, False, False, False, True])
    reward = np.array([0.0, 0.0, 1.0, 1.0, 0.0])
    codes = np.array([0, 0, 0, 1, 1])
    out = H.lengths(length, truncated, reward, codes, 2)
    # p90: numpy's linear interpolation, 4 + 0.6 x (10 - 4)
    assert out["length"] == {"mean": 4.0, "p50": 3.0, "p90": out["length"]["p90"], "max": 10.0}
    assert abs(out["length"]["p90"] - 7.6) < 1e-12
    assert out["group_mean_length"]["mean"] == (2.0 + 7.0) / 2
    assert out["truncated_rollouts"] == 1 and out["truncated_share"] == 0.2
    assert out["groups_with_truncated_share"] == 0.5
    # group 0: r = sqrt(3)/2; group 1: lengths 4, 10 and rewards 1, 0: r = -1
    assert out["correlation_groups"] == 2
    assert abs(out["length_reward_correlation"] - (math.sqrt(3) / 2 - 1) / 2) < 1e-15


def test_entropy_by_hand():
    out = H.entropy(np.array([3.0, 0.0, 1.0]), np.array([3.0, 0.0, 1.0]), 2, 0.5)
    assert out["token_mean"] == 1.0 and out["action_tokens"] == 4
    assert out["rollout_mean"]["mean"] == 1.0  # the rollout without action tokens is left out
    assert out["high_entropy_token_share"] == 0.5


def test_advisories_fire_past_their_bounds_only():
    assert H.advisories(0.5, 0.25, 1.0, [0.05]) == {}
    fired = H.advisories(0.51, 0.3, 1.5, [0.04])
    assert set(fired) == {"zero-variance", "truncated", "stale", "entropy-collapse"}
    dropped = H.advisories(0.0, None, None, [1.0, 2.0, 1.0, 0.4])
    assert (
        set(dropped) == {"entropy-collapse"} and "2.0000 to 0.4000" in dropped["entropy-collapse"]
    )
    assert set(H.ADVISORY_NAMES) >= {"k3", "masked-share"}
