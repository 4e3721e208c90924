"""Per-step credit for agents: every row is one step (an observation → action turn) of a
trajectory, and the advantage is one number per step, from the steps' rewards.

Inputs are one entry per step: ``trajectories`` (int64 code), ``ranks`` (the step's place in
its trajectory, from 0) and per-step float64 values; ``codes`` are int64 group indices in
``[0, n_groups)``. Everything is float64.

- Returns within a trajectory (:func:`step_returns`): G_t = r_t + γ·G_{t+1}, G after the last
  step 0. Step rewards [0, 0.5, 1], γ = 0.5: G = [0.5, 1, 1].
- Normalisation within groups (:func:`normalise`): (x − centre) / (scale + eps), or x − centre
  without a scale; the centre and scale the group's (ddof 1, as ``torch.std``), the whole
  batch's, 1 or none, with the rule for a group of one that each framework uses.
- Anchor-state groups (:func:`similar_states`): GiGPO's steps whose observations match, exactly
  or above a similarity ratio.
- Turns (:func:`turn_counts`, :func:`turn_returns`): a row's action spans, and returns
  discounted per turn, not per token (ROLL's ``agentic_reinforce``).
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Literal

from advcli.core.ragged import row_of
from advcli.core.scan import linear_scan, reverse_discounted_scan
from advcli.lazy_imports import np

Centre = Literal["group", "batch", "none"]
StepScale = Literal["group", "batch", "one", "none"]
Lone = Literal["raw", "zero", "keep"]


def next_step(trajectories: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Per step: the row of its trajectory's next step, −1 for the last.

    >>> next_step(np.array([0, 0, 1, 0]), np.array([1, 0, 0, 2])).tolist()
    [3, 0, -1, -1]
    """
    order = np.lexsort((ranks, trajectories))
    t = trajectories[order]
    out = np.full(len(t), -1, dtype=np.int64)
    same = t[1:] == t[:-1]
    out[order[:-1][same]] = order[1:][same]
    return out


def step_returns(
    rewards: np.ndarray,
    trajectories: np.ndarray,
    ranks: np.ndarray,
    gamma: float | np.ndarray,
) -> np.ndarray:
    """G_t = r_t + γ_t·G_{t+1} along each trajectory's steps in rank order (rows in any order);
    ``gamma`` is one discount, or one per step (what its next step's return is worth to it).

    >>> step_returns(np.array([1.0, 0.0, 0.5]), np.array([0, 0, 0]), np.array([2, 0, 1]), 0.5)
    array([1. , 0.5, 1. ])
    """
    order = np.lexsort((-ranks, trajectories))  # each trajectory's last step first
    t = trajectories[order]
    starts = np.r_[True, t[1:] != t[:-1]] if len(t) else np.zeros(0, dtype=bool)
    coef = np.broadcast_to(np.asarray(gamma, np.float64), len(t))[order]
    out = np.empty(len(rewards))
    out[order] = linear_scan(np.asarray(rewards, np.float64)[order], np.where(starts, 0.0, coef))
    return out


def normalise(
    x: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    *,
    centre: Centre,
    scale: StepScale,
    eps: float,
    lone: Lone,
    min_std: float | None = None,
) -> np.ndarray:
    """(x − c) / (s + eps) per group, or x − c when ``scale`` is ``"none"``.

    c is the group's mean, the batch's (all entries) or 0 (``centre``); s the group's std, the
    batch's (both ddof 1) or 1 (``scale="one"``: Trinity-RFT divides by 1 + eps). A group of
    one (``lone``): ``"raw"`` takes c = 0 and s = 1 (verl-agent's and Trinity-RFT's episode
    term: x / (1 + eps)), ``"zero"`` gives 0, ``"keep"`` applies the formula (its own mean,
    so 0 when centred on the group). With ``min_std`` (ROLL: 1e-6) a group whose scale is at
    most it gives 0.

    >>> normalise(np.array([1.0, 0.0, 2.0]), np.array([0, 0, 1]), 2, centre="group",
    ...           scale="group", eps=0.0, lone="raw").tolist()
    [0.7071067811865475, -0.7071067811865475, 2.0]
    """
    x = np.asarray(x, dtype=np.float64)
    alone = np.bincount(codes, minlength=n_groups)[codes] == 1
    group_mean, group_std = (stat[codes] for stat in mean_std(x, codes, n_groups))
    batch_std = float(np.std(x, ddof=1)) if len(x) > 1 else np.nan
    means = {"group": group_mean, "batch": np.full(len(x), x.mean() if len(x) else 0.0)}
    c = means.get(centre, np.zeros(len(x)))
    stds = {"group": group_std, "batch": np.full(len(x), batch_std), "one": np.ones(len(x))}
    s = stds.get(scale)
    if lone == "raw":
        c = np.where(alone, 0.0, c)
        s = None if s is None else np.where(alone, 1.0, s)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = x - c if s is None else (x - c) / (s + eps)
    if lone == "zero":
        out[alone] = 0.0
    if min_std is not None and s is not None:
        out[~(s > min_std) | alone] = 0.0  # ROLL: groups of one, or (near) constant: 0
    return out


