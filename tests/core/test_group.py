"""Group and batch baselines: worked examples of docs/semantics.md, checks against references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advcli.core import group as G
from advcli.core.conventions import CONVENTIONS
from tests.core import reference as ref

F32 = 1e-6  # float32 output level


def _grpo(
    rewards,
    codes=None,
    *,
    ddof=0,
    eps=1e-6,
    eps_placement="add",
    baseline="group",
    scale="group",
    singleton="zero",
    tol=1e-9,
    batch_codes=None,
):
    rewards = np.asarray(rewards, dtype=np.float64)
    codes = np.zeros(len(rewards), dtype=np.int64) if codes is None else np.asarray(codes)
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    stats = G.group_stats(rewards, codes, n_groups, ddof=ddof, tol=tol)
    bmean = bstd = None
    if scale == "batch" or baseline == "batch":
        batch_codes = np.asarray(batch_codes)
        bmean, bstd = G.batch_mean_std(rewards, batch_codes, int(batch_codes.max()) + 1, ddof=ddof)
    return G.grpo(
        rewards,
        codes,
        stats,
        eps=eps,
        eps_placement=eps_placement,
        baseline=baseline,
        scale=scale,
        batch_std=bstd,
        batch_mean=bmean,
        singleton=singleton,
    )


def _rloo(rewards, codes=None, *, singleton="zero", tol=1e-9):
    rewards = np.asarray(rewards, dtype=np.float64)
    codes = np.zeros(len(rewards), dtype=np.int64) if codes is None else np.asarray(codes)
    stats = G.group_stats(rewards, codes, int(codes.max()) + 1, ddof=0, tol=tol)
    return G.grpo(rewards, codes, stats, eps=0.0, baseline="leave-one-out", scale="none",
                  singleton=singleton)  # fmt: skip


def _f32(actual, expected, atol=F32):
    np.testing.assert_allclose(np.float32(actual), np.float32(expected), rtol=0, atol=atol)


# ---------------------------------------------------------------------------------------------
# Worked examples of docs/semantics.md


def test_seed_grpo_1100():
    # "up to eps": 0.5 / (0.5 + 1e-6) = 0.999998
    _f32(_grpo([1, 1, 0, 0]), [1, 1, -1, -1], atol=2 * 1e-6 / 0.5)
    _f32(_grpo([1, 1, 0, 0]), [0.999998, 0.999998, -0.999998, -0.999998])


def test_seed_grpo_default_eps_is_added():
    # std 0.5, eps 1e-6: 0.5 / (0.5 + 1e-6)
    adv = _grpo([1, 1, 0, 0])
    np.testing.assert_allclose(adv, np.array([1, 1, -1, -1]) * 0.5 / 0.500001, rtol=1e-12)


def test_nemo_rl_leave_one_out_by_hand():
    # [1, 0, 0, 0]: the first's others are all 0 (std 0: no division); the others see
    # [1, 0, 0]: mean 1/3, std sqrt(1/3)
    nemo = {"baseline": "leave-one-out", "scale": "leave-one-out", "ddof": 1}
    s = np.sqrt(1 / 3)
    _f32(_grpo([1, 0, 0, 0], **nemo), [1.0] + [(0 - 1 / 3) / (s + 1e-6)] * 3)
    _f32(_grpo([1, 1, 0, 0], **nemo), [(2 / 3) / (s + 1e-6)] * 2 + [(-2 / 3) / (s + 1e-6)] * 2)
    _f32(_grpo([1, 0], **nemo), [1.0, -1.0])  # one other each: no std, R - the other
    assert _grpo([1, 0, 0], baseline="leave-one-out", scale="none").tolist() == [1.0, -0.5, -0.5]


def test_seed_rloo_1000():
    _f32(_rloo([1, 0, 0, 0]), [1, -1 / 3, -1 / 3, -1 / 3])


def test_seed_batch_mean_110():
    codes, partial = G.completion_batches(np.arange(3), 3)
    assert not partial.any()
    adv, _ = G.batch_mean(np.array([1.0, 1.0, 0.0]), codes, 1, tol=1e-9)
    _f32(adv, [1 / 3, 1 / 3, -2 / 3])


def _conv_grpo(name, rewards):
    c = CONVENTIONS[name]
    return _grpo(rewards, ddof=c.std_ddof, eps=c.eps, eps_placement=c.eps_placement)


def test_published_verl_grpo_1000():
    _f32(_conv_grpo("verl", [1, 0, 0, 0]), [1.499997, -0.499999, -0.499999, -0.499999])


def test_published_trl_grpo_1000():
    _f32(_conv_grpo("trl", [1, 0, 0, 0]), [1.499700, -0.499900, -0.499900, -0.499900])


def test_published_ddof0_grpo_1000():
    _f32(_conv_grpo("advcli", [1, 0, 0, 0]), [1.732047, -0.577349, -0.577349, -0.577349])


def test_published_01_ddof1():
    _f32(_grpo([0, 1], ddof=1, eps=1e-6), [-0.7071058, 0.7071058])


def test_published_01_ddof0():
    _f32(_grpo([0, 1], ddof=0, eps=1e-6), [-0.999998, 0.999998])


def test_dr_grpo_scale_none():
    _f32(_grpo([1, 0, 0, 0], scale="none"), [0.75, -0.25, -0.25, -0.25])


def test_scale_batch_uses_batch_std():
    # groups {1, 0} and {1, 1, 1, 0}; batch std (ddof 0) of [1, 0, 1, 1, 1, 0] = sqrt(2/9)
    r = [1, 0, 1, 1, 1, 0]
    adv = _grpo(r, [0, 0, 1, 1, 1, 1], scale="batch", batch_codes=[0] * 6, eps=0.0)
    s = np.sqrt(2 / 9)
    np.testing.assert_allclose(adv, [0.5 / s, -0.5 / s, 0.25 / s, 0.25 / s, 0.25 / s, -0.75 / s])


def test_eps_placement_add_vs_max():
    # group [0, 2e-8], tol 0: std (ddof 0) 1e-8, far below eps 1e-6
    add = _grpo([0.0, 2e-8], tol=0.0, eps_placement="add")
    mx = _grpo([0.0, 2e-8], tol=0.0, eps_placement="max")
    np.testing.assert_allclose(add, [-1e-8 / (1e-8 + 1e-6), 1e-8 / (1e-8 + 1e-6)], rtol=1e-9)
    np.testing.assert_allclose(mx, [-0.01, 0.01], rtol=1e-9)
    # large std: max(std, eps) = std, add = std + eps
    np.testing.assert_allclose(_grpo([0, 1], eps=1e-6, eps_placement="max"), [-1, 1], rtol=1e-12)


def test_zero_variance_exactly_zero_within_tol():
    adv = _grpo([1.0, 1.0 + 1e-12, 1.0 - 1e-12, 0.0, 1.0], [0, 0, 0, 1, 1])
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert adv[3] < 0 < adv[4]
    assert _rloo([0.3, 0.3 + 5e-10, 0.3], [0, 0, 0]).tolist() == [0.0, 0.0, 0.0]
    assert _grpo([2.0, 2.0 + 5e-10], scale="none").tolist() == [0.0, 0.0]
    stats = G.group_stats(
        np.array([1.0, 1.0, 0.0, 1.0]), np.array([0, 0, 1, 1]), 2, ddof=0, tol=1e-9
    )
    assert stats.zero_variance.tolist() == [True, False]


def test_singletons():
    r = [0.7, 1.0, 0.0]
    codes = [0, 1, 1]
    stats = G.group_stats(np.array(r), np.array(codes), 2, ddof=1, tol=1e-9)
    assert stats.singleton.tolist() == [True, False]
    assert np.isnan(stats.std[0])  # size <= ddof
    assert _grpo(r, codes)[0] == 0.0
    assert _rloo(r, codes)[0] == 0.0
    # raw (verl): mean 0, std 1
    np.testing.assert_allclose(_grpo(r, codes, singleton="raw")[0], 0.7 / (1 + 1e-6))
    np.testing.assert_allclose(_grpo(r, codes, singleton="raw", eps_placement="max")[0], 0.7)
    np.testing.assert_allclose(_grpo(r, codes, singleton="raw", ddof=1)[0], 0.7 / (1 + 1e-6))
    assert _grpo(r, codes, singleton="raw", scale="none")[0] == 0.7
    assert _rloo(r, codes, singleton="raw")[0] == 0.7


def test_completion_batches_by_hand():
    order = np.array([4, 0, 3, 1, 2])  # completion order
    batch, partial = G.completion_batches(order, 2)
    assert batch.tolist() == [0, 1, 2, 1, 0]
    assert partial.tolist() == [False, False, True, False, False]
    batch, partial = G.completion_batches(order, None)
    assert batch.tolist() == [0] * 5 and not partial.any()
    batch, partial = G.completion_batches(order, 5)
    assert batch.tolist() == [0] * 5 and not partial.any()
    batch, partial = G.completion_batches(order, 7)
    assert batch.tolist() == [0] * 5 and partial.all()
    batch, partial = G.completion_batches(np.zeros(0, dtype=np.int64), 3)
    assert batch.shape == (0,) and partial.shape == (0,)


# ---------------------------------------------------------------------------------------------
# Properties against the reference loops

reward_values = st.one_of(
    st.sampled_from([0.0, 1.0]),
    st.integers(-8, 8).map(lambda k: k / 4),
    st.floats(-10, 10, allow_nan=False, allow_subnormal=False),
)


@st.composite
def grouped(draw, max_rollouts=24, max_groups=6):
    n = draw(st.integers(1, max_rollouts))
    rewards = draw(st.lists(reward_values, min_size=n, max_size=n))
    n_groups = draw(st.integers(1, min(n, max_groups)))
    codes = draw(st.lists(st.integers(0, n_groups - 1), min_size=n, max_size=n))
    # compact the codes so every group in [0, n_groups) is used
    uniq = sorted(set(codes))
    codes = [uniq.index(c) for c in codes]
    return np.array(rewards, dtype=np.float64), np.array(codes, dtype=np.int64)


grpo_options = st.fixed_dictionaries(
    {
        "ddof": st.sampled_from([0, 1]),
        "eps": st.sampled_from([1e-6, 1e-4, 1e-9, 0.0]),
        "eps_placement": st.sampled_from(["add", "max"]),
        "baseline": st.sampled_from(["group", "leave-one-out", "batch", "none"]),
        "scale": st.sampled_from(["group", "batch", "none", "leave-one-out"]),
        "singleton": st.sampled_from(["zero", "raw"]),
    }
)


def _assert_close(actual, expected):
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=np.float64), rtol=1e-9, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(grouped(), grpo_options, st.data())
def test_grpo_matches_reference(data, opts, extra):
    rewards, codes = data
    own_baseline = opts["baseline"] in ("group", "leave-one-out")
    if opts["eps"] == 0.0 and (
        opts["eps_placement"] == "add"
        or opts["scale"] == "batch"
        or (opts["scale"] == "group" and not own_baseline)
    ):
        opts["eps"] = 1e-6  # a zero std (equal rewards not zeroed) would divide by zero
    n = len(rewards)
    batch_codes = None
    if opts["scale"] == "batch" or opts["baseline"] == "batch":
        batch_codes = np.array(extra.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
        batch_codes = np.unique(batch_codes, return_inverse=True)[1].astype(np.int64)
        sizes = np.bincount(batch_codes)
        if (sizes <= opts["ddof"]).any():
            batch_codes = np.zeros(n, dtype=np.int64)
        if n <= opts["ddof"]:
            opts["scale"] = "group"
    adv = _grpo(rewards, codes, batch_codes=batch_codes, **opts)
    expected = ref.grpo(
        rewards,
        codes.tolist(),
        batch_labels=None if batch_codes is None else batch_codes.tolist(),
        **opts,
    )
    _assert_close(adv, expected)


@settings(max_examples=100, deadline=None)
@given(grouped(), st.sampled_from(["zero", "raw"]))
def test_rloo_matches_reference(data, singleton):
    rewards, codes = data
    _assert_close(
        _rloo(rewards, codes, singleton=singleton),
        ref.rloo(rewards, codes.tolist(), singleton=singleton),
    )


@settings(max_examples=80, deadline=None)
@given(grouped(), st.randoms(use_true_random=False), st.sampled_from(["grpo", "rloo", "none"]))
def test_permuting_rows_and_groups_permutes_output(data, rnd, method):
    rewards, codes = data
    n = len(rewards)
    order = list(range(n))
    rnd.shuffle(order)
    perm = np.array(order)
    labels = list(range(int(codes.max()) + 1))
    rnd.shuffle(labels)  # permute whole groups too
    relabel = np.array(labels)

    def run(r, c):
        if method == "rloo":
            return _rloo(r, c)
        return _grpo(r, c, scale="none" if method == "none" else "group", ddof=1)

    base = run(rewards, codes)
    moved = run(rewards[perm], relabel[codes[perm]])
    np.testing.assert_allclose(moved, base[perm], rtol=1e-12, atol=1e-12)
    # exact zeros where a flag says so (elsewhere a sum's order may leave 1e-18 instead of 0)
    stats = G.group_stats(rewards, codes, int(codes.max()) + 1, ddof=1, tol=1e-9)
    flagged = (stats.zero_variance | stats.singleton)[codes][perm]
    assert (moved[flagged] == 0.0).all() and (base[perm][flagged] == 0.0).all()


@settings(max_examples=80, deadline=None)
@given(grouped(), grpo_options)
def test_groups_together_equal_groups_apart(data, opts):
    rewards, codes = data
    if opts["scale"] == "batch":
        opts["scale"] = "group"  # batch scale couples groups by design
    if opts["baseline"] == "batch":
        opts["baseline"] = "group"  # so does a batch baseline
    together = _grpo(rewards, codes, **opts)
    together_rloo = _rloo(rewards, codes, singleton=opts["singleton"])
    for g in range(int(codes.max()) + 1):
        sel = codes == g
        apart = _grpo(rewards[sel], np.zeros(sel.sum(), dtype=np.int64), **opts)
        np.testing.assert_allclose(together[sel], apart, rtol=1e-12, atol=1e-12)
        apart = _rloo(
            rewards[sel], np.zeros(sel.sum(), dtype=np.int64), singleton=opts["singleton"]
        )
        np.testing.assert_allclose(together_rloo[sel], apart, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), reward_values, grpo_options)
def test_zero_variance_groups_are_exactly_zero(sizes, value, opts):
    codes = np.repeat(np.arange(len(sizes)), sizes)
    rewards = np.full(len(codes), value)
    if opts["scale"] == "batch":
        opts["scale"] = "group"
    if opts["baseline"] in ("batch", "none"):
        opts["baseline"] = "group"  # equal rewards are zeroed under the group's own baseline
    adv = _grpo(rewards, codes, **opts)
    single = np.array(sizes)[codes] == 1
    assert (adv[~single] == 0.0).all()
    assert (_rloo(rewards, codes)[~single] == 0.0).all()
    if opts["singleton"] == "zero":
        assert (adv == 0.0).all()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(reward_values, min_size=0, max_size=30),
    st.integers(1, 8),
    st.randoms(use_true_random=False),
)
def test_completion_batches_and_batch_mean(rewards, batch_size, rnd):
    n = len(rewards)
    order = list(range(n))
    rnd.shuffle(order)
    batch, partial = G.completion_batches(np.array(order, dtype=np.int64), batch_size)
    exp_batch, exp_partial = ref.completion_batches(order, batch_size)
    assert batch.tolist() == exp_batch
    assert partial.tolist() == exp_partial
    assert partial.sum() == n % batch_size
    if n == 0:
        return
    rewards = np.array(rewards, dtype=np.float64)
    adv, stats = G.batch_mean(rewards, batch, int(batch.max()) + 1, tol=1e-9)
    _assert_close(adv, ref.batch_mean(rewards, order, batch_size))
    # "--partial keep" vs drop: full batches do not depend on the trailing one
    full = ~partial
    if full.any():
        adv_full, _ = G.batch_mean(rewards[full], batch[full], int(batch[full].max()) + 1, tol=1e-9)
        np.testing.assert_allclose(adv_full, adv[full], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ddof", [0, 1])
def test_batch_std_by_hand(ddof):
    r = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 10.0])
    b = np.array([0, 0, 0, 0, 1, 1])
    out = G.batch_mean_std(r, b, 2, ddof=ddof)[1]
    exp = np.sqrt(5.0 / (4 - ddof))
    np.testing.assert_allclose(out, [exp] * 4 + [0.0, 0.0], rtol=1e-12)


def _loo_by_loop(rewards: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The others' mean and std (ddof 1), one rollout at a time."""
    mean, std = np.zeros(len(rewards)), np.zeros(len(rewards))
    for i in range(len(rewards)):
        others = rewards[(codes == codes[i]) & (np.arange(len(rewards)) != i)]
        mean[i] = others.mean()
        std[i] = others.std(ddof=1) if len(others) > 1 else 0.0
    return mean, std


