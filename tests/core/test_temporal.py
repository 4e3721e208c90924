"""Temporal estimators (td, mc, gae, returns), reward placement, step layouts and whitening."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advcli.core import temporal as T
from advcli.core.conventions import WHITEN_EPS
from advcli.core.ragged import offsets_from_lengths
from tests.core import reference as ref

METHODS = ["td", "mc", "gae", "returns"]


def run_core(
    method,
    mask,
    values,
    rewards,
    offsets,
    *,
    gamma,
    lam=1.0,
    next_value=None,
    next_advantage=None,
    observations="skip",
):
    """Per-token output through the core: step layout, gathered step arrays, estimator, scatter.

    ``rewards`` are per token and already placed on action tokens.
    """
    mask = np.asarray(mask, dtype=bool)
    n_rows = len(offsets) - 1
    pos, step_offsets = T.step_positions(mask, offsets, observations)
    is_action = mask[pos]
    v = np.where(is_action, np.asarray(values, dtype=np.float64)[pos], 0.0)
    r = np.asarray(rewards, dtype=np.float64)[pos]
    nv = np.zeros(n_rows) if next_value is None else np.asarray(next_value, dtype=np.float64)
    kw = {"gamma": gamma, "next_value": nv}
    if method == "td":
        adv = T.td_errors(v, r, step_offsets, **kw)
    elif method == "mc":
        adv = T.monte_carlo(v, r, step_offsets, **kw)
    elif method == "gae":
        adv = T.gae(v, r, step_offsets, lam=lam, next_advantage=next_advantage, **kw)
    else:
        adv = T.discounted_returns(r, step_offsets, **kw)
    out = np.zeros(len(mask))
    out[pos[is_action]] = adv[is_action]
    return out


def assert_f32(actual, expected, atol=1e-5):
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float32),
        np.asarray(expected, dtype=np.float32),
        rtol=0,
        atol=atol,
    )


# ---------------------------------------------------------------------------------------------
# Seed example: actions u, b, d; V = [0.2, 0.6, 0.4]; reward 1 at the end; gamma = 1

SEED_V = np.array([0.2, 0.6, 0.4])
SEED_R = np.array([0.0, 0.0, 1.0])
ONE_ROW = np.array([0, 3])
TERMINATED = np.zeros(1)


def test_seed_mc():
    out = T.monte_carlo(SEED_V, SEED_R, ONE_ROW, gamma=1.0, next_value=TERMINATED)
    assert_f32(out, [0.8, 0.4, 0.6], atol=1e-6)


def test_seed_td():
    out = T.td_errors(SEED_V, SEED_R, ONE_ROW, gamma=1.0, next_value=TERMINATED)
    assert_f32(out, [0.4, -0.2, 0.6], atol=1e-6)


def test_seed_gae_lambda_one_equals_mc():
    out = T.gae(SEED_V, SEED_R, ONE_ROW, gamma=1.0, lam=1.0, next_value=TERMINATED)
    assert_f32(out, [0.8, 0.4, 0.6], atol=1e-6)


def test_seed_gae_lambda_zero_equals_td():
    out = T.gae(SEED_V, SEED_R, ONE_ROW, gamma=1.0, lam=0.0, next_value=TERMINATED)
    assert_f32(out, [0.4, -0.2, 0.6], atol=1e-6)


def test_seed_with_observation_span_skip():
    # u, obs, obs, b, obs, d: the observation values are never read, no discount across them
    mask = np.array([1, 0, 0, 1, 0, 1], dtype=bool)
    values = np.array([0.2, 99.0, -99.0, 0.6, 5.0, 0.4])
    rewards = np.array([0, 0, 0, 0, 0, 1.0])
    offsets = np.array([0, 6])
    mc = run_core("mc", mask, values, rewards, offsets, gamma=1.0)
    td = run_core("td", mask, values, rewards, offsets, gamma=1.0)
    assert_f32(mc, [0.8, 0, 0, 0.4, 0, 0.6], atol=1e-6)
    assert_f32(td, [0.4, 0, 0, -0.2, 0, 0.6], atol=1e-6)
    assert (mc[~mask] == 0.0).all() and (td[~mask] == 0.0).all()


def test_gae_by_hand_with_discount_bootstrap_and_carry():
    v = np.array([0.5, 0.25])
    r = np.array([0.0, 1.0])
    g, lam = 0.9, 0.5
    # truncated: V_next after the last step is 2.0; next_advantage 0.4
    d1 = 1.0 + g * 2.0 - 0.25
    d0 = 0.0 + g * 0.25 - 0.5
    a1 = d1 + g * lam * 0.4
    a0 = d0 + g * lam * a1
    out = T.gae(
        v,
        r,
        np.array([0, 2]),
        gamma=g,
        lam=lam,
        next_value=np.array([2.0]),
        next_advantage=np.array([0.4]),
    )
    np.testing.assert_allclose(out, [a0, a1], rtol=1e-12)
    ret = T.discounted_returns(r, np.array([0, 2]), gamma=g, next_value=np.array([2.0]))
    np.testing.assert_allclose(ret, [g * (1 + g * 2.0), 1 + g * 2.0], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Reward placement and step layout


def test_place_rewards_by_hand():
    # row 0: obs a obs a obs ; row 1: obs obs ; row 2: a obs ; row 3: empty
    mask = np.array([0, 1, 0, 1, 0, 0, 0, 1, 0], dtype=bool)
    offsets = np.array([0, 5, 7, 9, 9])
    token = np.zeros(9)
    token[2] = 0.5  # observation after the first action: moves to token 1
    token[4] = 0.25  # trailing observation: moves to the last action, token 3
    token[8] = 2.0  # row 2: moves to token 7
    outcome = np.array([1.0, 0.0, 3.0, 0.0])
    rewards, moved, orphaned = T.place_rewards(mask, offsets, outcome, token)
    np.testing.assert_array_equal(rewards, [0, 0.5, 0, 1.25, 0, 0, 0, 5.0, 0])
    assert moved.tolist() == [True, False, True, False]
    assert orphaned.tolist() == [False, False, False, False]


def test_place_rewards_orphans():
    mask = np.array([0, 1, 0, 0, 1], dtype=bool)
    offsets = np.array([0, 2, 3, 5])
    token = np.array([0.7, 0.0, 0.0, 0.0, 0.0])  # before row 0's first action
    rewards, moved, orphaned = T.place_rewards(mask, offsets, np.array([1.0, 1.0, 0.0]), token)
    # row 0: token reward orphaned (left out), outcome on token 1
    # row 1: no action token, outcome 1 orphaned; row 2: token reward 0 -> nothing
    np.testing.assert_array_equal(rewards, [0, 1.0, 0, 0, 0])
    assert orphaned.tolist() == [True, True, False]
    assert moved.tolist() == [False, False, False]
    # a stray reward must not cross into the previous row's action
    token = np.array([0.0, 0.0, 0.0, 0.3, 0.0])
    rewards, moved, orphaned = T.place_rewards(mask, offsets, None, token)
    np.testing.assert_array_equal(rewards, [0, 0, 0, 0, 0])
    assert orphaned.tolist() == [False, False, True]


def test_step_positions_by_hand():
    mask = np.array([0, 1, 0, 0, 1, 0, 0, 0, 1, 1], dtype=bool)
    offsets = np.array([0, 6, 8, 8, 10])
    pos, off = T.step_positions(mask, offsets, "skip")
    assert pos.tolist() == [1, 4, 8, 9] and off.tolist() == [0, 2, 2, 2, 4]
    pos, off = T.step_positions(mask, offsets, "step")
    assert pos.tolist() == [1, 2, 3, 4, 8, 9] and off.tolist() == [0, 4, 4, 4, 6]


def test_skip_and_step_differ_when_discounted():
    mask = np.array([1, 0, 0, 1], dtype=bool)
    values = np.array([0.5, 0.0, 0.0, 0.2])
    rewards = np.array([0.0, 0.0, 0.0, 1.0])
    offsets = np.array([0, 4])
    g, lam = 0.9, 0.95
    skip = run_core("gae", mask, values, rewards, offsets, gamma=g, lam=lam)
    step = run_core("gae", mask, values, rewards, offsets, gamma=g, lam=lam, observations="step")
    d3 = 1.0 - 0.2
    np.testing.assert_allclose(skip, [g * 0.2 - 0.5 + g * lam * d3, 0, 0, d3], rtol=1e-12)
    # step: deltas at 0..2 are -0.5, 0, g * 0.2; A_0 = -0.5 + (g lam)(0 + (g lam)(g 0.2 + g lam d3))
    gl = g * lam
    np.testing.assert_allclose(step, [-0.5 + gl * gl * (g * 0.2 + gl * d3), 0, 0, d3], rtol=1e-12)
    assert abs(skip[0] - step[0]) > 1e-3


# ---------------------------------------------------------------------------------------------
# Random rollouts against the reference loop

small = st.floats(-1, 1, allow_nan=False, allow_subnormal=False)
reward_value = st.one_of(st.just(0.0), st.just(0.0), st.just(1.0), small)


@st.composite
def rollouts(draw, max_rows=5, max_len=24):
    n_rows = draw(st.integers(1, max_rows))
    lens = draw(st.lists(st.integers(0, max_len), min_size=n_rows, max_size=n_rows))
    n = sum(lens)
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    mask = draw(st.lists(st.floats(0, 1).map(lambda u: u < density), min_size=n, max_size=n))
    values = draw(st.lists(small, min_size=n, max_size=n))
    sparse = st.one_of(st.just(0.0), st.just(0.0), st.just(0.0), small)
    token = draw(st.one_of(st.none(), st.lists(sparse, min_size=n, max_size=n)))
    outcome = draw(st.lists(reward_value, min_size=n_rows, max_size=n_rows))
    return {
        "mask": np.array(mask, dtype=bool),
        "values": np.array(values, dtype=np.float64),
        "token": None if token is None else np.array(token, dtype=np.float64),
        "outcome": np.array(outcome, dtype=np.float64),
        "offsets": offsets_from_lengths(np.array(lens, dtype=np.int64)),
    }


@st.composite
def params(draw, n_rows):
    gamma = draw(st.one_of(st.sampled_from([0.0, 0.9, 0.99, 1.0]), st.floats(0, 1)))
    lam = draw(
        st.one_of(
            st.sampled_from([0.0, 0.95, 1.0]),
            st.lists(st.floats(0, 1), min_size=n_rows, max_size=n_rows).map(np.array),
        )
    )
    nv = draw(st.one_of(st.none(), st.lists(small, min_size=n_rows, max_size=n_rows)))
    na = draw(st.one_of(st.none(), st.lists(small, min_size=n_rows, max_size=n_rows)))
    return {
        "gamma": gamma,
        "lam": lam,
        "next_value": None if nv is None else np.array(nv),
        "next_advantage": None if na is None else np.array(na),
        "observations": draw(st.sampled_from(["skip", "step"])),
    }


def _placed(ro):
    return T.place_rewards(ro["mask"], ro["offsets"], ro["outcome"], ro["token"])


@settings(max_examples=100, deadline=None)
@given(rollouts())
def test_place_rewards_matches_reference(ro):
    rewards, moved, orphaned = _placed(ro)
    exp_r, exp_moved, exp_orph = ref.place_rewards(
        ro["mask"], ro["offsets"], ro["outcome"], ro["token"]
    )
    np.testing.assert_allclose(rewards, exp_r, rtol=1e-12, atol=1e-12)
    assert moved.tolist() == exp_moved
    assert orphaned.tolist() == exp_orph
    assert (rewards[~ro["mask"]] == 0.0).all()


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_estimators_match_reference(data):
    ro = data.draw(rollouts())
    p = data.draw(params(len(ro["offsets"]) - 1))
    rewards, _, _ = _placed(ro)
    ref_rewards, _, _ = ref.place_rewards(ro["mask"], ro["offsets"], ro["outcome"], ro["token"])
    for method in METHODS:
        out = run_core(method, ro["mask"], ro["values"], rewards, ro["offsets"], **p)
        exp = ref.temporal(method, ro["mask"], ro["values"], ref_rewards, ro["offsets"], **p)
        assert_f32(out, exp)
        assert (out[~ro["mask"]] == 0.0).all()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_lambda_one_is_mc_lambda_zero_is_td(data):
    ro = data.draw(rollouts())
    p = data.draw(params(len(ro["offsets"]) - 1))
    p["next_advantage"] = None
    rewards, _, _ = _placed(ro)
    args = (ro["mask"], ro["values"], rewards, ro["offsets"])
    mc = run_core("mc", *args, **p)
    td = run_core("td", *args, **p)
    np.testing.assert_allclose(run_core("gae", *args, **{**p, "lam": 1.0}), mc, atol=1e-9)
    np.testing.assert_allclose(run_core("gae", *args, **{**p, "lam": 0.0}), td, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_zero_values_give_discounted_reward_to_go(data):
    ro = data.draw(rollouts())
    p = data.draw(params(len(ro["offsets"]) - 1))
    p["next_advantage"] = None
    rewards, _, _ = _placed(ro)
    zeros = np.zeros(len(ro["mask"]))
    args = (ro["mask"], zeros, rewards, ro["offsets"])
    returns = run_core("returns", *args, **p)
    np.testing.assert_allclose(run_core("mc", *args, **p), returns, atol=1e-12)
    np.testing.assert_allclose(run_core("gae", *args, **{**p, "lam": 1.0}), returns, atol=1e-9)
    exp = ref.temporal("returns", ro["mask"], zeros, rewards, ro["offsets"], **p)
    assert_f32(returns, exp)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rollouts_together_equal_alone(data):
    ro = data.draw(rollouts())
    n_rows = len(ro["offsets"]) - 1
    p = data.draw(params(n_rows))
    rewards, _, _ = _placed(ro)
    off = ro["offsets"]
    for method in METHODS:
        together = run_core(method, ro["mask"], ro["values"], rewards, off, **p)
        for r in range(n_rows):
            lo, hi = off[r], off[r + 1]
            alone_p = dict(p)
            for k in ("next_value", "next_advantage"):
                if p[k] is not None:
                    alone_p[k] = p[k][r : r + 1]
            if np.ndim(p["lam"]):
                alone_p["lam"] = p["lam"][r : r + 1]
            alone = run_core(
                method,
                ro["mask"][lo:hi],
                ro["values"][lo:hi],
                rewards[lo:hi],
                np.array([0, hi - lo]),
                **alone_p,
            )
            np.testing.assert_allclose(together[lo:hi], alone, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_observation_values_never_read(data):
    ro = data.draw(rollouts())
    p = data.draw(params(len(ro["offsets"]) - 1))
    rewards, _, _ = _placed(ro)
    noise = data.draw(
        st.lists(st.floats(-100, 100), min_size=len(ro["mask"]), max_size=len(ro["mask"]))
    )
    other = np.where(ro["mask"], ro["values"], np.array(noise))
    for method in METHODS:
        a = run_core(method, ro["mask"], ro["values"], rewards, ro["offsets"], **p)
        b = run_core(method, ro["mask"], other, rewards, ro["offsets"], **p)
        np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_skip_equals_step_when_undiscounted(data):
    ro = data.draw(rollouts())
    n_rows = len(ro["offsets"]) - 1
    p = data.draw(params(n_rows))
    p.update(gamma=1.0, lam=1.0)
    rewards, _, _ = _placed(ro)
    args = (ro["mask"], ro["values"], rewards, ro["offsets"])
    for method in ("gae", "mc", "returns"):
        skip = run_core(method, *args, **{**p, "observations": "skip"})
        step = run_core(method, *args, **{**p, "observations": "step"})
        np.testing.assert_allclose(skip, step, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Long rollouts: 32k tokens


def _long_row(rng, n):
    mask = np.ones(n, dtype=bool)
    # observation spans of random lengths (tool outputs)
    for start in rng.integers(0, n - 300, 40):
        mask[start : start + rng.integers(1, 300)] = False
    mask[0] = True
    values = rng.uniform(0, 1, n)
    token = np.zeros(n)
    token[rng.integers(0, n, 5)] = rng.uniform(-0.5, 0.5, 5)
    return mask, values, token


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (1.0, 1.0)])
def test_long_rollout_matches_reference(gamma, lam):
    rng = np.random.default_rng(32768)
    n_long, n_short = 32768, 50
    m1, v1, t1 = _long_row(rng, n_long)
    m2 = rng.uniform(size=n_short) < 0.5
    mask = np.r_[m1, m2]
    values = np.r_[v1, rng.uniform(0, 1, n_short)]
    token = np.r_[t1, np.zeros(n_short)]
    offsets = np.array([0, n_long, n_long + n_short])
    outcome = np.array([1.0, -1.0])
    rewards, _, orphaned = T.place_rewards(mask, offsets, outcome, token)
    ref_rewards, _, _ = ref.place_rewards(mask, offsets, outcome, token)
    assert not orphaned[0]
    kw = {"gamma": gamma, "lam": np.array([lam, 0.5]), "next_value": np.array([0.3, 0.0])}
    for obs in ("skip", "step"):
        for method in METHODS:
            out = run_core(method, mask, values, rewards, offsets, observations=obs, **kw)
            exp = ref.temporal(method, mask, values, ref_rewards, offsets, observations=obs, **kw)
            assert_f32(out, exp)
    if gamma == lam == 1.0:
        skip = run_core("gae", mask, values, rewards, offsets, **kw)
        mc = run_core("mc", mask, values, rewards, offsets, **kw)
        np.testing.assert_allclose(skip[:n_long], mc[:n_long], atol=1e-9)


# ---------------------------------------------------------------------------------------------
# adaptive lambda, actions_after, segments, whitening


def test_adaptive_lambda_by_hand():
    lam = T.adaptive_lambda(np.array([0, 1, 10, 100, 1000]), 0.05)
    np.testing.assert_allclose(lam, [0.0, 0.0, 0.0, 0.8, 0.98], rtol=1e-12)
    lam = T.adaptive_lambda(np.array([0, 1, 10, 1500]), 1.5)
    np.testing.assert_allclose(lam, [0.0, 1 / 3, 1 - 1 / 15, 1 - 1 / 2250], rtol=1e-12)
    assert ((lam >= 0) & (lam <= 1)).all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=10), st.sampled_from([0.05, 1.5, 0.3]))
def test_adaptive_lambda_matches_reference(counts, alpha):
    out = T.adaptive_lambda(np.array(counts), alpha)
    np.testing.assert_allclose(out, [ref.adaptive_lambda(c, alpha) for c in counts], atol=1e-15)


def test_actions_after_by_hand():
    counts = np.array([5, 3, 4, 7, 2])
    rollout = np.array([0, 0, 0, 1, 1])
    rank = np.array([2, 0, 1, 0, 1])
    assert T.actions_after(counts, rollout, rank).tolist() == [0, 9, 5, 2, 0]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_actions_after_matches_reference(data):
    n = data.draw(st.integers(1, 12))
    n_roll = data.draw(st.integers(1, n))
    rollout = np.array(data.draw(st.lists(st.integers(0, n_roll - 1), min_size=n, max_size=n)))
    rollout = np.unique(rollout, return_inverse=True)[1].astype(np.int64)
    rank = np.array(data.draw(st.permutations(range(n))))  # distinct ranks, any order
    counts = np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)))
    out = T.actions_after(counts, rollout, rank)
    assert out.tolist() == ref.actions_after(counts, rollout, rank)


def test_compaction_and_chain_with_zero_values():
    """docs/semantics.md: with V == 0 both segment modes give R * (gamma lam)^(actions after)."""
    g, lam, R = 0.9, 0.8, 2.0
    seg_counts = np.array([3, 2, 4])  # one rollout, three segments, all action tokens
    step_offsets = offsets_from_lengths(seg_counts)
    n = int(step_offsets[-1])
    after_in_rollout = np.arange(n - 1, -1, -1)
    expected = R * (g * lam) ** after_in_rollout
    # compaction: reward on every segment's last action, V_next = 0, scale by (g lam)^N_{>s}
    r = np.zeros(n)
    r[step_offsets[1:] - 1] = R
    adv = T.gae(np.zeros(n), r, step_offsets, gamma=g, lam=lam, next_value=np.zeros(3))
    after = T.actions_after(seg_counts, np.zeros(3, dtype=np.int64), np.arange(3))
    adv = adv * np.power(g * lam, after)[np.repeat(np.arange(3), seg_counts)]
    np.testing.assert_allclose(adv, expected, rtol=1e-12)
    # chain: one recursion, reward only at the very end
    r = np.zeros(n)
    r[-1] = R
    chain = T.gae(np.zeros(n), r, np.array([0, n]), gamma=g, lam=lam, next_value=np.zeros(1))
    np.testing.assert_allclose(chain, expected, rtol=1e-12)


def test_whiten_worked_example():
    out = T.whiten(
        np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4, dtype=np.int64), 1, ddof=1, eps=WHITEN_EPS
    )
    assert_f32(out, [-1.161895, -0.387298, 0.387298, 1.161895], atol=1e-6)


def test_whiten_ddof0_by_hand():
    out = T.whiten(
        np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4, dtype=np.int64), 1, ddof=0, eps=WHITEN_EPS
    )
    np.testing.assert_allclose(out, (np.arange(1, 5) - 2.5) / np.sqrt(1.25 + 1e-8), rtol=1e-12)


def test_whiten_is_token_weighted_per_batch():
    # batch 0: tokens [0, 0, 0, 4] (a long rollout counts per token); batch 1: a single token
    x = np.array([0.0, 0.0, 0.0, 4.0, 7.0])
    codes = np.array([0, 0, 0, 0, 1])
    out = T.whiten(x, codes, 2, ddof=0, eps=WHITEN_EPS)
    np.testing.assert_allclose(out[:4], (x[:4] - 1.0) / np.sqrt(3.0 + 1e-8), rtol=1e-12)
    assert out[4] == 0.0  # one token: centred to 0
    out = T.whiten(x, codes, 2, ddof=1, eps=WHITEN_EPS)
    np.testing.assert_allclose(out[:4], (x[:4] - 1.0) / np.sqrt(4.0 + 1e-8), rtol=1e-12)
    assert out[4] == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-10, 10, allow_subnormal=False), st.integers(0, 3)),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([0, 1]),
)
def test_whiten_matches_reference(items, ddof):
    x = np.array([v for v, _ in items])
    codes = np.unique([b for _, b in items], return_inverse=True)[1].astype(np.int64)
    out = T.whiten(x, codes, int(codes.max()) + 1, ddof=ddof, eps=WHITEN_EPS)
    exp = ref.whiten(x, codes.tolist(), ddof=ddof, eps=WHITEN_EPS)
    np.testing.assert_allclose(out, exp, rtol=1e-9, atol=1e-9)


def test_empty_inputs():
    mask = np.zeros(3, dtype=bool)
    offsets = np.array([0, 0, 3])
    for method in METHODS:
        out = run_core(
            method,
            mask,
            np.ones(3),
            np.zeros(3),
            offsets,
            gamma=0.9,
            lam=0.9,
            next_value=np.ones(2),
            next_advantage=np.ones(2),
            observations="step",
        )
        assert out.tolist() == [0.0, 0.0, 0.0]
    pos, off = T.step_positions(mask, offsets, "step")
    assert pos.shape == (0,) and off.tolist() == [0, 0, 0]
    assert T.last_action(mask, offsets).tolist() == [-1, -1]


def test_batch_moments_merged_over_chunks_equal_one_pass():
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 2.0, 1000)
    batch = rng.integers(0, 4, 1000)
    whole = T.BatchMoments(4)
    whole.add(x, batch)
    chunked = T.BatchMoments(4)
    for lo in range(0, 1000, 37):
        chunked.add(x[lo : lo + 37], batch[lo : lo + 37])
    for b in range(4):
        values = x[batch == b]
        assert chunked.count[b] == len(values)
        np.testing.assert_allclose(chunked.mean[b], values.mean(), rtol=1e-12)
        np.testing.assert_allclose(chunked.var(1)[b], values.var(ddof=1), rtol=1e-10)
    np.testing.assert_allclose(chunked.m2, whole.m2, rtol=1e-10)
