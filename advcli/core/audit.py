"""Zero-variance and singleton accounting: how much of a log carries no group signal.

A group of n >= 2 rollouts whose rewards satisfy max - min <= tol gives every member the same
relative advantage, 0: its rollouts and their action tokens are spent without a learning signal
from the group baseline. So does a singleton group (n = 1). The common reward of a zero-variance
group is called *all-correct* when it equals the log's highest reward, *all-wrong* when it equals
the lowest, and *other* otherwise (when every reward of the log is equal, positive counts as
correct).

A *near-tie* is a group of n >= 2 that is not zero-variance but whose rewards barely differ: its
population standard deviation is below a threshold (default 5% of the log's reward range,
``NEAR_TIE_SHARE`` × (highest − lowest)). Its advantages exist, but come from differences
that may be noise (a judge's rounding, a length penalty); the audit counts them apart.

Agent steps have a signal of their own (GiGPO's step term): a step whose anchor-state group
(the steps of its episode group with the same ``state``) is itself alone, or whose members'
returns are equal, gets no step advantage (:func:`audit_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advcli.core.group import GroupStats
from advcli.core.steps import tied
from advcli.lazy_imports import np

NEAR_TIE_SHARE = 0.05  # the default near-tie threshold, as a share of the log's reward range

KINDS = ("signal", "all-correct", "all-wrong", "zero-variance (other)", "near-tie", "singleton")
SIGNAL, ALL_CORRECT, ALL_WRONG, ZERO_VARIANCE_OTHER, NEAR_TIE, SINGLETON = range(len(KINDS))


@dataclass
class AuditReport:
    """Numbers of one audit; shares are fractions in [0, 1]."""

    groups: int
    rollouts: int
    action_tokens: int | None  # None: the log has no token ids
    zero_variance_groups: int
    zero_variance_all_correct: int
    zero_variance_all_wrong: int
    zero_variance_other: int
    singleton_groups: int
    zero_variance_rollouts: int
    singleton_rollouts: int
    no_signal_rollout_share: float
    no_signal_action_token_share: float | None
    zero_variance_rollout_share: float
    near_tie_groups: int
    near_tie_rollouts: int
    near_tie_std_below: float  # the threshold used
    group_sizes: dict[int, int] = field(default_factory=dict)
    reward_histogram: list[tuple[float, float, int]] = field(default_factory=list)
    # agent steps (a log with a ``state`` column, :func:`audit_steps`); None: no states
    steps: int | None = None
    state_groups: int | None = None
    singleton_state_groups: int | None = None
    tied_state_groups: int | None = None
    steps_without_signal: int | None = None
    no_signal_step_share: float | None = None


def audit_steps(returns: np.ndarray, anchors: np.ndarray, tol: float) -> dict[str, Any]:
    """The step signal of GiGPO's anchor-state groups (``anchors``, one code per step, and
    each step's return): a group of one step, or of steps whose returns span at most ``tol``,
    gives those steps no step advantage. The :class:`AuditReport` fields of steps."""
    n = int(anchors.max()) + 1 if len(anchors) else 0
    size = np.bincount(anchors, minlength=n)
    tied_groups = tied(returns, anchors, n, tol)
    no_signal = ((size == 1) | tied_groups)[anchors]
    return {
        "steps": len(anchors),
        "state_groups": n,
        "singleton_state_groups": int((size == 1).sum()),
        "tied_state_groups": int(tied_groups.sum()),
        "steps_without_signal": int(no_signal.sum()),
        "no_signal_step_share": float(no_signal.mean()) if len(anchors) else 0.0,
    }


def audit(
    rewards: np.ndarray,
    codes: np.ndarray,
    stats: GroupStats,
    action_tokens: np.ndarray | None,
    *,
    near_tie: float | None = None,
    bins: int = 10,
) -> AuditReport:
    """Audit one log: ``rewards``, ``codes`` and ``action_tokens`` have one entry per rollout
    (``action_tokens`` None: a log without token ids, so no token shares). ``stats`` must
    hold population standard deviations (ddof 0); ``near_tie`` is the std below which a group
    is a near-tie (None: ``NEAR_TIE_SHARE`` of the reward range)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(rewards)
    zv_row = stats.zero_variance[codes]
    single_row = stats.singleton[codes]
    tokens = np.asarray(action_tokens if action_tokens is not None else [], dtype=np.int64)
    total_tokens = int(tokens.sum())
    no_signal = zv_row | single_row

    hi, lo = (rewards.max(), rewards.min()) if n else (0.0, 0.0)
    threshold = near_tie if near_tie is not None else NEAR_TIE_SHARE * float(hi - lo)
    kinds = group_kinds(stats, hi, lo, threshold)
    of_kind = np.bincount(kinds, minlength=len(KINDS))
    sizes, size_counts = np.unique(stats.size[stats.size > 0], return_counts=True)

    histogram: list[tuple[float, float, int]] = []
    if n:
        edges_lo, edges_hi = (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
        counts, edges = np.histogram(rewards, bins=bins, range=(edges_lo, edges_hi))
        histogram = [
            (float(edges[i]), float(edges[i + 1]), int(c)) for i, c in enumerate(counts) if c
        ]

    return AuditReport(
        groups=int((stats.size > 0).sum()),
        rollouts=n,
        action_tokens=total_tokens if action_tokens is not None else None,
        zero_variance_groups=int(stats.zero_variance.sum()),
        zero_variance_all_correct=int(of_kind[ALL_CORRECT]),
        zero_variance_all_wrong=int(of_kind[ALL_WRONG]),
        zero_variance_other=int(of_kind[ZERO_VARIANCE_OTHER]),
        singleton_groups=int(stats.singleton.sum()),
        zero_variance_rollouts=int(zv_row.sum()),
        singleton_rollouts=int(single_row.sum()),
        no_signal_rollout_share=float(no_signal.mean()) if n else 0.0,
        no_signal_action_token_share=None
        if action_tokens is None
        else float(tokens[no_signal].sum() / total_tokens)
        if total_tokens
        else 0.0,
        zero_variance_rollout_share=float(zv_row.mean()) if n else 0.0,
        near_tie_groups=int(of_kind[NEAR_TIE]),
        near_tie_rollouts=int((kinds[codes] == NEAR_TIE).sum()),
        near_tie_std_below=threshold,
        group_sizes={int(s): int(c) for s, c in zip(sizes, size_counts, strict=True)},
        reward_histogram=histogram,
    )


def group_kinds(stats: GroupStats, hi: float, lo: float, near_tie: float) -> np.ndarray:
    """What each group is, as an index into :data:`KINDS`: zero-variance (all-correct when its
    reward is the log's highest ``hi``, all-wrong when the lowest ``lo``, else other), a
    near-tie (std below ``near_tie``), a singleton, or a group with signal. Groups without
    rollouts count as signal (they never occur in a log)."""
    kinds = np.full(len(stats.size), SIGNAL, dtype=np.int64)
    common = stats.mean
    if hi > lo:
        correct = np.isclose(common, hi, rtol=0, atol=1e-9)
        wrong = np.isclose(common, lo, rtol=0, atol=1e-9) & ~correct
    else:
        correct = common > 0
        wrong = ~correct
    with np.errstate(invalid="ignore"):
        near = (stats.size >= 2) & ~stats.zero_variance & (stats.std < near_tie)
    kinds[near] = NEAR_TIE
    kinds[stats.singleton] = SINGLETON
    zv = stats.zero_variance
    kinds[zv] = ZERO_VARIANCE_OTHER
    kinds[zv & correct] = ALL_CORRECT
    kinds[zv & wrong] = ALL_WRONG
    return kinds