@pytest.mark.parametrize("sizes", [[3, 5, 1030], [2000, 1500], [1025, 1025, 1025]])
def test_leave_one_out_of_large_groups_is_exact_without_pairs(sizes):
    """Groups above LOO_EXACT take sums, O(n): exact to float64 against a loop, outliers far
    from tightly clustered others included (their others are summed again)."""
    rng = np.random.default_rng(len(sizes))
    codes = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(codes)
    rewards = rng.normal(size=len(codes)) * 1e-3
    rewards[[5, 9]] = [1e8, -3e7]
    stats = G.group_stats(rewards, codes, len(sizes), ddof=1, tol=1e-9)
    mean, std = G.leave_one_out(rewards, codes, stats)
    want_mean, want_std = _loo_by_loop(rewards, codes)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(std, want_std, rtol=1e-12)


def test_a_group_of_a_million_rollouts_costs_memory_in_proportion():
    """One group of 10^6: plain GRPO builds no leave-one-out statistics, RLOO's are O(n) (the
    pairs would be 10^12)."""
    n = 1_000_000
    rewards = (np.arange(n) % 2).astype(np.float64)
    codes = np.zeros(n, dtype=np.int64)
    stats = G.group_stats(rewards, codes, 1, ddof=0, tol=1e-9)
    adv = G.grpo(rewards, codes, stats, eps=0.0)
    np.testing.assert_allclose(adv[:2], [-1.0, 1.0])
    loo = G.grpo(rewards, codes, stats, eps=0.0, baseline="leave-one-out", scale="none")
    half = n / 2
    np.testing.assert_allclose(loo[:2], [-half / (n - 1), half / (n - 1)], rtol=1e-12)
