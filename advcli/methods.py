"""Each method in two steps: a per-row plan, then its application to batches of tokens.

The plan is computed from the per-row scalar columns of the whole log (and, for the methods that
need them, from statistics gathered in earlier passes over the tokens); applying it to a batch of
rows needs nothing outside that batch. So a log larger than memory is annotated by streaming
its token columns, and any batching gives the same numbers.

Token passes a temporal method may need before the final one (see :func:`token_passes`):

- ``counts``: action tokens per row (adaptive lambda, segment compaction);
- ``chain``: each segment's first-step value and local advantage, to carry across the cuts;
- ``whiten``: mean and variance of the advantages over each batch's action tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from advcli.core import group as G
from advcli.core import temporal as T
from advcli.core.ragged import lengths
from advcli.core.scan import linear_scan
from advcli.io.rollouts import Rows, Tokens
from advcli.params import GROUP_METHODS, VALUE_METHODS, Params


@dataclass
class RowPlan:
    """What a method decided per row before seeing the tokens of the final pass."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)  # per-row output columns
    keep: np.ndarray | None = None  # bool per row; None keeps every row
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)  # for the summary
    advantage: np.ndarray | None = None  # group methods: the rollout's advantage, per row
    outcome: np.ndarray | None = None  # temporal: reward on the row's last action
    tail: np.ndarray | None = None  # temporal: the value (or return) after the row's last step
    tail_critic: np.ndarray | None = None  # the same for the returns' lambda
    lam: float | np.ndarray = 1.0  # scalar, or one per row
    scale: np.ndarray | None = None  # compaction: (gamma * lambda) ** N_{>s}, per row
    scale_critic: np.ndarray | None = None
    whiten_mean: np.ndarray | None = None  # per row: its batch's statistics
    whiten_std: np.ndarray | None = None


# --------------------------------------------------------------------------- rollout level


def rollout_rewards(rows: Rows) -> np.ndarray:
    """One reward per rollout: its last segment's."""
    return rows.reward[rows.last_segment_row()]


def rollout_groups(rows: Rows) -> np.ndarray:
    """The group code of each rollout."""
    return rows.group_codes[rows.last_segment_row()]


def completion_order(rows: Rows) -> np.ndarray:
    """Rollouts by completion: ``completion_time``, then rollout id; row order if no time."""
    first_row = np.full(rows.n_rollouts, rows.n_rows, dtype=np.int64)
    np.minimum.at(first_row, rows.rollout_codes, np.arange(rows.n_rows))
    if rows.completion_time is None:
        return np.argsort(first_row, kind="stable")
    key_rank = np.zeros(rows.n_rollouts, dtype=np.int64)
    if rows.rollout_keys is not None:
        order = np.argsort(rows.rollout_keys.to_numpy(zero_copy_only=False), kind="stable")
        key_rank[order] = np.arange(rows.n_rollouts)
    finished = rows.completion_time[rows.last_segment_row()]
    return np.lexsort((first_row, key_rank, finished))


