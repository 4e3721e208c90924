"""audit.audit on small hand-built logs."""

from __future__ import annotations

import numpy as np
import pytest

from advcli.core.audit import audit
from advcli.core.group import group_stats

# group: rewards, action tokens per rollout
LOG = [
    ([1.0, 1.0, 1.0], [10, 20, 30]),  # zero-variance, all correct
    ([0.0, 0.0], [5, 5]),  # zero-variance, all wrong
    ([0.5, 0.5], [1, 1]),  # zero-variance, other
    ([1.0, 0.0, 1.0], [4, 4, 4]),  # signal
    ([1.0], [7]),  # singleton
    ([0.0, 1.0], [2, 3]),  # signal
]


def _flatten(log, perm=None):
    rewards = np.array([r for rs, _ in log for r in rs])
    tokens = np.array([t for _, ts in log for t in ts])
    codes = np.array([g for g, (rs, _) in enumerate(log) for _ in rs], dtype=np.int64)
    if perm is not None:
        rewards, tokens, codes = rewards[perm], tokens[perm], codes[perm]
    return rewards, codes, tokens


def _audit(rewards, codes, tokens, n_groups=None, **kw):
    n_groups = int(codes.max()) + 1 if n_groups is None else n_groups
    stats = group_stats(rewards, codes, n_groups, ddof=0, tol=1e-9)
    return audit(rewards, codes, stats, tokens, **kw)


def test_audit_hand_built_log():
    rep = _audit(*_flatten(LOG), bins=2)
    assert rep.groups == 6
    assert rep.rollouts == 13
    assert rep.action_tokens == 96
    assert rep.zero_variance_groups == 3
    assert rep.zero_variance_all_correct == 1
    assert rep.zero_variance_all_wrong == 1
    assert rep.zero_variance_other == 1
    assert rep.singleton_groups == 1
    assert rep.zero_variance_rollouts == 7
    assert rep.singleton_rollouts == 1
    assert rep.no_signal_rollout_share == pytest.approx(8 / 13)
    assert rep.no_signal_action_token_share == pytest.approx((60 + 10 + 2 + 7) / 96)
    assert rep.zero_variance_rollout_share == pytest.approx(7 / 13)
    assert rep.group_sizes == {1: 1, 2: 3, 3: 2}
    assert rep.reward_histogram == [(0.0, 0.5, 4), (0.5, 1.0, 9)]


def test_audit_row_order_does_not_matter():
    base = _audit(*_flatten(LOG))
    perm = np.random.default_rng(0).permutation(13)
    assert _audit(*_flatten(LOG, perm)) == base


def test_audit_zero_variance_within_tol():
    rep = _audit(*_flatten([([1.0, 1.0 + 1e-12], [1, 1]), ([0.0, 1.0], [1, 1])]))
    assert rep.zero_variance_groups == 1 and rep.zero_variance_all_correct == 1


@pytest.mark.parametrize("value,correct", [(1.0, 1), (0.0, 0), (-1.0, 0)])
def test_audit_every_reward_equal(value, correct):
    rep = _audit(*_flatten([([value] * 2, [3, 3]), ([value] * 3, [1, 1, 1]), ([value], [4])]))
    assert rep.zero_variance_groups == 2
    assert rep.zero_variance_all_correct == 2 * correct
    assert rep.zero_variance_all_wrong == 2 * (1 - correct)
    assert rep.zero_variance_other == 0
    assert rep.singleton_groups == 1
    assert rep.no_signal_rollout_share == 1.0
    assert rep.no_signal_action_token_share == 1.0
    [(lo, hi, count)] = rep.reward_histogram  # one bin, around the common value
    assert lo <= value < hi and count == 6


def test_audit_unused_group_codes_and_no_tokens():
    rewards = np.array([1.0, 0.0])
    codes = np.array([2, 2], dtype=np.int64)
    rep = _audit(rewards, codes, np.array([0, 0]), n_groups=4)
    assert rep.groups == 1
    assert rep.group_sizes == {2: 1}
    assert rep.action_tokens == 0
    assert rep.no_signal_action_token_share == 0.0
    assert rep.zero_variance_groups == 0 and rep.singleton_groups == 0


def test_audit_empty_log():
    empty = np.zeros(0)
    rep = _audit(empty, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), n_groups=0)
    assert rep.rollouts == 0 and rep.groups == 0 and rep.action_tokens == 0
    assert rep.no_signal_rollout_share == 0.0
    assert rep.group_sizes == {} and rep.reward_histogram == []


def test_near_ties_by_hand():
    # range 0..1, so the default threshold is 0.05 (population std).
    log = [
        ([0.50, 0.52], [3, 3]),  # std 0.01: a near-tie
        ([0.0, 0.1], [2, 2]),  # std 0.05: not below 0.05
        ([0.9, 0.9], [1, 1]),  # zero-variance, never a near-tie
        ([1.0], [4]),  # singleton, never a near-tie
        ([0.0, 1.0, 0.98], [5, 5, 5]),  # signal
    ]
    rep = _audit(*_flatten(log))
    assert rep.near_tie_std_below == pytest.approx(0.05)
    assert (rep.near_tie_groups, rep.near_tie_rollouts) == (1, 2)
    rep = _audit(*_flatten(log), near_tie=0.06)  # std 0.05 is now below
    assert (rep.near_tie_groups, rep.near_tie_rollouts) == (2, 4)
    rep = _audit(*_flatten(log), near_tie=0.0)
    assert rep.near_tie_groups == 0
