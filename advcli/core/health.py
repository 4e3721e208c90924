"""The health of a run beyond its groups: staleness, lengths and truncation, entropy, and the
advisories that flag a figure past its bound. Every input has one entry per rollout (float64
or int64), except where said; a section is a dict of plain numbers, as ``audit --json`` prints
it.

Staleness. A rollout's lag is ``step − version``: the trainer step that trained on it minus the
policy version that generated it (its oldest token's, where the log stamps several). ``max
staleness k`` keeps the rollouts of lag ≤ k: it drops those of lag > k and breaks every group
that loses at least one of its rollouts.

Lengths. A rollout's length is its action tokens. Per group, the Pearson correlation of length
and reward over the group's rollouts,

    r_g = Σ (ℓ_i − ℓ̄)(R_i − R̄) / sqrt(Σ (ℓ_i − ℓ̄)² · Σ (R_i − R̄)²),

counted over the groups whose lengths differ and whose rewards differ (max > min); its mean
over those groups is the length bias.

Entropy. A rollout's entropy is the mean of its action tokens' entropies; the token mean is
the mean over every action token of the log (verl's ``actor/entropy``, over a step's batch); a
token is high-entropy when its entropy is above the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advcli.lazy_imports import np

QUANTILES = (50, 90)  # the percentiles a summary holds, beside mean and max


def summary(x: np.ndarray) -> dict[str, float] | None:
    """Mean, 50th and 90th percentiles (numpy's linear interpolation) and max of ``x``'s
    finite entries; None without any."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return None
    p50, p90 = np.percentile(x, QUANTILES)
    return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "max": float(x.max())}


