"""Per-step credit for agents: each row is one step of a trajectory (a segment: ``rollout_id``
+ ``segment_index``), with its own reward (role ``step_reward``) and, for GiGPO, the observation
it acted on (role ``state``). The trajectory's ``reward`` stays its outcome: the episode return.
A null step reward counts 0; a trajectory without any step reward has its reward on its last
step (Trinity-RFT's sparse fallback). Every step gets one advantage, on its action tokens.

With G_t = r_t + γ·G_{t+1} the discounted return of step t within its trajectory (``--step-gamma``
γ) and R the trajectory's return (its ``reward``; without that column, the sum of its steps'):

- ``gigpo`` (GiGPO, Feng et al. 2025; verl-agent ``gigpo/core_gigpo.py``): A = A^E + ω·A^S.
  A^E normalises R over the episode group (the prompt's trajectories); A^S normalises G over
  the step's anchor-state group (the steps of the episode group whose ``state`` is the same),
  0 where that group is one step. ``--step-norm mean``: x − mean; ``std``: (x − mean)/(std + eps).
  ``--implementation`` picks whose details (the default verl-agent; ``trinity``, ``roll``):

  ============  ===========================  ==========================  =====================
  \\             verl-agent                   Trinity-RFT                 ROLL
  ============  ===========================  ==========================  =====================
  A^E over      the group's step rows        the group's trajectories    step rows, group or
                                                                         batch (--norm-scope)
  lone group    mean 0, std 1 (A^E = R)      mean 0, std 1               0 (or R − batch mean)
  mean norm     x − mean                     (x − mean)/(1 + eps)        x − mean
  state groups  within the episode group     across the batch            across the batch
  ============  ===========================  ==========================  =====================

  ROLL's ``--step-norm none`` (its default, method ``identity``) adds the raw terms; it zeroes a
  group of one or of std ≤ 1e-6 under ``std``, and weighs the terms with ``--episode-weight``.

  Two trajectories of one group, steps (state, r): [(s0, 0), (s1, 1)] and [(s0, 0), (s2, 0)],
  rewards 1 and 0, γ = 1, verl-agent ``mean``: A^E = 1 − 0.5 = 0.5 and −0.5; the s0 steps have
  G = 1 and 0, so A^S = ±0.5; s1 and s2 are alone (A^S = 0). A = [1, 0.5] and [−1, −0.5].
- ``step-reinforce`` (ROLL ``step_reinforce``): A_t = G_t normalised (``--step-norm``, over the
  group or the batch, ``--norm-scope``), the same on every token of the step.
- ``agentic-reinforce`` (ROLL ``agentic_reinforce``): returns discounted per turn (action
  span), not per token: G_k = r_k + γ·G_{k+1} (``--step-gamma``; ROLL's ``gamma``) over the
  trajectory's turns, later segments' included; r_k is the token reward on turn k's last token
  (ROLL ignores the others: the summary counts them), and s = R normalised as above (over the
  trajectories) is added on the last turn, so without token rewards turn k turns before the
  last gets γ^k·s, on the trajectory's last action token (ROLL's row ends with its last
  response; an environment's reply logged after it is not ROLL's).
- ``step-grpo`` (Trinity-RFT ``step_wise_grpo``): the trajectory's GRPO advantage
  (R − mean)/(std + eps) over its group (a lone one: R/(1 + eps)) on every step, divided by
  its number of steps with ``--divide-by-steps``; ``--std-threshold`` leaves out the groups of
  one trajectory or of std ≤ it.

``--reward-clip`` and ``--advantage-clip`` (ROLL) clip the step's scalar to ±c before and after
(there is no token-level whitening here). Statistics are float64 (std ddof 1, as ``torch.std``).
The parameters, the :class:`StepMethod` base and ROLL's token pipeline the methods share are in
:mod:`advcli.methods.step_method`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from advcli.core import steps as S
from advcli.core.conventions import Convention
from advcli.errors import RowError, SchemaError, UsageError
from advcli.lazy_imports import np
from advcli.methods.group import EPS, ZERO_VARIANCE_TOL
from advcli.methods.step_method import (
    DIVIDE_BY_STEPS,
    EPISODE_WEIGHT,
    IMPLEMENTATION,
    NORM_SCOPE,
    ROLL_TOKENS,
    SIMILARITY,
    STD_THRESHOLD,
    STEP_GAMMA,
    STEP_NORM,
    STEP_WEIGHT,
    TOKEN_GAMMA,
    RollTokens,
    StepAdvantages,
    StepMethod,
    clipped,
)
from advcli.params import Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows


def step_rewards(rows: Rows) -> np.ndarray:
    """Each step's reward: its ``step_reward`` (null: 0), or, in a trajectory without any, its
    ``reward`` on the last step."""
    last = rows.is_last_segment()
    given = rows.step_reward
    have = np.zeros(rows.n_rows, dtype=bool) if given is None else ~np.isnan(given)
    r = np.where(have, given if given is not None else 0.0, 0.0)
    sparse = ~(np.bincount(rows.rollout_codes, weights=have, minlength=rows.n_rollouts) > 0)
    at_end = sparse[rows.rollout_codes] & last
    if at_end.any():
        if rows.reward is None:
            raise SchemaError("the log has neither a step_reward nor a reward column")
        r = np.where(at_end, rows.reward, r)
    return r


def episode_returns(rows: Rows, rewards: np.ndarray) -> np.ndarray:
    """Each trajectory's return: its ``reward``, or the sum of its step rewards."""
    if rows.reward is not None:
        return rows.rollout_rewards()
    out: np.ndarray = np.bincount(rows.rollout_codes, weights=rewards, minlength=rows.n_rollouts)
    return out


