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
    """GRPO per rollout. Zero-variance groups -> 0 (under a baseline of the group's own);
    singletons, where the group is used (baseline or scale) -> 0 or (raw) mean 0, std 1.
    Leave-one-out: the others' mean, and their std (ddof 1; none, so no division, with fewer
    than two others or when it is 0). Batch baseline: the batch's mean; none: 0."""
    rewards = [float(r) for r in rewards]
    out = [0.0] * len(rewards)
    relative = baseline in ("group", "leave-one-out")
    grouped = relative or scale in ("group", "leave-one-out")
    batch_std, batch_mean = {}, {}
    for b, idx in _members(batch_labels).items() if batch_labels is not None else ():
        batch_std[b] = _std([rewards[i] for i in idx], ddof)
        batch_mean[b] = _mean([rewards[i] for i in idx])
    for idx in _members(labels).values():
        xs = [rewards[i] for i in idx]
        n = len(xs)
        if relative and n >= 2 and max(xs) - min(xs) <= tol:
            continue  # zero-variance: exactly 0
        if grouped and n == 1 and singleton != "raw":
            continue  # singleton: 0
        if grouped and n == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = _mean(xs), _std(xs, ddof)
        for i in idx:
            others = [rewards[j] for j in idx if j != i]
            base = {
                "group": mean,
                "leave-one-out": _mean(others) if others else mean,
                "batch": batch_mean.get(batch_labels[i]) if batch_labels is not None else None,
                "none": 0.0,
            }[baseline]
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


# --------------------------------------------------------------------------------------------
# The frameworks' estimators (one value per rollout unless said), as their code computes them


def _flat(xs, tol):
    return len(xs) >= 2 and max(xs) - min(xs) <= tol


def _with_signal(rewards, labels, out, singleton, tol):
    """The groups of two or more whose rewards differ, as (members, rewards); a singleton's
    advantage goes to ``out`` on the way: 0, or (raw) its reward."""
    for idx in _members(labels).values():
        xs = [float(rewards[i]) for i in idx]
        if len(idx) == 1:
            out[idx[0]] = xs[0] if singleton == "raw" else 0.0
        elif not _flat(xs, tol):
            yield idx, xs


def opo(rewards, labels, lengths, *, singleton="zero", tol=1e-9):
    """R - sum(|o| R) / sum(|o|) over the group; singleton: 0 or (raw) R."""
    out = [0.0] * len(rewards)
    for idx, xs in _with_signal(rewards, labels, out, singleton, tol):
        w = sum(lengths[i] for i in idx)
        base = sum(lengths[i] * float(rewards[i]) for i in idx) / w if w else _mean(xs)
        for i in idx:
            out[i] = float(rewards[i]) - base
    return out


def grpo_passk(rewards, labels, *, ddof=1, eps=1e-6, scale=True, singleton="zero", tol=1e-9):
    """Only the best (first among ties) gets (R_max - R_second) / (std + eps)."""
    out = [0.0] * len(rewards)
    for idx, xs in _with_signal(rewards, labels, out, singleton, tol):
        best = idx[0]
        for i in idx:
            if float(rewards[i]) > float(rewards[best]):
                best = i
        second = max(float(rewards[i]) for i in idx if i != best)
        gap = float(rewards[best]) - second
        out[best] = gap / (_std(xs, ddof) + eps) if scale else gap
    return out


def gpg(rewards, labels, batch_labels, *, f_norm=1.0, singleton="zero", tol=1e-9):
    """alpha_b (R - mean_g) / f_norm, alpha_b = |b| / max(1, nonzero rewards in b)."""
    alpha = {}
    for b, idx in _members(batch_labels).items():
        alpha[b] = len(idx) / max(1, sum(1 for i in idx if float(rewards[i]) != 0.0))
    out = [0.0] * len(rewards)
    for idx in _members(labels).values():
        xs = [float(rewards[i]) for i in idx]
        if len(idx) == 1:
            i = idx[0]
            out[i] = alpha[batch_labels[i]] * xs[0] / f_norm if singleton == "raw" else 0.0
            continue
        if _flat(xs, tol):
            continue
        for i in idx:
            out[i] = alpha[batch_labels[i]] * (float(rewards[i]) - _mean(xs)) / f_norm
    return out


def maxrl(rewards, labels, *, tol=1e-9):
    """(R - mean) / mean, 0 where mean <= 0 and for singletons."""
    out = [0.0] * len(rewards)
    for idx in _members(labels).values():
        xs = [float(rewards[i]) for i in idx]
        if len(idx) == 1 or _flat(xs, tol) or _mean(xs) <= 0:
            continue
        for i in idx:
            out[i] = (float(rewards[i]) - _mean(xs)) / _mean(xs)
    return out


