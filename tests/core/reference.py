"""Plain float64 reference loops for the numerical core, written from docs/semantics.md.

Nothing here calls ``advcli``: every estimator is a Python loop per rollout or per token, as
simple as possible, so that the vectorised core can be checked against it.
"""

from __future__ import annotations

import math

# --------------------------------------------------------------------------------------------
# Scans


def linear_scan(x, a):
    """y[i] = x[i] + a[i] * y[i - 1], y[-1] = 0."""
    out = []
    prev = 0.0
    for xi, ai in zip(x, a, strict=True):
        prev = float(xi) + float(ai) * prev
        out.append(prev)
    return out


def reverse_scan_rows(x, coef, offsets, carry=None):
    """Per row: y[k] = x[k] + coef[k] * y[k + 1]; after the row's last element y = carry[row]."""
    out = [0.0] * len(x)
    for r in range(len(offsets) - 1):
        nxt = 0.0 if carry is None else float(carry[r])
        for k in range(int(offsets[r + 1]) - 1, int(offsets[r]) - 1, -1):
            nxt = float(x[k]) + float(coef[k]) * nxt
            out[k] = nxt
    return out


# --------------------------------------------------------------------------------------------
# Group and batch baselines (one value per rollout)


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs, ddof):
    """Two-pass std; NaN when there are not more members than ddof."""
    if len(xs) <= ddof:
        return math.nan
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def _members(labels):
    groups: dict = {}
    for i, g in enumerate(labels):
        groups.setdefault(g, []).append(i)
    return groups


def grpo(
    rewards,
    labels,
    *,
    ddof=0,
    eps=1e-6,
    eps_placement="add",
    baseline="group",
    scale="group",
    singleton="zero",
    tol=1e-9,
    batch_labels=None,
):
    """GRPO per rollout. Zero-variance groups -> 0; singletons -> 0 or (raw) mean 0, std 1.
    Leave-one-out: the others' mean, and their std (ddof 1; none, so no division, with fewer
    than two others or when it is 0)."""
    rewards = [float(r) for r in rewards]
    out = [0.0] * len(rewards)
    batch_std = {}
    if scale == "batch":
        for b, idx in _members(batch_labels).items():
            batch_std[b] = _std([rewards[i] for i in idx], ddof)
    for idx in _members(labels).values():
        xs = [rewards[i] for i in idx]
        n = len(xs)
        if n >= 2 and max(xs) - min(xs) <= tol:
            continue  # zero-variance: exactly 0
        if n == 1 and singleton != "raw":
            continue  # singleton: 0
        if n == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = _mean(xs), _std(xs, ddof)
        for i in idx:
            others = [rewards[j] for j in idx if j != i]
            base = _mean(others) if baseline == "leave-one-out" and others else mean
            if scale == "none":
                out[i] = rewards[i] - base
                continue
            if scale == "leave-one-out":
                s = _std(others, 1) if len(others) >= 2 else 0.0
                if s == 0.0:
                    out[i] = rewards[i] - base
                    continue
            else:
                s = std if scale == "group" else batch_std[batch_labels[i]]
            den = max(s, eps) if eps_placement == "max" else s + eps
            out[i] = (rewards[i] - base) / den
    return out


def rloo(rewards, labels, *, singleton="zero", tol=1e-9):
    """R_i minus the mean of the others of its group; singleton: 0 or (raw) R_i."""
    rewards = [float(r) for r in rewards]
    out = [0.0] * len(rewards)
    for idx in _members(labels).values():
        xs = [rewards[i] for i in idx]
        if len(xs) == 1:
            out[idx[0]] = xs[0] if singleton == "raw" else 0.0
            continue
        if max(xs) - min(xs) <= tol:
            continue
        for i in idx:
            others = [rewards[j] for j in idx if j != i]
            out[i] = rewards[i] - _mean(others)
    return out


def completion_batches(order, batch_size):
    """batch id and partial flag per rollout (original positions)."""
    n = len(order)
    batch = [0] * n
    partial = [False] * n
    if batch_size is None:
        return batch, partial
    chunks = [list(order[i : i + batch_size]) for i in range(0, n, batch_size)]
    for b, chunk in enumerate(chunks):
        for i in chunk:
            batch[i] = b
            partial[i] = len(chunk) < batch_size
    return batch, partial