def mean_std(x: np.ndarray, codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the mean and the std (ddof 1; NaN for a group of one)."""
    size = np.bincount(codes, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=x, minlength=n_groups) / size
        sq = np.bincount(codes, weights=(x - mean[codes]) ** 2, minlength=n_groups)
        return mean, np.sqrt(sq / (size - 1))


def tied(x: np.ndarray, codes: np.ndarray, n_groups: int, tol: float) -> np.ndarray:
    """Per group: it has two entries or more and they span at most ``tol`` (no signal)."""
    size = np.bincount(codes, minlength=n_groups)
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, codes, x)
    np.minimum.at(lo, codes, x)
    out: np.ndarray = (size >= 2) & (hi - lo <= tol)
    return out


def anchor_groups(groups: np.ndarray, states: np.ndarray, *, within: bool) -> np.ndarray:
    """Each step's anchor-state group: the steps with the same state code (``within``: in the
    same episode group too); a step without a state (code −1) is alone.

    >>> anchor_groups(np.array([0, 0, 1, 1]), np.array([5, 5, 5, -1]), within=True).tolist()
    [0, 0, 2, 1]
    """
    key = np.c_[groups, states] if within else states[:, None]
    alone = states < 0
    key = np.c_[key, np.where(alone, np.arange(len(states)), -1)]
    _, codes = np.unique(key, axis=0, return_inverse=True)
    out: np.ndarray = codes.ravel().astype(np.int64)
    return out


def similar_states(texts: list[str], threshold: float) -> np.ndarray:
    """GiGPO's similarity clusters of one episode group's distinct states, in order of first
    appearance (verl-agent ``build_step_group``): each state joins the first cluster whose
    first member it matches, ``SequenceMatcher(None, state, first).ratio() >= threshold``,
    else starts one. The cluster of each state; order-dependent, as verl-agent's.

    The same clusters in less time: a ratio, 2·M / (|a| + |b|) with M characters matched, is
    at most 2·(the characters the two have in common, as multisets) / (|a| + |b|), so a first
    member whose bound is below the threshold cannot match (vectorised over every cluster);
    each first member's matcher keeps its index of characters (``set_seq2``) for all the
    states it is compared with.

    >>> similar_states(["go left", "go left!", "stop"], 0.9).tolist()
    [0, 0, 1]
    """
    counts, sizes = character_counts(texts)
    first_counts = np.empty_like(counts)  # of each cluster's first state, in cluster order
    first_sizes = np.empty_like(sizes)
    matchers: list[SequenceMatcher[str]] = []
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        k = len(matchers)
        total = (first_sizes[:k] + sizes[i]).astype(np.float64)
        common = np.minimum(first_counts[:k], counts[i]).sum(axis=1)
        bound = np.where(total > 0, 2.0 * common / np.maximum(total, 1.0), 1.0)
        match = next((int(c) for c in np.flatnonzero(bound >= threshold)
                      if _ratio(matchers[c], text) >= threshold), None)  # fmt: skip
        if match is None:
            match, first_counts[k], first_sizes[k] = k, counts[i], sizes[i]
            matchers.append(SequenceMatcher(None, "", text))
        out[i] = match
    return out


def _ratio(matcher: SequenceMatcher[str], text: str) -> float:
    """``SequenceMatcher(None, text, first).ratio()``, ``first`` the matcher's second sequence."""
    matcher.set_seq1(text)
    return matcher.ratio()


CHARACTER_BUCKETS = 128
"""Characters are counted by code point modulo this (ASCII apart): two characters sharing a
bucket only raise a bound on the characters two texts have in common."""