def sppo(rewards, batch_labels, *, beta, tol=1e-9):
    """R - (1/beta) log mean exp(beta R) over the batch."""
    out = [0.0] * len(rewards)
    for idx in _members(batch_labels).values():
        xs = [float(rewards[i]) for i in idx]
        if len(xs) < 2 or max(xs) - min(xs) <= tol:
            continue
        if beta == 0:
            base = _mean(xs)
        else:
            top = max(beta * x for x in xs)
            base = (top + math.log(sum(math.exp(beta * x - top) for x in xs) / len(xs))) / beta
        for i in idx:
            out[i] = float(rewards[i]) - base
    return out


def gdpo_verl(columns, weights, labels, lengths, *, ddof=1, eps=1e-6, singleton="raw", tol=1e-9):
    """verl: per column GRPO (singleton mean 0 std 1), weighted sum, then token-weighted
    whitening over the batch (ddof 1, rsqrt(var + 1e-8))."""
    n = len(labels)
    score = [0.0] * n
    for col, w in zip(columns, weights, strict=True):
        z = grpo(col, labels, ddof=ddof, eps=eps, singleton=singleton, tol=tol)
        score = [s + w * zi for s, zi in zip(score, z, strict=True)]
    total = sum(lengths)
    mean = sum(n * s for n, s in zip(lengths, score, strict=True)) / total
    var = sum(n * (s - mean) ** 2 for n, s in zip(lengths, score, strict=True)) / (total - 1)
    out = [(s - mean) / math.sqrt(var + 1e-8) for s in score]
    if singleton == "zero":
        sizes = {g: len(i) for g, i in _members(labels).items()}
        out = [0.0 if sizes[g] == 1 else a for a, g in zip(out, labels, strict=True)]
    return out, score


def _nanstats(xs, ddof):
    present = [x for x in xs if not math.isnan(x)]
    if len(present) <= ddof:
        return (_mean(present) if present else math.nan), math.nan
    return _mean(present), _std(present, ddof)


def gdpo_trl(columns, weights, labels, *, eps=1e-4):
    """TRL normalize_then_sum: NaN-aware group z-scores (group of one: 0), nansum of the
    weighted ones (NaN if all missing), then a NaN-aware batch z-score; NaN -> 0."""
    n = len(labels)
    members = _members(labels)
    score = [0.0] * n
    scored = [False] * n
    for col, w in zip(columns, weights, strict=True):
        for idx in members.values():
            xs = [float(col[i]) for i in idx]
            mean, std = _nanstats(xs, 1)
            for i, x in zip(idx, xs, strict=True):
                if math.isnan(x):
                    continue
                scored[i] = True
                z = 0.0 if len(idx) == 1 else (x - mean) / (std + eps)
                if not math.isnan(z):
                    score[i] += w * z
    s = [v if ok else math.nan for v, ok in zip(score, scored, strict=True)]
    mean, std = _nanstats(s, 1)
    out = []
    for v in s:
        a = (v - mean) / (std + eps)
        out.append(0.0 if math.isnan(a) else a)
    return out, score


def process(step_rewards, step_ends, labels, n_tokens, mask, *, ddof=0, eps=1e-6, tol=1e-9):
    """Per row (one row per rollout): per-token advantages, the sum of the group-normalised
    rewards of the steps ending at or after the token (action tokens only)."""
    out = []
    members = _members(labels)
    norm = {}
    for idx in members.values():
        xs = [float(x) for i in idx for x in step_rewards[i]]
        flat = len(idx) == 1 or not xs or max(xs) - min(xs) <= tol
        for i in idx:
            if flat:
                norm[i] = [0.0] * len(step_rewards[i])
            else:
                m, s = _mean(xs), _std(xs, ddof)
                norm[i] = [(float(x) - m) / (s + eps) for x in step_rewards[i]]
    for i in range(len(labels)):
        row = []
        for t in range(n_tokens[i]):
            a = sum(z for z, e in zip(norm[i], step_ends[i], strict=True) if e >= t)
            row.append(a if mask[i][t] else 0.0)
        out.append(row)
    return out


def kl(logprob, ref, estimator):
    """verl kl_penalty, one token."""
    d = float(logprob) - float(ref)
    if estimator == "k1":
        return d
    if estimator == "abs":
        return abs(d)
    if estimator == "k2":
        return 0.5 * d * d
    c = min(max(-d, -20.0), 20.0)
    return min(max(math.exp(c) - c - 1.0, -10.0), 10.0)