def centre_scale(p: Params, *, explicit: bool = True) -> tuple[S.Centre, S.StepScale]:
    """ROLL's normalisation types: ``--norm-mean`` and ``--norm-std`` where given (and
    ``explicit``), else those of ``--step-norm`` (ROLL's method: identity, mean, mean_std)."""
    types: dict[str, tuple[S.Centre, S.StepScale]] = {
        "none": ("none", "none"), "mean": ("group", "none"), "std": ("group", "group")}  # fmt: skip
    centre, scale = types[p.step_norm]
    if not explicit or "norm_mean" not in p:
        return centre, scale
    return (centre if p.norm_mean == "auto" else p.norm_mean,
            scale if p.norm_std == "auto" else p.norm_std)  # fmt: skip


def roll_normalise(
    x: np.ndarray, codes: np.ndarray, n: int, types: tuple[S.Centre, S.StepScale], eps: float
) -> np.ndarray:
    """ROLL's ``agentic_reward_norm`` with normalisation ``types`` (centre, scale): x − mean,
    or (x − mean)/(std + eps) where the group has two rows or more and std > 1e-6 (else 0)."""
    centre, scale = types
    return S.normalise(x, codes, n, centre=centre, scale=scale, eps=eps, lone="keep",
                       min_std=1e-6 if scale != "none" else None)  # fmt: skip


def scope_codes(rows: Rows, per_row_groups: np.ndarray, p: Params) -> tuple[np.ndarray, int]:
    """The groups ROLL normalises over: the episode groups, or the batch as one."""
    if p.norm_scope == "batch":
        return np.zeros(len(per_row_groups), dtype=np.int64), 1
    n = int(per_row_groups.max()) + 1 if len(per_row_groups) else 0
    return per_row_groups, n


SIMILARITY_STATES = "ADVCLI_SIMILARITY_STATES"
"""The environment variable of the most distinct states ``--similarity`` clusters in one
episode group (default :data:`DEFAULT_SIMILARITY_STATES`)."""
DEFAULT_SIMILARITY_STATES = 1024


def similarity_states() -> int:
    """The most distinct states of one episode group that ``--similarity`` compares
    (:data:`SIMILARITY_STATES`)."""
    text = os.environ.get(SIMILARITY_STATES, str(DEFAULT_SIMILARITY_STATES))
    try:
        value: Any = int(text)
    except ValueError:
        value = text
    if problem := Range(1).problem(SIMILARITY_STATES, value, integer=True):
        raise UsageError(problem)
    return int(value)