def character_counts(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per text, its characters counted by bucket (int64, texts x :data:`CHARACTER_BUCKETS`),
    and its length."""
    sizes = np.array([len(t) for t in texts], dtype=np.int64)
    points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    of = np.repeat(np.arange(len(texts)), sizes)
    flat = of * CHARACTER_BUCKETS + points % CHARACTER_BUCKETS
    counts = np.bincount(flat, minlength=len(texts) * CHARACTER_BUCKETS)
    return counts.reshape(len(texts), CHARACTER_BUCKETS), sizes


def turn_starts(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per token: it begins an action span (a turn) of its row."""
    row_start = np.zeros(len(mask), dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < len(mask)]] = True
    out: np.ndarray = mask & (row_start | ~np.r_[False, mask[:-1]])
    return out


def turn_ends(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per token: it ends an action span (a turn) of its row."""
    row_end = np.zeros(len(mask), dtype=bool)
    row_end[offsets[1:][np.diff(offsets) > 0] - 1] = True
    out: np.ndarray = mask & (row_end | ~np.r_[mask[1:], False])
    return out


def turn_counts(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row: its turns (action spans).

    >>> turn_counts(np.array([1, 0, 1, 1, 0], bool), np.array([0, 4, 5])).tolist()
    [2, 0]
    """
    starts = np.r_[0, np.cumsum(turn_starts(mask, offsets))]
    spans: np.ndarray = np.diff(starts[offsets]).astype(np.int64)
    return spans


def last_actions(mask: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows that have an action token, and the flat index of each one's last.

    >>> [x.tolist() for x in last_actions(np.array([1, 1, 0, 0, 1], bool), np.array([0, 3, 4, 5]))]
    [[0, 2], [1, 4]]
    """
    at = np.flatnonzero(mask)
    rows = row_of(offsets)[at]
    last = np.r_[rows[1:] != rows[:-1], True] if len(at) else np.zeros(0, dtype=bool)
    return rows[last], at[last]


def turn_returns(
    rewards: np.ndarray, turns: np.ndarray, gamma: float, carry: np.ndarray | None = None
) -> np.ndarray:
    """Per turn, discounted per turn within its row: G_k = r_k + γ·G_{k+1}, after the row's
    last turn ``carry`` (the return of the rollout's later segments; 0). ``rewards`` has one
    per turn, rows of ``turns`` turns.

    >>> turn_returns(np.array([0.0, 0.0, 1.0]), np.array([3]), 0.5).tolist()
    [0.25, 0.5, 1.0]
    """
    offsets = np.r_[0, np.cumsum(turns)].astype(np.int64)
    return reverse_discounted_scan(np.asarray(rewards, np.float64), gamma, offsets, carry)


def row_turn_returns(
    mask: np.ndarray, offsets: np.ndarray, token_rewards: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the return at its first turn of the rewards on its turns' last tokens, Σ_k γ^k
    r_k (0 without a turn), and how many nonzero token rewards lie elsewhere (ROLL ignores
    them: a turn's reward is the one on its last token).

    >>> [x.tolist() for x in row_turn_returns(np.array([1, 1, 0, 1], bool), np.array([0, 4]),
    ...                                       np.array([0.5, 1.0, 2.0, 1.0]), 0.5)]
    [[1.5], [2]]
    """
    ends = turn_ends(mask, offsets)
    turns = turn_counts(mask, offsets)
    returns = turn_returns(token_rewards[ends], turns, gamma)
    first = np.r_[0, np.cumsum(turns)][:-1]
    at_start = np.where(turns > 0, returns[np.minimum(first, max(len(returns) - 1, 0))], 0.0)
    elsewhere = (token_rewards != 0) & ~ends
    ignored = np.bincount(row_of(offsets)[elsewhere], minlength=len(turns)).astype(np.int64)
    return at_start, ignored


def action_reward_moments(
    mask: np.ndarray, offsets: np.ndarray, token_rewards: np.ndarray
) -> dict[str, np.ndarray]:
    """Per row: Σ r and Σ r² of the token rewards over its action tokens, and the reward on
    its last action token (what whitening the rewards over a batch's actions needs).

    >>> {k: v.tolist() for k, v in action_reward_moments(np.array([1, 1, 0], bool),
    ...     np.array([0, 3]), np.array([1.0, 2.0, 5.0])).items()}
    {'action_reward_sum': [3.0], 'action_reward_sq': [5.0], 'last_action_reward': [2.0]}
    """
    rows = row_of(offsets)
    n = len(offsets) - 1
    r = np.where(mask, token_rewards, 0.0)
    last = np.zeros(n)
    owners, at = last_actions(mask, offsets)
    last[owners] = token_rewards[at]
    return {
        "action_reward_sum": np.bincount(rows, weights=r, minlength=n),
        "action_reward_sq": np.bincount(rows, weights=r * r, minlength=n),
        "last_action_reward": last,
    }
