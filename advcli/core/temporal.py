"""Per-token estimators from critic values: TD errors, Monte-Carlo, GAE, REINFORCE++ returns.

Time steps are the action tokens of a rollout, a_1 < ... < a_M (``observations="skip"``): an
observation span between two actions adds no discount and its values are never read. With
``observations="step"`` every token from a rollout's first to its last action is a step, and the
non-action ones are zero-reward, zero-value steps (OpenRLHF's convention).

On steps, with V_next(a_k) = V(a_{k+1}) for k < M and V_next(a_M) = ``next_value`` (0 when the
rollout terminated, the bootstrap value when it was truncated):

    td:   delta_k = r_k + gamma * V_next(a_k) - V(a_k)
    mc:   A_k = G_k - V(a_k),   G_k = r_k + gamma * G_{k+1},   G_{M+1} = next_value
    gae:  A_k = delta_k + gamma * lambda * A_{k+1},   A_{M+1} = next_advantage (0 by default)

Seed example (actions u, b, d; V = [0.2, 0.6, 0.4]; reward 1 at the end; gamma = 1):
mc = [0.8, 0.4, 0.6], td = [0.4, -0.2, 0.6], and gae with lambda = 1 equals mc.

Every function takes step arrays: values and rewards gathered at the step positions and
``step_offsets`` (one row per rollout or segment). Everything is float64.
"""

from __future__ import annotations

from typing import TypeAlias

from advcli.core.ragged import lengths, offsets_from_lengths, ranges, row_of
from advcli.core.scan import reverse_discounted_scan
from advcli.lazy_imports import np