def too_many_states(limit: int) -> str:
    """Why an episode group of more than ``limit`` distinct states is refused."""
    return (
        f"its episode group has more than {limit:,} distinct states, and `similarity` compares "
        "each with the first state of every cluster it may join, a time that grows with their "
        f"square. Hint: raise {SIMILARITY_STATES} (default {DEFAULT_SIMILARITY_STATES:,}), or "
        "leave `similarity` out to group equal states"
    )


def state_groups(rows: Rows, groups: np.ndarray, p: Params) -> np.ndarray:
    """Each step's anchor-state group: equal ``state`` (within the episode group for
    verl-agent, across the batch otherwise), or similar text (``--similarity``); a step
    without a state is alone."""
    states = rows.labels["state"]
    if p.similarity:  # a Python loop over each group's distinct states, as verl-agent's
        texts = [str(t) for t in rows.label_keys["state"].to_pylist()]
        pairs, first, inverse = np.unique(np.c_[groups, states], axis=0, return_index=True,
                                          return_inverse=True)  # fmt: skip
        cluster = np.full(len(pairs), -1, dtype=np.int64)
        order = np.lexsort((first, pairs[:, 0]))  # by group, then first appearance
        order = order[pairs[order, 1] >= 0]  # a step without a state stays alone
        limit = similarity_states()
        for mine in np.split(order, np.flatnonzero(np.diff(pairs[order, 0])) + 1):
            if len(mine) > limit:
                raise RowError(int(first[mine[limit]]), ("state",), too_many_states(limit))
            cluster[mine] = S.similar_states([texts[s] for s in pairs[mine, 1]], p.similarity)
        states = np.where(states < 0, -1, cluster[inverse.ravel()])
    return S.anchor_groups(groups, states, within=p.implementation == "verl-agent")


