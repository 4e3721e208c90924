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
- Turns (:func:`turns_left`, :func:`turn_counts`, :func:`later_turns`): per action token,
  how many action spans (turns) of its row follow its own; per row, its turns; per segment,
  the turns of its rollout's later segments (ROLL's per-turn discount).
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Literal

import numpy as np

from advcli.core.scan import linear_scan

Centre = Literal["group", "batch", "none"]
StepScale = Literal["group", "batch", "one", "none"]
Lone = Literal["raw", "zero", "keep"]


def step_returns(
    rewards: np.ndarray, trajectories: np.ndarray, ranks: np.ndarray, gamma: float
) -> np.ndarray:
    """G_t = r_t + γ·G_{t+1} along each trajectory's steps in rank order (rows in any order).

    >>> step_returns(np.array([1.0, 0.0, 0.5]), np.array([0, 0, 0]), np.array([2, 0, 1]), 0.5)
    array([1.  , 0.5 , 1.  ])
    """
    order = np.lexsort((-ranks, trajectories))  # each trajectory's last step first
    t = trajectories[order]
    starts = np.r_[True, t[1:] != t[:-1]] if len(t) else np.zeros(0, dtype=bool)
    out = np.empty(len(rewards))
    out[order] = linear_scan(np.asarray(rewards, np.float64)[order], np.where(starts, 0.0, gamma))
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
    [0, 0, 1, 2]
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

    >>> similar_states(["go left", "go left!", "stop"], 0.9).tolist()
    [0, 0, 1]
    """
    firsts: list[str] = []
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        match = next(
            (k for k, first in enumerate(firsts)
             if SequenceMatcher(None, text, first).ratio() >= threshold),
            None,
        )  # fmt: skip
        if match is None:
            match = len(firsts)
            firsts.append(text)
        out[i] = match
    return out


def turns_left(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per token: the number of action spans (maximal runs of action tokens) of its row after
    the one it is in (on other tokens: the spans after the last one before them).

    >>> turns_left(np.array([0, 1, 1, 0, 1, 0, 1], bool), np.array([0, 7])).tolist()
    [3, 2, 2, 2, 1, 1, 0]
    """
    n = len(mask)
    row_start = np.zeros(n, dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < n]] = True
    begins = mask & (row_start | ~np.r_[False, mask[:-1]])
    spans_so_far = np.cumsum(begins)  # over the whole batch
    lengths = np.diff(offsets)
    row_total = np.add.reduceat(begins, offsets[:-1][lengths > 0]) if n else np.zeros(0)
    totals = np.zeros(len(lengths), dtype=np.int64)
    totals[lengths > 0] = row_total
    before_row = np.r_[0, np.cumsum(totals)][:-1]
    row_end = np.repeat(before_row + totals, lengths)
    out: np.ndarray = row_end - spans_so_far
    return out


def turn_counts(mask: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its action spans, and whether its last token is an action (1 or 0).

    >>> [x.tolist() for x in turn_counts(np.array([1, 0, 1, 1, 0], bool), np.array([0, 4, 5]))]
    [[2, 0], [1, 0]]
    """
    n = len(mask)
    row_start = np.zeros(n, dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < n]] = True
    begins = mask & (row_start | ~np.r_[False, mask[:-1]])
    spans = np.diff(np.r_[0, np.cumsum(begins)][offsets]).astype(np.int64)
    nonempty = np.diff(offsets) > 0
    last = np.zeros(len(spans), dtype=np.int64)
    last[nonempty] = mask[offsets[1:][nonempty] - 1]
    return spans, last


def later_turns(turns: np.ndarray, trajectories: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Per segment: the turns of the later segments of its trajectory.

    >>> later_turns(np.array([2, 1, 3]), np.array([0, 0, 0]), np.array([0, 2, 1])).tolist()
    [4, 0, 1]
    """
    after_self = step_returns(turns.astype(np.float64), trajectories, ranks, 1.0)
    out: np.ndarray = (after_self - turns).astype(np.int64)
    return out