def _action_offsets(action_pos: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-row offsets into the sorted action positions (no per-token row index needed)."""
    return np.searchsorted(action_pos, offsets).astype(np.int64)


def last_action(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Flat index of each row's last action token, or -1 for a row without one."""
    action_pos = np.flatnonzero(mask)
    action_offsets = _action_offsets(action_pos, offsets)
    out = np.full(len(offsets) - 1, -1, dtype=np.int64)
    has = action_offsets[1:] > action_offsets[:-1]
    out[has] = action_pos[action_offsets[1:][has] - 1]
    return out


def place_rewards(
    mask: np.ndarray,
    offsets: np.ndarray,
    outcome: np.ndarray | None,
    token_rewards: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put every reward of a row on an action token.

    The outcome reward goes to the row's last action token; ``token_rewards`` add per token; a
    reward on a non-action token moves to the nearest preceding action token of the same row.

    Returns ``(rewards, moved, orphaned)``: per-token float64 rewards (0 on non-action tokens),
    and per row whether a reward was moved, and whether a non-zero reward came before the row's
    first action token (it had nowhere to go and was left out: the caller reports it).
    """
    n = len(mask)
    n_rows = len(offsets) - 1
    mask = np.asarray(mask, dtype=bool)
    rewards = np.zeros(n)
    if token_rewards is not None:
        rewards += token_rewards
    rows = row_of(offsets)
    last = last_action(mask, offsets)
    orphaned = np.zeros(n_rows, dtype=bool)
    if outcome is not None:
        outcome = np.asarray(outcome, dtype=np.float64)
        has = last >= 0
        rewards[last[has]] += outcome[has]
        orphaned |= ~has & (outcome != 0)
    stray = np.flatnonzero(~mask & (rewards != 0))
    moved = np.zeros(n_rows, dtype=bool)
    if len(stray):
        idx = np.where(mask, np.arange(n, dtype=np.int64), -1)
        preceding = np.maximum.accumulate(idx)[stray]
        stray_rows = rows[stray]
        inside = preceding >= offsets[stray_rows]
        orphaned[stray_rows[~inside]] = True
        moved[stray_rows[inside]] = True
        rewards += np.bincount(preceding[inside], weights=rewards[stray[inside]], minlength=n)
        rewards[stray] = 0.0
    return rewards, moved, orphaned


def step_positions(
    mask: np.ndarray, offsets: np.ndarray, observations: str = "skip"
) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of the time steps, and their per-row offsets.

    ``skip``: the action tokens. ``step``: every token from each row's first to last action.
    """
    action_pos = np.flatnonzero(mask)
    action_offsets = _action_offsets(action_pos, offsets)
    if observations == "skip":
        return action_pos, action_offsets
    has = action_offsets[1:] > action_offsets[:-1]
    first = np.zeros(len(offsets) - 1, dtype=np.int64)
    span = np.zeros(len(offsets) - 1, dtype=np.int64)
    first[has] = action_pos[action_offsets[:-1][has]]
    span[has] = action_pos[action_offsets[1:][has] - 1] - first[has] + 1
    return ranges(first, span), offsets_from_lengths(span)


def outcome_on_steps(
    step_offsets: np.ndarray, outcome: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step rewards when the only reward is the outcome: it sits on each row's last step.

    Equivalent to :func:`place_rewards` without ``token_rewards``, gathered at the steps, but
    with no per-token array. Returns ``(rewards, orphaned)``.
    """
    rewards = np.zeros(int(step_offsets[-1]))
    outcome = np.asarray(outcome, dtype=np.float64)
    has = step_offsets[1:] > step_offsets[:-1]
    rewards[step_offsets[1:][has] - 1] = outcome[has]
    return rewards, ~has & (outcome != 0)


def _per_step(x: float | np.ndarray, step_offsets: np.ndarray) -> float | np.ndarray:
    """A scalar stays a scalar (the scan's fast path); a per-row parameter becomes per step."""
    if np.ndim(x) == 0:
        return float(x)
    return np.repeat(np.asarray(x, dtype=np.float64), lengths(step_offsets))


def td_errors(
    values: np.ndarray,
    rewards: np.ndarray,
    step_offsets: np.ndarray,
    *,
    gamma: float,
    next_value: np.ndarray,
) -> np.ndarray:
    """delta_k = r_k + gamma * V_next(a_k) - V(a_k); V_next is the next step's value within a
    row, and ``next_value[row]`` after the row's last step."""
    values = np.asarray(values, dtype=np.float64)
    delta = np.empty(len(values))  # one array for the whole expression, updated in place
    np.multiply(values[1:], gamma, out=delta[:-1])
    ends = step_offsets[1:]
    nonempty = ends > step_offsets[:-1]
    delta[ends[nonempty] - 1] = gamma * np.asarray(next_value, dtype=np.float64)[nonempty]
    delta -= values
    delta += rewards
    return delta


def discounted_returns(
    rewards: np.ndarray,
    step_offsets: np.ndarray,
    *,
    gamma: float,
    next_value: np.ndarray | None = None,
) -> np.ndarray:
    """Return-to-go G_k = r_k + gamma * G_{k+1}, with G after the last step = ``next_value``."""
    return reverse_discounted_scan(
        rewards, _per_step(gamma, step_offsets), step_offsets, next_value
    )


def monte_carlo(
    values: np.ndarray,
    rewards: np.ndarray,
    step_offsets: np.ndarray,
    *,
    gamma: float,
    next_value: np.ndarray,
) -> np.ndarray:
    """A_k = G_k - V(a_k)."""
    returns = discounted_returns(rewards, step_offsets, gamma=gamma, next_value=next_value)
    return returns - np.asarray(values, dtype=np.float64)


def gae(
    values: np.ndarray,
    rewards: np.ndarray,
    step_offsets: np.ndarray,
    *,
    gamma: float,
    lam: float | np.ndarray,
    next_value: np.ndarray,
    next_advantage: np.ndarray | None = None,
) -> np.ndarray:
    """A_k = delta_k + gamma * lambda * A_{k+1}; ``lam`` is a scalar or one value per row."""
    delta = td_errors(values, rewards, step_offsets, gamma=gamma, next_value=next_value)
    return gae_from_td(delta, step_offsets, gamma=gamma, lam=lam, next_advantage=next_advantage)


def gae_from_td(
    delta: np.ndarray,
    step_offsets: np.ndarray,
    *,
    gamma: float,
    lam: float | np.ndarray,
    next_advantage: np.ndarray | None = None,
) -> np.ndarray:
    """GAE from TD errors already computed (they do not depend on lambda, so one set serves
    several lambdas): A_k = delta_k + gamma * lambda * A_{k+1}."""
    coef = gamma * _per_step(lam, step_offsets)
    return reverse_discounted_scan(delta, coef, step_offsets, next_advantage)


def adaptive_lambda(action_counts: np.ndarray, alpha: float) -> np.ndarray:
    """VAPO's length-adaptive lambda = clamp(1 - 1 / (alpha * l), 0, 1), l = action tokens."""
    n_actions = np.asarray(action_counts, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lam = 1.0 - 1.0 / (alpha * n_actions)
    return np.clip(np.nan_to_num(lam, nan=0.0, neginf=0.0), 0.0, 1.0)


def actions_after(
    action_counts: np.ndarray, rollout_codes: np.ndarray, segment_rank: np.ndarray
) -> np.ndarray:
    """N_{>s}: action tokens in the later segments of the same rollout, one per segment row."""
    order = np.lexsort((segment_rank, rollout_codes))
    counts = np.asarray(action_counts, dtype=np.int64)[order]
    codes = rollout_codes[order]
    totals = np.bincount(codes, weights=counts).astype(np.int64)
    inclusive = np.cumsum(counts)
    first_of_rollout = np.r_[True, codes[1:] != codes[:-1]]
    base = np.maximum.accumulate(np.where(first_of_rollout, inclusive - counts, 0))
    after = np.empty_like(counts)
    after[order] = totals[codes] - (inclusive - base)
    return after


Moments: TypeAlias = "tuple[np.ndarray, np.ndarray, np.ndarray]"
"""Count, mean and M2 per batch."""


def moments(x: np.ndarray, batch: np.ndarray, n_batches: int) -> Moments:
    """Count, mean and M2 (two passes) of values ``x`` per batch ``batch[i]``."""
    x = np.asarray(x, dtype=np.float64)
    count = np.bincount(batch, minlength=n_batches).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, np.bincount(batch, x, minlength=n_batches) / count, 0.0)
    m2 = np.bincount(batch, (x - mean[batch]) ** 2, minlength=n_batches)
    return count, mean, m2


def moments_of_one(x: np.ndarray, batch: int, n_batches: int) -> Moments:
    """:func:`moments` of values ``x`` that are all of batch ``batch``."""
    x = np.asarray(x, dtype=np.float64)
    count, mean, m2 = np.zeros(n_batches), np.zeros(n_batches), np.zeros(n_batches)
    if len(x):
        count[batch] = len(x)
        mean[batch] = x.mean()
        centred = x - mean[batch]
        m2[batch] = np.dot(centred, centred)
    return count, mean, m2


class BatchMoments:
    """Count, mean and M2 (sum of squared deviations) of values per batch, built up chunk by
    chunk: each chunk's moments are taken in two passes, then merged with Chan et al.'s
    formula, so a batch spread over many chunks gets the same numbers as all at once.
    """

    def __init__(self, n_batches: int):
        self.count = np.zeros(n_batches)
        self.mean = np.zeros(n_batches)
        self.m2 = np.zeros(n_batches)

    def add(self, x: np.ndarray, batch: np.ndarray) -> None:
        """Add values ``x``, each of batch ``batch[i]``."""
        self.merge(moments(x, batch, len(self.count)))

    def merge(self, chunk: Moments) -> None:
        """Add a chunk's moments (Chan et al.'s pairwise update)."""
        count, mean, m2 = chunk
        with np.errstate(invalid="ignore", divide="ignore"):
            total = self.count + count
            frac = np.where(total > 0, count / total, 0.0)
        delta = mean - self.mean
        self.m2 += m2 + delta**2 * self.count * frac
        self.mean += delta * frac
        self.count = total

    def var(self, ddof: int) -> np.ndarray:
        """Variance per batch with ``ddof`` (0 where a batch has ``ddof`` values or fewer)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > ddof, self.m2 / (self.count - ddof), 0.0)


def whiten(
    x: np.ndarray, batch_codes: np.ndarray, n_batches: int, *, ddof: int, eps: float
) -> np.ndarray:
    """Token-weighted whitening per batch: (x - mean_b) / sqrt(var_b + eps), var with ``ddof``.

    ``x`` holds the action-token values; ``batch_codes`` the batch of each (float64 out).
    Whitening [1, 2, 3, 4] with ddof 1 gives [-1.161895, -0.387298, 0.387298, 1.161895].
    """
    moments = BatchMoments(n_batches)
    moments.add(x, batch_codes)
    std = np.sqrt(moments.var(ddof) + eps)
    centred = np.asarray(x, dtype=np.float64) - moments.mean[batch_codes]
    white: np.ndarray = centred / std[batch_codes]
    return white