class Gigpo(RollTokens):
    """A = A^E + ω·A^S: the trajectory's return over its group, and the step's discounted
    return over its anchor-state group (GiGPO; verl-agent ``compute_gigpo_outcome_advantage``)."""

    name = "gigpo"
    summary = (
        "A^E + ω·A^S: the trajectory's return normalised over its group plus the step's "
        "discounted return over the steps of the group with the same `state` (verl-agent "
        "`core_gigpo.py`; `--implementation trinity` or `roll`)"
    )
    roles: ClassVar[tuple[str, ...]] = ("prompt_id", "state")
    parameters = (
        IMPLEMENTATION,
        STEP_GAMMA,
        STEP_NORM,
        STEP_WEIGHT,
        EPISODE_WEIGHT,
        SIMILARITY,
        NORM_SCOPE,
        TOKEN_GAMMA,
        *ROLL_TOKENS,
        EPS,
        ZERO_VARIANCE_TOL,
    )

    def rolls(self, p: Params) -> bool:
        return bool(p.implementation == "roll") and not self.token_free

    outputs = ("advantages", "advantage", "episode_advantage", "step_advantage", "step_return",
               "state_group_size", "zero_variance", "no_step_signal")  # fmt: skip

    def step_advantages(self, rows: Rows, p: Params) -> StepAdvantages:
        assert rows.group_codes is not None and rows.group_keys is not None
        roll_only = {"episode_weight": 1.0, "norm_scope": "group", "reward_clip": None,
                     "advantage_clip": None, "token_gamma": 1.0, "whiten_rewards": False,
                     "whiten_advantages": False, "norm_mean": "auto",
                     "norm_std": "auto"}  # fmt: skip
        given = [name for name, default in roll_only.items() if getattr(p, name) != default]
        if p.implementation != "roll" and given:
            named = ", ".join(f"`{name}`" for name in given)
            raise UsageError(f"{named}: only gigpo `implementation='roll'` takes it")
        rewards = step_rewards(rows)
        returns = S.step_returns(rewards, rows.rollout_codes, rows.segment_rank, p.step_gamma)
        R = episode_returns(rows, rewards)
        groups, n_groups = rows.group_codes, len(rows.group_keys)
        anchors = state_groups(rows, groups, p)
        n_anchors = int(anchors.max()) + 1 if len(anchors) else 0
        scale: S.StepScale = "group" if p.step_norm == "std" else "none"
        if p.implementation == "verl-agent":
            episode = S.normalise(R[rows.rollout_codes], groups, n_groups, centre="group",
                                  scale=scale, eps=p.eps, lone="raw")  # fmt: skip
            step = S.normalise(returns, anchors, n_anchors, centre="group", scale=scale,
                               eps=p.eps, lone="zero")  # fmt: skip
            advantage = episode + p.step_weight * step
        elif p.implementation == "trinity":
            scale = "group" if p.step_norm == "std" else "one"
            by_trajectory = S.normalise(R, rows.rollout_groups(), n_groups, centre="group",
                                        scale=scale, eps=p.eps, lone="raw")  # fmt: skip
            episode = by_trajectory[rows.rollout_codes]
            step = S.normalise(returns, anchors, n_anchors, centre="group", scale=scale,
                               eps=p.eps, lone="zero")  # fmt: skip
            advantage = episode + p.step_weight * step
        else:
            scope, n_scope = scope_codes(rows, groups, p)
            episode = roll_normalise(R[rows.rollout_codes], scope, n_scope, centre_scale(p), p.eps)
            # ROLL's step term takes its types from the method alone
            by_method = centre_scale(p, explicit=False)
            step = roll_normalise(returns, anchors, n_anchors, by_method, p.eps)
            advantage = clipped(p.episode_weight * episode + p.step_weight * step, p.reward_clip)
        size = np.bincount(anchors, minlength=n_anchors)
        no_signal = (size == 1) | S.tied(returns, anchors, n_anchors, p.zero_variance_tol)
        zero_variance = S.tied(R[rows.rollout_codes], groups, n_groups, p.zero_variance_tol)
        return StepAdvantages(
            advantage=advantage,
            columns={
                "episode_advantage": episode,
                "step_advantage": step,
                "step_return": returns,
                "state_group_size": size[anchors],
                "zero_variance": zero_variance[groups],
                "no_step_signal": no_signal[anchors],
            },
            stats={
                "state_groups": n_anchors,
                "singleton_state_groups": int((size == 1).sum()),
                "tied_state_groups": int(
                    S.tied(returns, anchors, n_anchors, p.zero_variance_tol).sum()
                ),
                "steps_with_no_signal": int(no_signal[anchors].sum()),
            },
        )


class StepReinforce(RollTokens):
    """A_t = G_t, normalised over the group or the batch (ROLL ``step_reinforce``)."""

    name = "step-reinforce"
    summary = (
        "the step's discounted return G_t = r_t + γ·G_{t+1}, normalised over the group or the "
        "batch (`--step-norm`, `--norm-scope`; ROLL `step_reinforce`)"
    )
    roles: ClassVar[tuple[str, ...]] = ("step_reward",)
    parameters = (STEP_GAMMA, STEP_NORM, NORM_SCOPE, TOKEN_GAMMA, *ROLL_TOKENS, EPS)
    outputs = ("advantages", "advantage", "step_return")

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {**super().defaults(convention), "step_gamma": 0.95, "step_norm": "none"}

    def needs(self, p: Params) -> set[str]:
        grouped = p.norm_scope == "group" and p.step_norm != "none"
        return super().needs(p) | ({"prompt_id"} if grouped else set())

    def step_advantages(self, rows: Rows, p: Params) -> StepAdvantages:
        rewards = step_rewards(rows)
        returns = S.step_returns(rewards, rows.rollout_codes, rows.segment_rank, p.step_gamma)
        groups = rows.group_codes if rows.group_codes is not None else np.zeros(rows.n_rows, int)
        scope, n_scope = scope_codes(rows, groups, p)
        scalar = roll_normalise(returns, scope, n_scope, centre_scale(p), p.eps)
        return StepAdvantages(
            advantage=clipped(scalar, p.reward_clip), columns={"step_return": returns}
        )


