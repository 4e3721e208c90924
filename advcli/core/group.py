"""Group and batch baselines: one advantage per rollout, broadcast later to its action tokens.

All statistics are computed in float64 with a two-pass variance. Inputs are one entry per
rollout: ``rewards`` (float64) and ``codes`` (int64 group index in ``[0, n_groups)``).

- GRPO:       A_i = (R_i - b_i) / (s_i + eps)   (``eps_placement="max"``: max(s_i, eps))
  with the baseline b_i the group's mean (``baseline="group"``) or the mean of the *other*
  members (``"leave-one-out"``, NeMo-RL), and the scale s_i the group's std (``scale="group"``),
  the batch's (``"batch"``), the std of the other members, ddof 1 (``"leave-one-out"``: no
  division where it is 0, as NeMo-RL), or none (``"none"``, Dr. GRPO: A_i = R_i - b_i).
- RLOO:       A_i = R_i - mean_{j != i} R_j = n / (n - 1) * (R_i - mean_g)
- batch-mean: A_i = R_i - mean_b over consecutive completion-ordered batches of exactly B.

A zero-variance group (n >= 2 and max - min <= tol) gets exactly 0. A singleton group (n = 1)
gets 0 (``singleton="zero"``) or, like verl, mean 0 and std 1 (``singleton="raw"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from advcli.core.ragged import ranges

Baseline = Literal["group", "leave-one-out"]
Scale = Literal["group", "batch", "none", "leave-one-out"]


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
    rewards: np.ndarray, codes: np.ndarray, n_groups: int, *, ddof: int, tol: float
) -> GroupStats:
    """Size, mean, std (two-pass, ``ddof``), zero-variance and singleton flags per group."""
    rewards = np.asarray(rewards, dtype=np.float64)
    size = np.bincount(codes, minlength=n_groups).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=rewards, minlength=n_groups) / size
        sq = np.bincount(codes, weights=(rewards - mean[codes]) ** 2, minlength=n_groups)
        std = np.sqrt(sq / (size - ddof))
    std[size <= ddof] = np.nan
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, codes, rewards)
    np.minimum.at(lo, codes, rewards)
    zero_variance = (size >= 2) & (hi - lo <= tol)
    return GroupStats(size, mean, sq, std, zero_variance, size == 1)


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
    singleton: str = "zero",
) -> np.ndarray:
    """GRPO advantages (float64, one per rollout).

    ``batch_std`` (one per rollout: the std of all rewards of its batch) is required for
    ``scale="batch"``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    raw = singleton == "raw"
    single = stats.singleton[codes]
    loo_mean, loo_std = leave_one_out(rewards, codes, stats)
    base = loo_mean if baseline == "leave-one-out" else stats.mean[codes]
    centred = rewards - np.where(single & raw, 0.0, base)
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
    return _apply_flags(adv, codes, stats, raw)


LOO_PAIRS = 1 << 23  # (rollout, other member) pairs held at once by leave_one_out


def leave_one_out(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats
) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout: the mean and the std (ddof 1; 0 with fewer than two others, as NeMo-RL)
    of the *other* members of its group.

    Both are taken in two passes over the (rollout, other member) pairs of each group, so a
    rollout far from tightly clustered others does not lose their spread to cancellation;
    that is sum(n_g^2) work, as NeMo-RL's own n x n matrices. Groups go a few at a time.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
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


def rloo(
    rewards: np.ndarray, codes: np.ndarray, stats: GroupStats, *, singleton: str = "zero"
) -> np.ndarray:
    """RLOO advantages: R_i minus the mean of the other members of its group."""
    rewards = np.asarray(rewards, dtype=np.float64)
    n = stats.size[codes].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = n / (n - 1.0) * (rewards - stats.mean[codes])
    raw = singleton == "raw"
    adv = np.where(stats.singleton[codes], rewards if raw else 0.0, adv)
    return _apply_flags(adv, codes, stats, raw)


def _apply_flags(adv: np.ndarray, codes: np.ndarray, stats: GroupStats, raw: bool) -> np.ndarray:
    adv = np.where(stats.zero_variance[codes], 0.0, adv)
    if not raw:
        adv = np.where(stats.singleton[codes], 0.0, adv)
    return adv


def batch_std(
    rewards: np.ndarray, batch_codes: np.ndarray, n_batches: int, *, ddof: int
) -> np.ndarray:
    """The std (two-pass, ``ddof``) of all rewards in each rollout's batch, one per rollout."""
    stats = group_stats(rewards, batch_codes, n_batches, ddof=ddof, tol=0.0)
    return stats.std[batch_codes]


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
    rewards: np.ndarray, batch_codes: np.ndarray, n_batches: int, *, tol: float
) -> tuple[np.ndarray, GroupStats]:
    """One-batch REINFORCE: A_i = R_i - mean of its batch (no std). Equal-reward batches get 0."""
    stats = group_stats(rewards, batch_codes, n_batches, ddof=0, tol=tol)
    adv = np.asarray(rewards, dtype=np.float64) - stats.mean[batch_codes]
    adv = np.where(stats.zero_variance[batch_codes] | stats.singleton[batch_codes], 0.0, adv)
    return adv, stats
