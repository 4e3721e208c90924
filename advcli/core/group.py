"""Group and batch baselines: one advantage per rollout, broadcast later to its action tokens.

All statistics are computed in float64 with a two-pass variance. Inputs are one entry per
rollout: ``rewards`` (float64) and ``codes`` (int64 group index in ``[0, n_groups)``).

- GRPO:       A_i = (R_i - b_i) / (s_i + eps)   (``eps_placement="max"``: max(s_i, eps))
  with the baseline b_i the group's mean (``baseline="group"``) or the mean of the *other*
  members (``"leave-one-out"``, NeMo-RL), and the scale s_i the group's std (``scale="group"``),
  the batch's (``"batch"``), the std of the other members, ddof 1 (``"leave-one-out"``: no
  division where it is 0, as NeMo-RL), or none (``"none"``, Dr. GRPO: A_i = R_i - b_i).
- RLOO:       A_i = R_i - mean_{j != i} R_j (GRPO with the leave-one-out baseline, no scale)
- batch-mean: A_i = R_i - mean_b over consecutive completion-ordered batches of exactly B.
- OPO, pass@k, GPG, MaxRL, SPPO, GDPO and process rewards: see their functions below.

A zero-variance group (n >= 2 and max - min <= tol) gets exactly 0. A singleton group (n = 1)
gets 0 (``singleton="zero"``) or, like verl, mean 0 and std 1 (``singleton="raw"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from advcli.core.ragged import ranges
from advcli.lazy_imports import np

Baseline = Literal["group", "leave-one-out", "batch", "none"]
Scale = Literal["group", "batch", "none", "leave-one-out"]

ZERO_VARIANCE_TOL = 1e-9
"""A group is zero-variance when the spread of its rewards, max - min, is at most this (the
default of ``--zero-variance-tol``, of ``audit`` and of ``report``)."""


@dataclass(frozen=True)
class GroupStats:
    """Per-group statistics (arrays of length n_groups)."""

    size: np.ndarray  # int64
    mean: np.ndarray  # float64
    m2: np.ndarray  # float64: the sum of squared deviations from the mean
    std: np.ndarray  # float64, with the ddof asked for; NaN where size <= ddof
    zero_variance: np.ndarray  # bool: size >= 2 and range <= tol
    singleton: np.ndarray  # bool: size == 1


def group_stats(
    rewards: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    *,
    ddof: int,
    tol: float,
    min_std: float = 0.0,
) -> GroupStats:
    """Size, mean, std (two-pass, ``ddof``), zero-variance and singleton flags per group.

    A group is zero-variance when it has two members or more and max - min <= ``tol``, or its
    std <= ``min_std`` (ROLL's rule, with ``min_std`` 1e-6; 0 turns it off)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    size = np.bincount(codes, minlength=n_groups).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=rewards, minlength=n_groups) / size
        sq = np.bincount(codes, weights=(rewards - mean[codes]) ** 2, minlength=n_groups)
        std = np.sqrt(sq / (size - ddof))
    std[size <= ddof] = np.nan
    zero_variance = (size >= 2) & ((spread(rewards, codes, n_groups) <= tol) | (std <= min_std))
    return GroupStats(size, mean, sq, std, zero_variance, size == 1)


def spread(x: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """max - min of ``x`` per group (-inf for a group without values; NaN values left out)."""
    x = np.asarray(x, dtype=np.float64)
    have = ~np.isnan(x)
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, codes[have], x[have])
    np.minimum.at(lo, codes[have], x[have])
    width: np.ndarray = hi - lo
    return width


def _denominator(std: np.ndarray, eps: float, eps_placement: str) -> np.ndarray:
    return np.maximum(std, eps) if eps_placement == "max" else std + eps


def grpo(
    rewards: np.ndarray,
    codes: np.ndarray,
    stats: GroupStats,
    *,
    eps: float,
    eps_placement: str = "add",
    baseline: Baseline = "group",
    scale: Scale = "group",
    batch_std: np.ndarray | None = None,
    batch_mean: np.ndarray | None = None,
    singleton: str = "zero",
    tied_std: str = "zero",
) -> np.ndarray:
    """GRPO advantages (float64, one per rollout).

    ``batch_std`` and ``batch_mean`` (one per rollout: the std and mean of all rewards of its
    batch) are required for ``scale="batch"`` and ``baseline="batch"``; ``baseline="none"``
    subtracts nothing.

    A zero-variance group gets 0 where the baseline is its own (``group``, ``leave-one-out``):
    against a batch baseline, or none, its rollouts keep R - baseline (AReaL's batch-level
    mean). The singleton rule applies where the group is used at all (its baseline or its
    scale): 0, or with ``singleton="raw"`` a group mean of 0 and std of 1, as verl.
    Rewards [1, 1, 3, 0] in groups a a b b, batch baseline (mean 1.25), no scale:
    A = [-0.25, -0.25, 1.75, -1.25].

    ``tied_std="float32"`` (NeMo-RL before its PR #4158): where the rewards a rollout's std
    is taken over are all equal, the std is not 0 but what NeMo-RL's float32 arithmetic
    leaves of it (:func:`nemo_float32_stats`), and the advantage is NeMo-RL's
    (R − baseline) / (std + eps) from those; zero-variance groups keep that value too.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    raw = singleton == "raw"
    relative = baseline in ("group", "leave-one-out")
    single = stats.singleton[codes] & (relative or scale in ("group", "leave-one-out"))
    if "leave-one-out" in (baseline, scale):  # only where used: it costs more than the rest
        loo_mean, loo_std = leave_one_out(rewards, codes, stats)
    baselines: dict[str, Callable[[], np.ndarray]] = {
        "group": lambda: stats.mean[codes],
        "leave-one-out": lambda: loo_mean,
        "batch": lambda: np.asarray(batch_mean, dtype=np.float64),
        "none": lambda: np.zeros(len(rewards)),
    }
    base = baselines[baseline]()
    centred = rewards - np.where(single & raw & relative, 0.0, base)
    if scale == "none":
        adv = centred
    elif scale == "leave-one-out":
        with np.errstate(invalid="ignore", divide="ignore"):
            adv = np.where(
                loo_std > 0, centred / _denominator(loo_std, eps, eps_placement), centred
            )
    else:
        std = stats.std[codes] if scale == "group" else np.asarray(batch_std, dtype=np.float64)
        if scale == "group":
            std = np.where(single & raw, 1.0, std)
        with np.errstate(invalid="ignore", divide="ignore"):  # a zero std with eps 0
            adv = centred / _denominator(std, eps, eps_placement)
    if relative:
        adv = np.where(stats.zero_variance[codes], 0.0, adv)
    if tied_std == "float32" and scale in ("group", "leave-one-out"):
        exact_std = loo_std if scale == "leave-one-out" else stats.std[codes]
        tied = np.flatnonzero(~single & ((exact_std == 0) | stats.zero_variance[codes]))
        if len(tied):
            base32, std32 = nemo_float32_stats(rewards, codes, tied, scale == "leave-one-out")
            r32 = rewards[tied].astype(np.float32) - base32
            with np.errstate(invalid="ignore", divide="ignore"):
                adv[tied] = np.where(std32 > 0, r32 / (std32 + np.float32(eps)), r32)
    return adv if raw else np.where(single, 0.0, adv)


def nemo_float32_stats(
    rewards: np.ndarray, codes: np.ndarray, rows: np.ndarray, leave_one_out: bool
) -> tuple[np.ndarray, np.ndarray]:
    """For ``rows``, their group's baseline and std as NeMo-RL's
    ``calculate_baseline_and_std_per_prompt`` computes them (float32 throughout): with m the
    members counted (the others, or the whole group), b = Σ R / m and
    std = sqrt((Σ R² / m − b²) · m / (m − 1)), 0 where that is not a number; the sums run
    over the group in row order (as its matrix product does on a CPU). On equal rewards that
    are not 0 or 1 the one-pass moments leave rounding noise: for [0, 0.11, 0.11, 0.11] the
    first rollout's others give b = 0.10999999, std = 5.2858e-05 (not 0), and NeMo-RL's
    advantage (0 − b) / (std + 1e-6) = -2042.4 (its PR #4158 stopped dividing there)."""
    x = np.asarray(rewards, dtype=np.float64).astype(np.float32)
    order = np.argsort(codes, kind="stable")
    size = np.bincount(codes)[codes[rows]]
    start = np.searchsorted(codes[order], codes[rows])
    total = np.zeros(len(rows), dtype=np.float32)
    squares = np.zeros(len(rows), dtype=np.float32)
    for k in range(int(size.max(initial=0))):
        live = np.flatnonzero(k < size)
        member = order[start[live] + k]
        counted = member != rows[live] if leave_one_out else np.ones(len(live), dtype=bool)
        value = np.where(counted, x[member], np.float32(0))
        total[live] += value
        squares[live] += value * value
    m = (size - int(leave_one_out)).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        base = total / m
        std = np.sqrt((squares / m - base * base) * (m / (m - np.float32(1))))
    return base, np.nan_to_num(std, nan=0.0).astype(np.float32)


LOO_PAIRS = 1 << 23  # (rollout, other member) pairs held at once by leave_one_out
LOO_EXACT = 1024  # groups up to this size: pairs (sum n^2); larger: sums, O(n)


def leave_one_out(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats
) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout: the mean and the std (ddof 1; 0 with fewer than two others, as NeMo-RL)
    of the *other* members of its group.

    Groups of up to :data:`LOO_EXACT` go two passes over their (rollout, other member) pairs,
    so a rollout far from tightly clustered others does not lose their spread to
    cancellation (sum n_g^2 work, as NeMo-RL's own n x n matrices). A larger group takes
    sums, in O(n): with d_i = R_i - mean and D = sum d_j^2 (both two-pass), the others'
    mean is mean - d_i / (n-1) and their squared deviations add to D - d_i^2 n / (n-1). That
    subtraction cancels only for a rollout holding half of D or more (two per group at
    most): its others are summed again, two-pass.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    mean, std = np.zeros(len(rewards)), np.zeros(len(rewards))
    large = stats.size[codes] > LOO_EXACT
    if (~large).any():
        at = np.flatnonzero(~large)
        mean[at], std[at] = _loo_pairs(rewards[at], codes[at], stats)
    if large.any():
        at = np.flatnonzero(large)
        mean[at], std[at] = _loo_sums(rewards[at], codes[at], stats)
    return mean, std


def _loo_sums(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`leave_one_out` of large groups, in O(n) (see there)."""
    n = stats.size[codes].astype(np.float64)
    d = rewards - stats.mean[codes]
    squares = stats.m2[codes]
    own = d * d * n / (n - 1.0)
    mean = stats.mean[codes] - d / (n - 1.0)
    std = np.sqrt(np.maximum(squares - own, 0.0) / (n - 2.0))
    flagged = np.flatnonzero(own > squares / 2)  # few: two per group at most
    if len(flagged):
        order = np.argsort(codes, kind="stable")
        first = np.searchsorted(codes[order], codes[flagged])
        for i, lo in zip(flagged.tolist(), first.tolist(), strict=True):
            members = order[lo : lo + stats.size[codes[i]]]
            others = rewards[members[members != i]]
            mean[i] = others.mean()
            std[i] = others.std(ddof=1)
    return mean, std


def _loo_pairs(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`leave_one_out` of small groups: two passes over their pairs, a few groups at
    a time."""
    n = len(rewards)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    size = stats.size[sorted_codes]  # per sorted rollout: its group's size
    start = np.searchsorted(sorted_codes, sorted_codes)  # where its group begins
    mean = np.zeros(n)
    std = np.zeros(n)
    cum = np.cumsum(size.astype(np.int64))
    lo = 0
    while lo < n:  # whole groups whose pairs fit in the budget (at least one group)
        hi = int(np.searchsorted(cum, cum[lo] - size[lo] + LOO_PAIRS, side="right"))
        hi = max(hi, lo + 1)
        hi = int(start[hi - 1] + size[hi - 1])  # end of the last group begun
        i = np.repeat(np.arange(lo, hi), size[lo:hi])  # a rollout, once per member of its group
        j = ranges(start[lo:hi], size[lo:hi])  # the members
        others = i != j
        i, j = i[others] - lo, j[others]
        count = (size[lo:hi] - 1).astype(np.float64)
        x = rewards[order[j]]
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.bincount(i, weights=x, minlength=hi - lo) / count
            m2 = np.bincount(i, weights=(x - m[i]) ** 2, minlength=hi - lo)
            sd = np.where(count >= 2, np.sqrt(m2 / (count - 1.0)), 0.0)
        mean[order[lo:hi]] = m
        std[order[lo:hi]] = sd
        lo = hi
    return mean, std


def _apply_flags(adv: np.ndarray, codes: np.ndarray, stats: GroupStats, raw: bool) -> np.ndarray:
    adv = np.where(stats.zero_variance[codes], 0.0, adv)
    if not raw:
        adv = np.where(stats.singleton[codes], 0.0, adv)
    return adv


def completion_batches(order: np.ndarray, batch_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Cut rollouts, taken in ``order`` (a permutation), into consecutive batches.

    Returns ``batch_id`` (int64, per rollout in original positions) and ``partial`` (bool, per
    rollout: its batch is a trailing batch smaller than ``batch_size``). ``batch_size=None``
    puts every rollout in batch 0.
    """
    n = len(order)
    batch_id = np.zeros(n, dtype=np.int64)
    partial = np.zeros(n, dtype=bool)
    if batch_size is None or n == 0:
        return batch_id, partial
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    batch_id = rank // batch_size
    full = (n // batch_size) * batch_size
    partial = rank >= full
    return batch_id, partial


def batch_mean(
    rewards: np.ndarray,
    batch_codes: np.ndarray,
    n_batches: int,
    *,
    tol: float,
    baseline: np.ndarray | None = None,
) -> tuple[np.ndarray, GroupStats]:
    """One-batch REINFORCE: A_i = R_i - mean of its batch (no std), or minus ``baseline`` (one
    per batch: SPPO's soft mean). Equal-reward batches and batches of one get 0."""
    stats = group_stats(rewards, batch_codes, n_batches, ddof=0, tol=tol)
    base = stats.mean if baseline is None else baseline
    adv = np.asarray(rewards, dtype=np.float64) - base[batch_codes]
    adv = np.where(stats.zero_variance[batch_codes] | stats.singleton[batch_codes], 0.0, adv)
    return adv, stats


def batch_mean_std(
    rewards: np.ndarray, batch_codes: np.ndarray, n_batches: int, *, ddof: int
) -> tuple[np.ndarray, np.ndarray]:
    """The mean and std (two-pass, ``ddof``) of all rewards in each rollout's batch."""
    stats = group_stats(rewards, batch_codes, n_batches, ddof=ddof, tol=0.0)
    return stats.mean[batch_codes], stats.std[batch_codes]


def opo(
    rewards: np.ndarray,
    codes: np.ndarray,
    stats: GroupStats,
    lengths: np.ndarray,
    *,
    singleton: str = "zero",
) -> np.ndarray:
    """OPO (verl ``compute_opo_outcome_advantage``): A_i = R_i - b_g with the length-weighted
    baseline b_g = sum_j |o_j| R_j / sum_j |o_j| over the group, |o_j| the action tokens of
    rollout j. No std. A singleton's baseline is 0 (``singleton="raw"``: A = R, as verl) or its
    advantage 0; a group without action tokens takes the plain mean.

    Rewards [1, 0] with lengths [3, 1]: b = 3/4, A = [0.25, -0.75].
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(stats.size)
    weight = np.bincount(codes, weights=lengths, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = np.bincount(codes, weights=lengths * rewards, minlength=n) / weight
    base = np.where(weight > 0, weighted, stats.mean)
    raw = singleton == "raw"
    adv = rewards - np.where(stats.singleton[codes] & raw, 0.0, base[codes])
    return _apply_flags(adv, codes, stats, raw)


def grpo_passk(
    rewards: np.ndarray,
    codes: np.ndarray,
    stats: GroupStats,
    *,
    eps: float,
    eps_placement: str = "add",
    scale: bool = True,
    singleton: str = "zero",
) -> np.ndarray:
    """Pass@k GRPO (verl ``compute_grpo_passk_outcome_advantage``): only the group's best
    rollout gets A = (R_max - R_second) / (std_g + eps) (``scale=False``: no division); every
    other rollout gets 0. Ties for the best: the first rollout (in order of appearance) is the
    best, and R_max - R_second = 0. A singleton gets 0 (``singleton="raw"``: its reward).

    Rewards [1, 0, 0, 0], std ddof 1 = 0.5: A = [1 / (0.5 + eps), 0, 0, 0].
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(rewards)
    order = np.lexsort((np.arange(n), -rewards, codes))  # by group, best first, then position
    first = np.r_[True, codes[order][1:] != codes[order][:-1]] if n else np.zeros(0, bool)
    best = order[first]  # the best rollout of each group, in group order of the sort
    has_second = np.flatnonzero(first) + 1
    has_second = has_second[(has_second < n)]
    second = np.full(len(stats.size), np.nan)
    follows = has_second[~first[has_second]]  # the element after a group's best, same group
    second[codes[order[follows]]] = rewards[order[follows]]
    gap = rewards[best] - second[codes[best]]
    if scale:
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = gap / _denominator(stats.std[codes[best]], eps, eps_placement)
    adv = np.zeros(n)
    adv[best] = gap
    raw = singleton == "raw"
    adv = np.where(stats.singleton[codes], rewards if raw else 0.0, adv)
    return _apply_flags(adv, codes, stats, raw)


def gpg(
    rewards: np.ndarray,
    codes: np.ndarray,
    stats: GroupStats,
    batch_codes: np.ndarray,
    n_batches: int,
    *,
    f_norm: float = 1.0,
    singleton: str = "zero",
) -> tuple[np.ndarray, np.ndarray]:
    """GPG (verl ``compute_gpg_outcome_advantage``): A_i = alpha_b (R_i - mean_g) / f_norm with
    alpha_b = B_b / max(1, number of nonzero rewards in the batch), B_b the batch's rollouts.
    No std. A singleton's mean is 0 (``singleton="raw"``: A = alpha R / f_norm, as verl) or its
    advantage 0. Returns the advantages and alpha, per rollout.

    Rewards [1, 0, 0, 0] in one group and batch: alpha = 4, A = [3, -1, -1, -1].
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    size = np.bincount(batch_codes, minlength=n_batches).astype(np.float64)
    nonzero = np.bincount(batch_codes, weights=rewards != 0, minlength=n_batches)
    alpha = (size / np.maximum(nonzero, 1.0))[batch_codes]
    raw = singleton == "raw"
    centred = rewards - np.where(stats.singleton[codes] & raw, 0.0, stats.mean[codes])
    return _apply_flags(alpha * centred / f_norm, codes, stats, raw), alpha


def maxrl(rewards: np.ndarray, codes: np.ndarray, stats: GroupStats) -> np.ndarray:
    """MaxRL (prime-rl ``orchestrator/algo/max_rl.py``): A_i = (R_i - mean_g) / mean_g, and 0 in
    a group whose mean is <= 0 (no eps). A singleton gets 0.

    Rewards [1, 0, 0, 0]: mean 1/4, A = [3, -1, -1, -1].
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    mean = stats.mean[codes]
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = np.where(mean > 0, (rewards - mean) / mean, 0.0)
    return _apply_flags(adv, codes, stats, raw=False)


def group_quantile(x: np.ndarray, codes: np.ndarray, n_groups: int, q: float) -> np.ndarray:
    """The ``q``-quantile of ``x`` in each group (NaN for an empty group), interpolated
    linearly between order statistics, as ``numpy.quantile`` and ``torch.quantile`` do by
    default: with the group's n values sorted, x_(0) ≤ … ≤ x_(n−1), and h = q·(n − 1),

        Q_q = x_(⌊h⌋) + (h − ⌊h⌋)·(x_(⌊h⌋+1) − x_(⌊h⌋))

    Values [0, 0, 1, 1, 1], q = 0.4: h = 1.6, Q = 0 + 0.6·(1 − 0) = 0.6.
    """
    x = np.asarray(x, dtype=np.float64)
    order = np.lexsort((x, codes))
    sorted_x = x[order]
    size = np.bincount(codes, minlength=n_groups)
    start = np.r_[0, np.cumsum(size)[:-1]]
    h = q * (size - 1)
    lo = np.floor(h).astype(np.int64)
    have = size > 0
    out = np.full(n_groups, np.nan)
    below = sorted_x[(start + lo)[have]]
    above = sorted_x[(start + np.minimum(lo + 1, size - 1))[have]]
    out[have] = below + (h - lo)[have] * (above - below)
    return out


def quantile_baseline(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats, *, q: float, singleton: str
) -> np.ndarray:
    """QAE (Wu et al. 2025, "Quantile Advantage Estimation for Entropy-Safe Reasoning"):
    A_i = R_i − Q_q(R of the group), :func:`group_quantile`'s linear interpolation. With 0/1
    rewards and success share p, a hard prompt (p ≤ 1 − q) gives its successes 1 − Q and its
    failures 0; an easy one its failures −Q and its successes 0.

    Rewards [1, 0, 0, 0, 0], q = 0.4: Q = 0, A = [1, 0, 0, 0, 0]. A singleton kept ``raw``
    has the baseline 0 (A = R), as GRPO's has mean 0.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    adv = rewards - group_quantile(rewards, codes, len(stats.size), q)[codes]
    raw = singleton == "raw"
    adv = np.where(stats.singleton[codes] & raw, rewards, adv)
    return _apply_flags(adv, codes, stats, raw=raw)


def focal_weight(mean: np.ndarray, *, gamma: float, correct: float, wrong: float) -> np.ndarray:
    """F-GRPO's weight per group: (1 − μ̂)^γ with μ̂ = clamp((mean − wrong)/(correct − wrong),
    0, 1), the group's success rate read from its mean reward.

    Means [0.25, 1.0, 0.0], γ = 2: μ̂ = [0.25, 1, 0], weights [0.5625, 0, 1].
    """
    rate = np.clip((np.asarray(mean, dtype=np.float64) - wrong) / (correct - wrong), 0.0, 1.0)
    weight: np.ndarray = (1.0 - rate) ** gamma
    return weight


def soft_mean(
    rewards: np.ndarray, batch_codes: np.ndarray, n_batches: int, *, beta: float
) -> np.ndarray:
    """SPPO's baseline per batch: (1/beta) log mean_i exp(beta R_i), the mean when beta = 0.

    Taken as max + log mean exp(beta (R - max)) / beta, so no exp overflows.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    size = np.bincount(batch_codes, minlength=n_batches).astype(np.float64)
    if beta == 0.0:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.bincount(batch_codes, weights=rewards, minlength=n_batches) / size
    scaled = beta * rewards
    top = np.full(n_batches, -np.inf)
    np.maximum.at(top, batch_codes, scaled)
    total = np.bincount(batch_codes, weights=np.exp(scaled - top[batch_codes]), minlength=n_batches)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (top + np.log(total / size)) / beta


def token_weighted_whiten(
    x: np.ndarray,
    weights: np.ndarray,
    batch_codes: np.ndarray,
    n_batches: int,
    *,
    ddof: int,
    eps: float,
) -> np.ndarray:
    """Whitening of one value per rollout as if broadcast to its ``weights`` action tokens
    (verl's ``masked_whiten`` over a batch): (x - mean) / sqrt(var + eps), with the mean and
    variance (``ddof``) over the batch's action tokens. 0 where a batch has <= ``ddof`` tokens.
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    count = np.bincount(batch_codes, weights=w, minlength=n_batches)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(batch_codes, weights=w * x, minlength=n_batches) / count
        m2 = np.bincount(batch_codes, weights=w * (x - mean[batch_codes]) ** 2, minlength=n_batches)
        var = np.where(count > ddof, m2 / (count - ddof), 0.0)
    return np.where(
        count[batch_codes] > ddof,
        (x - mean[batch_codes]) / np.sqrt(var[batch_codes] + eps),
        0.0,
    )


def nan_group_zscore(
    x: np.ndarray, codes: np.ndarray, n_groups: int, *, ddof: int, eps: float
) -> np.ndarray:
    """TRL's NaN-aware z-score within groups: (x - nanmean) / (nanstd + eps), NaN where x is
    NaN or the group has <= ``ddof`` values (TRL's ``nanstd``)."""
    x = np.asarray(x, dtype=np.float64)
    have = ~np.isnan(x)
    filled = np.where(have, x, 0.0)
    count = np.bincount(codes, weights=have, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=filled, minlength=n_groups) / count
        dev = np.where(have, x - mean[codes], 0.0)
        m2 = np.bincount(codes, weights=dev**2, minlength=n_groups)
        std = np.where(count > ddof, np.sqrt(m2 / (count - ddof)), np.nan)
        scaled: np.ndarray = (x - mean[codes]) / (std[codes] + eps)
        return scaled


def length_penalized(
    rewards: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    costs: list[tuple[np.ndarray, float]],
) -> np.ndarray:
    """prime-rl's GRPO length penalty (``algo/grpo.py score_group``, linear, PRs #2901 and
    #3297): each rollout's reward less the group's mean reward times its relative cost,

        P_i = Σ_k w_k · c_ik / max(max_{j ∈ g} c_jk, 1),    S_i = R_i − mean_g(R) · P_i,

    over the costs ``(c_k, w_k)`` (output tokens, input tokens, turns). GRPO then centres S in
    its group. A group of wrong answers (mean 0) is left as it is; longer right answers lose."""
    rewards = np.asarray(rewards, dtype=np.float64)
    mean = np.bincount(codes, weights=rewards, minlength=n_groups) / np.maximum(
        np.bincount(codes, minlength=n_groups), 1
    )
    penalty = np.zeros(len(rewards))
    for values, weight in costs:
        c = np.asarray(values, dtype=np.float64)
        most = np.full(n_groups, -np.inf)
        np.maximum.at(most, codes, c)
        penalty += weight * c / np.maximum(most, 1.0)[codes]
    shaped: np.ndarray = rewards - mean[codes] * penalty
    return shaped