class AgenticReinforce(RollTokens):
    """Returns discounted per turn: G_k = r_k + γ·G_{k+1} over a trajectory's action spans,
    the normalised outcome on its last turn (ROLL ``agentic_reinforce``)."""

    name = "agentic-reinforce"
    summary = (
        "returns discounted per turn, not per token: G_k = r_k + γ·G_{k+1} over the action "
        "spans, r_k the token reward on turn k's last token, the normalised reward on the last "
        "(ROLL `agentic_reinforce`)"
    )
    roles: ClassVar[tuple[str, ...]] = ("input_ids",)
    also_needs = "reward or token_rewards"
    parameters = (STEP_GAMMA, STEP_NORM, NORM_SCOPE, *ROLL_TOKENS, EPS)
    outputs = ("advantages", "advantage", "turns")
    per_turn = True

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {**super().defaults(convention), "step_gamma": 1.0, "step_norm": "none"}

    def needs(self, p: Params) -> set[str]:
        grouped = p.norm_scope == "group" and p.step_norm != "none"
        return super().needs(p) | ({"prompt_id"} if grouped else set())

    def step_advantages(self, rows: Rows, p: Params) -> StepAdvantages:
        has_turn_rewards = "turn_return" in rows.sums
        if rows.reward is None and not has_turn_rewards:
            raise SchemaError("agentic-reinforce needs a reward or a token_rewards column")
        scalar = np.zeros(rows.n_rollouts)
        if rows.reward is not None:
            groups = rows.rollout_groups() if rows.group_codes is not None else (
                np.zeros(rows.n_rollouts, dtype=np.int64))  # fmt: skip
            scope, n_scope = scope_codes(rows, groups, p)
            scalar = roll_normalise(rows.rollout_rewards(), scope, n_scope, centre_scale(p), p.eps)
        turns = np.bincount(rows.rollout_codes, weights=rows.sums["turns"],
                            minlength=rows.n_rollouts).astype(np.int64)  # fmt: skip
        stats = {}
        if has_turn_rewards:
            stats["token_rewards_off_turn_ends_ignored"] = int(rows.sums["off_turn_rewards"].sum())
        return StepAdvantages(
            advantage=clipped(scalar, p.reward_clip)[rows.rollout_codes],
            columns={"turns": turns[rows.rollout_codes]},
            stats=stats,
        )


class StepGrpo(StepMethod):
    """The trajectory's GRPO advantage on each of its steps (Trinity-RFT ``step_wise_grpo``)."""

    name = "step-grpo"
    summary = (
        "the trajectory's (R − mean)/(std + eps) over its group on every step, optionally "
        "÷ its steps (Trinity-RFT `step_wise_grpo`)"
    )
    roles: ClassVar[tuple[str, ...]] = ("prompt_id", "reward")
    parameters = (DIVIDE_BY_STEPS, STD_THRESHOLD, NORM_SCOPE, EPS)
    outputs = ("advantages", "advantage", "steps")

    def step_advantages(self, rows: Rows, p: Params) -> StepAdvantages:
        assert rows.group_keys is not None
        R, groups, n = rows.rollout_rewards(), rows.rollout_groups(), len(rows.group_keys)
        scale: S.StepScale = "batch" if p.norm_scope == "batch" else "group"
        per_trajectory = S.normalise(R, groups, n, centre="group", scale=scale, eps=p.eps,
                                     lone="raw")  # fmt: skip
        steps = np.bincount(rows.rollout_codes, minlength=rows.n_rollouts)
        if p.divide_by_steps:
            per_trajectory = per_trajectory / steps
        drop = {}
        if p.std_threshold is not None:
            quiet = ~(S.mean_std(R, groups, n)[1] > p.std_threshold)  # a group of one: NaN
            drop["std_threshold"] = quiet[groups][rows.rollout_codes]
        return StepAdvantages(
            advantage=per_trajectory[rows.rollout_codes],
            columns={"steps": steps[rows.rollout_codes]},
            drop=drop,
        )


METHODS = (Gigpo(), StepReinforce(), AgenticReinforce(), StepGrpo())