def batches(rows: Rows, batch_size: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per rollout: batch id and partial flag; and the number of batches."""
    batch_id, partial = G.completion_batches(completion_order(rows), batch_size)
    return batch_id, partial, int(batch_id.max()) + 1 if len(batch_id) else 0


# --------------------------------------------------------------------------- group methods


class SingletonError(Exception):
    """A singleton group under ``--singleton error``; carries the first such row."""

    def __init__(self, row: int):
        self.row = row


def plan_group(rows: Rows, p: Params) -> RowPlan:
    """GRPO, RLOO and batch-mean: one advantage per rollout."""
    rewards = rollout_rewards(rows)
    per_rollout: dict[str, np.ndarray] = {}
    drop = np.zeros(rows.n_rollouts, dtype=bool)
    dropped: dict[str, int] = {}
    stats_out: dict = {}
    batch_id, partial, n_batches = batches(rows, p.batch_size)
    if p.method == "batch-mean":
        adv, stats = G.batch_mean(rewards, batch_id, n_batches, tol=p.zero_variance_tol)
        zero_var = stats.zero_variance[batch_id]
        per_rollout.update(
            batch_id=batch_id,
            batch_size=stats.size[batch_id],
            batch_mean=stats.mean[batch_id],
            partial_batch=partial,
            zero_variance=zero_var,
        )
        if p.partial == "drop" and partial.any():
            drop |= partial
            dropped["partial_batch"] = int(partial[rows.rollout_codes].sum())
            adv = np.where(partial, 0.0, adv)
    else:
        codes = rollout_groups(rows)
        n_groups = len(rows.group_keys)
        stats = G.group_stats(rewards, codes, n_groups, ddof=p.std_ddof, tol=p.zero_variance_tol)
        single = stats.singleton[codes]
        if p.singleton == "error" and single.any():
            raise SingletonError(int(np.flatnonzero(single[rows.rollout_codes])[0]))
        rule = "raw" if p.singleton == "raw" else "zero"
        if p.method == "grpo":
            bstd = None
            if p.scale == "batch":
                bstd = G.batch_std(rewards, batch_id, n_batches, ddof=p.std_ddof)
            adv = G.grpo(
                rewards,
                codes,
                stats,
                eps=p.eps,
                eps_placement=p.eps_placement,
                scale=p.scale,
                batch_std=bstd,
                singleton=rule,
            )
        else:
            adv = G.rloo(rewards, codes, stats, singleton=rule)
        zero_var = stats.zero_variance[codes]
        per_rollout.update(
            group_size=stats.size[codes],
            group_mean=stats.mean[codes],
            group_std=stats.std[codes],
            zero_variance=zero_var,
            singleton=single,
        )
        stats_out.update(
            zero_variance_groups=int(stats.zero_variance.sum()),
            singleton_groups=int(stats.singleton.sum()),
        )
        if p.singleton == "drop" and single.any():
            drop |= single
            dropped["singleton"] = int(single[rows.rollout_codes].sum())
    if p.zero_variance == "drop" and zero_var.any():
        drop |= zero_var & ~drop
        dropped["zero_variance"] = int(zero_var[rows.rollout_codes].sum())
    stats_out["zero_variance_rollout_share"] = float(zero_var.mean()) if len(zero_var) else 0.0
    codes = rows.rollout_codes
    columns = {"advantage": adv[codes].astype(np.float32)}
    columns.update({name: values[codes] for name, values in per_rollout.items()})
    return RowPlan(
        columns=columns,
        keep=~drop[codes],
        dropped=dropped,
        stats=stats_out,
        advantage=adv[codes],
    )


def apply_group(plan: RowPlan, tokens: Tokens, row0: int) -> dict[str, np.ndarray]:
    """Broadcast each row's advantage to its action tokens (exactly 0 elsewhere)."""
    per_row = plan.advantage[row0 : row0 + len(tokens.offsets) - 1].astype(np.float32)
    adv = np.repeat(per_row, lengths(tokens.offsets))
    adv[~tokens.mask] = 0.0
    return {"advantages": adv}


# --------------------------------------------------------------------------- temporal methods


def token_passes(rows: Rows, p: Params) -> list[str]:
    """The token passes a method needs before its final one, in order."""
    if p.method in GROUP_METHODS:
        return []
    passes = []
    if p.lam == "adaptive" or (rows.segmented and p.segments == "compaction"):
        passes.append("counts")
    if rows.segmented and p.segments == "chain":
        passes.append("chain")
    if p.whiten == "batch":
        passes.append("whiten")
    return passes


def _lambda_eff(p: Params, lam: float | np.ndarray) -> float | np.ndarray:
    """The lambda that discounts a method's advantages across steps."""
    return {"td": 0.0, "gae": lam}.get(p.method, 1.0)


def plan_temporal(rows: Rows, p: Params, action_counts: np.ndarray | None = None) -> RowPlan:
    """Outcome placement, tails (bootstrap values) and the per-row lambda.

    ``action_counts`` (per row) comes from the ``counts`` pass when :func:`token_passes` asks.
    """
    last_seg = rows.is_last_segment()
    chain = rows.segmented and p.segments == "chain"
    outcome = rows.reward[rows.last_segment_row()][rows.rollout_codes]  # the rollout's reward
    if p.method == "reinforce-pp-baseline":
        codes = rollout_groups(rows)
        stats = G.group_stats(rollout_rewards(rows), codes, len(rows.group_keys), ddof=0, tol=0.0)
        outcome = outcome - stats.mean[codes][rows.rollout_codes]
    if chain:
        outcome = np.where(last_seg, outcome, 0.0)
    tail = np.where(last_seg, rows.bootstrap, 0.0)
    plan = RowPlan(outcome=outcome, tail=tail, tail_critic=tail.copy(), lam=p.lam)
    if p.lam == "adaptive":
        per_rollout = np.bincount(rows.rollout_codes, weights=action_counts)
        lam_rollout = T.adaptive_lambda(per_rollout, p.alpha)
        plan.lam = lam_rollout[rows.rollout_codes]
        plan.columns["lam"] = plan.lam
    if rows.segmented and not chain:
        # Compaction: segment s is its own sample, discounted by the actions after it.
        after = T.actions_after(action_counts, rows.rollout_codes, rows.segment_rank)
        plan.scale = np.power(p.gamma * _lambda_eff(p, plan.lam), after)
        plan.scale_critic = np.power(p.gamma * p.lam_critic, after)
    return plan


@dataclass
class StepResult:
    """A temporal method on one batch: step-level results and the per-token columns."""

    advantages: np.ndarray  # per step
    returns: np.ndarray | None  # per step
    values: np.ndarray  # per step (0 off actions)
    step_offsets: np.ndarray
    positions: np.ndarray
    is_action: np.ndarray
    moved: np.ndarray  # per row: a reward was moved onto an action
    orphaned: np.ndarray  # per row: a reward came before the first action


def temporal_steps(plan: RowPlan, tokens: Tokens, row0: int, p: Params) -> StepResult:
    """The method's advantages (and returns) over the steps of one batch, before whitening."""
    n = len(tokens.offsets) - 1
    rows = slice(row0, row0 + n)
    positions, step_offsets = T.step_positions(tokens.mask, tokens.offsets, p.observations)
    outcome = plan.outcome[rows]
    if tokens.token_rewards is None:
        rewards, orphaned = T.outcome_on_steps(step_offsets, outcome)
        moved = np.zeros(n, dtype=bool)
    else:
        per_token, moved, orphaned = T.place_rewards(
            tokens.mask, tokens.offsets, outcome, tokens.token_rewards
        )
        rewards = per_token[positions]
    # With observations skipped the steps are exactly the action tokens: boolean gathers and
    # scatters then move the data (twice as fast as index arrays, masks coming in spans).
    skip = p.observations == "skip"
    is_action = np.ones(len(positions), dtype=bool) if skip else tokens.mask[positions]
    if p.method in VALUE_METHODS:
        if skip:
            values = tokens.values[tokens.mask].astype(np.float64)
        else:
            values = np.take(tokens.values, positions).astype(np.float64)
            values[~is_action] = 0.0
    else:
        values = np.zeros(len(positions))
    lam = plan.lam if np.ndim(plan.lam) == 0 else plan.lam[rows]
    kw = {"gamma": p.gamma, "next_value": plan.tail[rows]}
    returns = delta = None
    if p.method in VALUE_METHODS:  # returns: GAE with lambda_critic, plus V (finish_temporal)
        tail_critic = plan.tail_critic[rows]
        delta_critic = T.td_errors(
            values, rewards, step_offsets, gamma=p.gamma, next_value=tail_critic
        )
        returns = T.gae_from_td(delta_critic, step_offsets, gamma=p.gamma, lam=p.lam_critic)
        if p.method in ("td", "gae"):  # the same TD errors when both bootstrap alike
            same = np.array_equal(kw["next_value"], tail_critic)
            delta = delta_critic if same else T.td_errors(values, rewards, step_offsets, **kw)
    if p.method == "td":
        adv = delta
    elif p.method == "mc":
        adv = T.monte_carlo(values, rewards, step_offsets, **kw)
    elif p.method == "gae":
        adv = T.gae_from_td(delta, step_offsets, gamma=p.gamma, lam=lam)
    else:
        adv = T.discounted_returns(rewards, step_offsets, **kw)
        returns = adv.copy()
    if plan.scale is not None:
        step_lens = lengths(step_offsets)
        adv *= np.repeat(plan.scale[rows], step_lens)
        if p.method in VALUE_METHODS:
            returns *= np.repeat(plan.scale_critic[rows], step_lens)
    return StepResult(adv, returns, values, step_offsets, positions, is_action, moved, orphaned)


def chain_tails(rows: Rows, p: Params, plan: RowPlan, firsts: dict[str, np.ndarray]) -> None:
    """Set each segment's tail from the segments after it (``--segments chain``).

    With C(s) the amount the recursion adds at the last step of segment s,
    C(s) = gamma * V_first(s+1) + gamma * lambda * A_first(s+1), and with A_first computed with
    no tail ("local"), C(s) = b(s+1) + (gamma * lambda) ** n(s+1) * C(s+1), where
    b = gamma * V_first + gamma * lambda * A_local_first and n is a segment's step count.
    The tail is C / gamma: the value after the last step that makes the core add C.
    """
    order = np.lexsort((-rows.segment_rank, rows.rollout_codes))  # per rollout, last first
    codes = rows.rollout_codes[order]
    first_of_rollout = np.r_[True, codes[1:] != codes[:-1]]
    n = firsts["steps"][order]
    for lam, key, attr in (
        (_lambda_eff(p, plan.lam), "advantage", "tail"),
        (p.lam_critic, "advantage_critic", "tail_critic"),
    ):
        if key not in firsts:
            continue
        lam_o = np.broadcast_to(lam, (rows.n_rows,))[order]
        b = p.gamma * firsts["value"][order] + p.gamma * lam_o * firsts[key][order]
        a = np.power(p.gamma * lam_o, n)
        x = np.empty(rows.n_rows)
        x[1:] = b[:-1]
        coef = np.empty(rows.n_rows)
        coef[1:] = a[:-1]
        x[first_of_rollout] = p.gamma * getattr(plan, attr)[order][first_of_rollout]
        coef[first_of_rollout] = 0.0
        carry = linear_scan(x, coef)
        tail = np.empty(rows.n_rows)
        tail[order] = carry / p.gamma if p.gamma > 0 else 0.0
        setattr(plan, attr, tail)


def first_steps(result: StepResult, p: Params) -> dict[str, np.ndarray]:
    """Per row of a batch: step count, and value and local advantage at the first step."""
    steps = lengths(result.step_offsets)
    has = steps > 0
    first = result.step_offsets[:-1][has]
    out = {"steps": steps, "value": np.zeros(len(steps)), "advantage": np.zeros(len(steps))}
    out["value"][has] = result.values[first]
    out["advantage"][has] = result.advantages[first]
    if p.method in VALUE_METHODS:
        out["advantage_critic"] = np.zeros(len(steps))
        out["advantage_critic"][has] = result.returns[first]
    return out


def whiten_batches(rows: Rows, p: Params) -> tuple[np.ndarray, int]:
    """The whitening batch of every row, and the number of batches."""
    batch_id, _, n_batches = batches(rows, p.batch_size)
    return batch_id[rows.rollout_codes], n_batches


def step_rows(result: StepResult, row0: int) -> np.ndarray:
    """The global row of every step."""
    steps = lengths(result.step_offsets)
    return np.repeat(np.arange(row0, row0 + len(steps)), steps)


def finish_temporal(
    plan: RowPlan, result: StepResult, mask: np.ndarray, row0: int, p: Params
) -> dict[str, np.ndarray]:
    """Whiten if planned, then scatter the step results to per-token float32 columns."""
    adv = result.advantages
    if plan.whiten_mean is not None:
        rows = step_rows(result, row0)
        act = result.is_action
        adv = adv.copy()
        adv[act] = (adv[act] - plan.whiten_mean[rows[act]]) / plan.whiten_std[rows[act]]
    columns = {"advantages": _scatter(adv, result, mask)}
    if result.returns is not None:
        returns = result.returns + result.values if p.method in VALUE_METHODS else result.returns
        columns["returns"] = _scatter(returns, result, mask)
    return columns


def _scatter(step_values: np.ndarray, result: StepResult, mask: np.ndarray) -> np.ndarray:
    """Per-token float32 array: step values on the action tokens, exactly 0 elsewhere.

    The action steps, in order, are the tokens where ``mask`` is set (a boolean scatter).
    """
    out = np.zeros(len(mask), dtype=np.float32)
    values = step_values.astype(np.float32)  # a scatter that also casts is twice as slow
    out[mask] = values if result.is_action.all() else values[result.is_action]
    return out