def group_means(x: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Each group's mean of ``x`` (NaN for a group without rollouts)."""
    size = np.bincount(codes, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = np.bincount(codes, weights=x, minlength=n_groups) / size
    return out


def spans_values(x: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group: whether ``x`` takes more than one value in it (max > min)."""
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, codes, x)
    np.minimum.at(lo, codes, x)
    out: np.ndarray = hi > lo
    return out


def within_group_correlation(
    x: np.ndarray, y: np.ndarray, codes: np.ndarray, n_groups: int
) -> tuple[float | None, int]:
    """The mean over groups of the Pearson correlation of ``x`` and ``y`` (module docstring),
    over the groups where both vary; and how many groups that is (mean None: none)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx = x - group_means(x, codes, n_groups)[codes]
    dy = y - group_means(y, codes, n_groups)[codes]
    counted = spans_values(x, codes, n_groups) & spans_values(y, codes, n_groups)
    cov = np.bincount(codes, weights=dx * dy, minlength=n_groups)[counted]
    vx = np.bincount(codes, weights=dx * dx, minlength=n_groups)[counted]
    vy = np.bincount(codes, weights=dy * dy, minlength=n_groups)[counted]
    n = int(counted.sum())
    return (float(np.mean(cov / np.sqrt(vx * vy))) if n else None), n


def staleness(
    lag: np.ndarray,
    mixed: np.ndarray | None,
    reward: np.ndarray,
    length: np.ndarray | None,
    advantage: np.ndarray | None,
    codes: np.ndarray,
    n_groups: int,
) -> dict[str, Any]:
    """The staleness section over the rollouts whose lag is known (``lag`` int64, one per such
    rollout, with their ``reward``, action ``length`` and ``advantage``; ``codes`` their
    groups among ``n_groups``; ``mixed``: whether each spans several policy versions, None
    where the log cannot tell)."""
    lag = np.asarray(lag, dtype=np.int64)
    lags, counts = np.unique(lag, return_counts=True)
    out: dict[str, Any] = {
        "rollouts": len(lag),
        "mean_lag": float(lag.mean()) if len(lag) else 0.0,
        "max_lag": int(lag.max()) if len(lag) else 0,
        "lag_histogram": {str(int(k)): int(c) for k, c in zip(lags, counts, strict=True)},
        "mixed_version_share": float(np.mean(mixed)) if mixed is not None and len(lag) else None,
    }
    by_lag: dict[str, dict[str, float | None]] = {}
    for k in lags.tolist():
        at = lag == k
        by_lag[str(k)] = {
            "reward_mean": float(reward[at].mean()),
            "length_mean": float(length[at].mean()) if length is not None else None,
            "advantage_mean": _finite_mean(advantage[at]) if advantage is not None else None,
        }
    out["by_lag"] = by_lag
    out["max_staleness"] = {
        str(k): {"rollouts_dropped": int((lag > k).sum()), "groups_broken": groups_losing(
            lag > k, codes, n_groups)}
        for k in range(max(0, int(lags.min()) if len(lags) else 0), out["max_lag"] + 1)
    }  # fmt: skip
    return out


def groups_losing(dropped: np.ndarray, codes: np.ndarray, n_groups: int) -> int:
    """How many groups lose at least one rollout to ``dropped``."""
    return int((np.bincount(codes[dropped], minlength=n_groups) > 0).sum())


def _finite_mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else None


def lengths(
    length: np.ndarray,
    truncated: np.ndarray | None,
    reward: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
) -> dict[str, Any]:
    """The lengths section: the rollouts' action ``length`` summarised, and its group means;
    the share of rollouts ``truncated`` and of groups holding one (None: the log records no
    truncation); the within-group correlation of length and reward."""
    length = np.asarray(length, dtype=np.float64)
    present = np.bincount(codes, minlength=n_groups) > 0
    corr, counted = within_group_correlation(length, reward, codes, n_groups)
    out: dict[str, Any] = {
        "rollouts": len(length),
        "length": summary(length),
        "group_mean_length": summary(group_means(length, codes, n_groups)[present]),
        "length_reward_correlation": corr,
        "correlation_groups": counted,
    }
    if truncated is not None:
        with_one = np.bincount(codes[truncated], minlength=n_groups) > 0
        out["truncated_rollouts"] = int(truncated.sum())
        out["truncated_share"] = float(truncated.mean()) if len(truncated) else 0.0
        out["groups_with_truncated_share"] = (
            float(with_one[present].mean()) if present.any() else 0.0
        )
    return out


def entropy(
    rollout_sum: np.ndarray, rollout_tokens: np.ndarray, high_tokens: int, threshold: float
) -> dict[str, Any]:
    """The entropy section: per rollout, the sum of its action tokens' entropies and their
    count; ``high_tokens`` the action tokens above ``threshold``."""
    tokens = int(rollout_tokens.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        per_rollout = np.where(rollout_tokens > 0, rollout_sum / rollout_tokens, np.nan)
    return {
        "action_tokens": tokens,
        "token_mean": float(rollout_sum.sum() / tokens) if tokens else None,
        "rollout_mean": summary(per_rollout),
        "high_entropy_threshold": threshold,
        "high_entropy_token_share": high_tokens / tokens if tokens else None,
    }


@dataclass(frozen=True)
class Advisory:
    """A named check of one figure: ``says`` what it found when ``fires`` over the sections
    (``audit --json``'s object) holds."""

    name: str
    bound: float
    meaning: str


ZERO_VARIANCE_BOUND = 0.5  # zero-variance share of rollouts
TRUNCATED_BOUND = 0.25  # truncated share of rollouts
STALE_BOUND = 1.0  # mean lag, in steps
ENTROPY_FLOOR = 0.05  # nats: the token mean below which entropy has collapsed
ENTROPY_DROP = 0.25  # the last step's token mean below this share of the first step's
K3_BOUND = 0.01  # mean k3 over action tokens: the trainer and the sampler disagree
MASKED_BOUND = 0.1  # share of action tokens a correction masks

ADVISORIES = (
    Advisory("zero-variance", ZERO_VARIANCE_BOUND, "zero-variance share of rollouts above"),
    Advisory("truncated", TRUNCATED_BOUND, "truncated share of rollouts above"),
    Advisory("stale", STALE_BOUND, "mean lag (steps) above"),
    Advisory(
        "entropy-collapse",
        ENTROPY_FLOOR,
        f"token-mean entropy (nats) below, or the last step's below {ENTROPY_DROP} of the first's",
    ),
    Advisory("k3", K3_BOUND, "mean k3 estimate of KL(sampler‖trainer) above"),
    Advisory("masked-share", MASKED_BOUND, "share of action tokens the correction masks above"),
)
ADVISORY_NAMES = tuple(a.name for a in ADVISORIES)


def advisories(
    zero_variance_share: float,
    truncated_share: float | None,
    mean_lag: float | None,
    entropy_means: list[float] | None,
    k3_mean: float | None = None,
    masked_share: float | None = None,
) -> dict[str, str]:
    """The advisories that fire, by name, each one line. ``entropy_means``: the token-mean
    entropy of the whole log, then of each step in order (None: no entropies); ``k3_mean``
    the mismatch's token-mean k3 (None: no trainer stream), ``masked_share`` the share of
    action tokens its correction masked (None: no correction)."""
    out: dict[str, str] = {}
    if zero_variance_share > ZERO_VARIANCE_BOUND:
        out["zero-variance"] = (
            f"{zero_variance_share:.1%} of rollouts are in zero-variance groups "
            f"(> {ZERO_VARIANCE_BOUND:.0%}): they carry no group signal"
        )
    if truncated_share is not None and truncated_share > TRUNCATED_BOUND:
        out["truncated"] = (
            f"{truncated_share:.1%} of rollouts were truncated (> {TRUNCATED_BOUND:.0%})"
        )
    if mean_lag is not None and mean_lag > STALE_BOUND:
        out["stale"] = f"rollouts are {mean_lag:.2f} steps stale on average (> {STALE_BOUND:g})"
    if entropy_means:
        whole, steps = entropy_means[0], entropy_means[1:]
        if whole < ENTROPY_FLOOR:
            out["entropy-collapse"] = (
                f"token-mean entropy {whole:.4f} nats (< {ENTROPY_FLOOR:g}): the policy has "
                "collapsed"
            )
        elif len(steps) >= 2 and steps[-1] < ENTROPY_DROP * steps[0]:
            out["entropy-collapse"] = (
                f"token-mean entropy fell from {steps[0]:.4f} to {steps[-1]:.4f} nats "
                f"(< {ENTROPY_DROP:g} of the first step's)"
            )
    if k3_mean is not None and k3_mean > K3_BOUND:
        out["k3"] = (
            f"mean k3 {k3_mean:.4g} (> {K3_BOUND:g}): the trainer's log-probs stray from the "
            "sampler's"
        )
    if masked_share is not None and masked_share > MASKED_BOUND:
        out["masked-share"] = (
            f"the correction masks {masked_share:.1%} of action tokens (> {MASKED_BOUND:.0%})"
        )
    return out