def batch_mean(rewards, order, batch_size, *, tol=1e-9):
    """R_i - mean of its completion batch (trailing partial batch kept); equal batches -> 0."""
    rewards = [float(r) for r in rewards]
    out = [0.0] * len(rewards)
    for i in range(0, len(order), batch_size):
        idx = list(order[i : i + batch_size])
        xs = [rewards[j] for j in idx]
        if max(xs) - min(xs) <= tol:
            continue
        m = _mean(xs)
        for j in idx:
            out[j] = rewards[j] - m
    return out


# --------------------------------------------------------------------------------------------
# Temporal estimators (per token)


def place_rewards(mask, offsets, outcome=None, token_rewards=None):
    """Rewards on action tokens: outcome on the last action, strays moved to the preceding one.

    Returns (rewards, moved, orphaned) like the core.
    """
    n_rows = len(offsets) - 1
    rewards = [0.0] * len(mask)
    moved = [False] * n_rows
    orphaned = [False] * n_rows
    for r in range(n_rows):
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        raw = [0.0] * (hi - lo)
        if token_rewards is not None:
            raw = [float(token_rewards[t]) for t in range(lo, hi)]
        actions = [t for t in range(lo, hi) if mask[t]]
        if outcome is not None and float(outcome[r]) != 0.0:
            if actions:
                raw[actions[-1] - lo] += float(outcome[r])
            else:
                orphaned[r] = True
        last_action = None
        for t in range(lo, hi):
            if mask[t]:
                last_action = t
                rewards[t] += raw[t - lo]
            elif raw[t - lo] != 0.0:
                if last_action is None:
                    orphaned[r] = True
                else:
                    moved[r] = True
                    rewards[last_action] += raw[t - lo]
    return rewards, moved, orphaned


def temporal(
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
    """Per-token advantages (0 off the action tokens) from per-token placed ``rewards``.

    ``method``: "td", "mc", "gae" or "returns". ``lam``: scalar or per row. ``skip``: the
    time steps are the action tokens. ``step``: every token from the first to the last action,
    a non-action token being a zero-value, zero-reward step.
    """
    n_rows = len(offsets) - 1
    out = [0.0] * len(mask)
    for r in range(n_rows):
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        actions = [t for t in range(lo, hi) if mask[t]]
        if not actions:
            continue
        # skip: the action tokens; step: every token from the first to the last action
        steps = actions if observations == "skip" else list(range(actions[0], actions[-1] + 1))
        lam_r = float(lam[r]) if hasattr(lam, "__len__") else float(lam)
        nv = 0.0 if next_value is None else float(next_value[r])
        v_next = nv
        g = nv  # return after the last step
        a = 0.0 if next_advantage is None else float(next_advantage[r])
        for t in reversed(steps):
            v = float(values[t]) if mask[t] else 0.0
            rew = float(rewards[t]) if mask[t] else 0.0
            delta = rew + gamma * v_next - v
            g = rew + gamma * g
            a = delta + gamma * lam_r * a
            if mask[t]:
                out[t] = {"td": delta, "mc": g - v, "gae": a, "returns": g}[method]
            v_next = v
    return out


def whiten(x, batch_labels, *, ddof, eps=1e-8):
    """(x - mean_b) / sqrt(var_b + eps) per batch, var with ddof (0 when n <= ddof)."""
    out = [0.0] * len(x)
    for idx in _members(batch_labels).values():
        xs = [float(x[i]) for i in idx]
        m = _mean(xs)
        n = len(xs)
        var = sum((v - m) ** 2 for v in xs) / (n - ddof) if n > ddof else 0.0
        for i in idx:
            out[i] = (float(x[i]) - m) / math.sqrt(var + eps)
    return out


def adaptive_lambda(action_count, alpha):
    """clamp(1 - 1 / (alpha * l), 0, 1); 0 when alpha * l == 0."""
    if alpha * action_count == 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - 1.0 / (alpha * action_count)))


def actions_after(action_counts, rollout, segment_rank):
    """Per segment row: action tokens in later segments of the same rollout."""
    out = []
    for i in range(len(action_counts)):
        out.append(
            sum(
                int(action_counts[j])
                for j in range(len(action_counts))
                if rollout[j] == rollout[i] and segment_rank[j] > segment_rank[i]
            )
        )
    return out
