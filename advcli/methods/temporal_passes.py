"""The plan of the temporal estimators (:mod:`advcli.methods.temporal`), the time steps and
estimates they compute on a batch, and the token passes that refine the plan, each run before
the final pass when a run needs it: action counts (adaptive lambda, compaction's scale), the
segment chain (each segment's tail from the segments after it), and the whitening moments of
each batch (merged with Chan's formula).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, TypeAlias

from advcli.core import temporal as T
from advcli.core.conventions import WHITEN_EPS
from advcli.core.ragged import lengths
from advcli.core.scan import linear_scan
from advcli.lazy_imports import np
from advcli.methods.base import Plan, TokenPass, completion_batches

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens
    from advcli.params import Params

Lam: TypeAlias = "float | np.ndarray"  # a scalar, or one per row


@dataclass(frozen=True)
class Steps:
    """A batch of rows as time steps (``step_offsets`` cuts them into rows), and what comes
    after each row's last step."""

    step_offsets: np.ndarray
    is_action: np.ndarray  # bool per step
    values: np.ndarray  # V at each step (0 off actions; 0 everywhere without values)
    rewards: np.ndarray  # per step
    tail: np.ndarray  # per row: the value after its last step, for the advantages
    tail_critic: np.ndarray  # the same for the returns
    lam: Lam  # the advantages' lambda


@dataclass(frozen=True)
class Estimates:
    """What a method computed on a batch's steps, before whitening."""

    steps: Steps
    advantages: np.ndarray  # per step
    returns: np.ndarray  # per step; value methods: without V added


@dataclass(frozen=True, kw_only=True)
class TemporalPlan(Plan):
    outcome: np.ndarray  # per row: the reward on its last action (0 for a chained segment's)
    alone: np.ndarray  # per row: the only row of its rollout (without an action, it is a row
    # the trainer did not train on, as a sample NeMo-RL's overlong filter masked: its reward
    # has no token to go to, and nothing after it to carry to)
    tail: np.ndarray  # per row: the value after its last step, for the advantages
    tail_critic: np.ndarray  # the same for the returns (their lambda may differ)
    lam: Lam  # scalar, or one per row (adaptive)
    scale: np.ndarray | None = None  # compaction: (gamma * lambda) ** N_{>s}, per row
    scale_critic: np.ndarray | None = None  # the same with the returns' lambda
    whiten_batch: np.ndarray | None = None  # per row: its batch, whose whitening statistics
    whiten_mean: np.ndarray | None = None  # are these (one per batch)
    whiten_std: np.ndarray | None = None
    baseline: np.ndarray | None = None  # per row: subtracted from every step's advantage
    measured: dict[int, Estimates] = field(default_factory=dict)  # the estimates a held pass
    # measured in the final pass (by a batch's first row), each taken once by ``apply``


class TimeStepMethod(Protocol):
    """What the passes ask of the method they run for
    (:class:`advcli.methods.temporal.TemporalMethod`, which imports them)."""

    @property
    def reads_values(self) -> bool: ...

    @property
    def value_returns(self) -> bool: ...

    def lambda_eff(self, lam: Lam) -> Lam: ...

    def steps(
        self,
        plan: TemporalPlan,
        tokens: Tokens,
        row0: int,
        p: Params,
        *,
        local: bool = False,
        returns: bool = True,
    ) -> Estimates: ...


def adaptive(p: Params) -> bool:
    """Whether the run's lambda is adaptive (only gae takes a lambda)."""
    return "lam" in p and p.lam == "adaptive"


class CountPass(TokenPass[TemporalPlan]):
    """Action tokens per row: for the adaptive lambda, and for compaction's scale."""

    title = "counting action tokens"

    def __init__(self, method: TimeStepMethod, rows: Rows, p: Params):
        self.method, self.rows, self.p = method, rows, p
        self.counts = np.zeros(rows.n_rows, dtype=np.int64)

    def measure(self, plan: TemporalPlan, row0: int, tokens: Tokens) -> np.ndarray:
        return tokens.action_counts()

    def add(self, plan: TemporalPlan, row0: int, measured: np.ndarray) -> None:
        self.counts[row0 : row0 + len(measured)] = measured

    def finish(self, plan: TemporalPlan) -> TemporalPlan:
        rows, p = self.rows, self.p
        if adaptive(p):
            per_rollout = np.bincount(rows.rollout_codes, weights=self.counts)
            lam = T.adaptive_lambda(per_rollout, p.alpha)[rows.rollout_codes]
            plan = replace(plan, lam=lam, columns={**plan.columns, "lam": lam})
        if rows.segmented and p.segments == "compaction":
            # Segment s is its own sample, discounted by the actions after it.
            after = T.actions_after(self.counts, rows.rollout_codes, rows.segment_rank)
            plan = replace(
                plan,
                scale=np.power(p.gamma * self.method.lambda_eff(plan.lam), after),
                scale_critic=np.power(p.gamma * p.lam_critic, after)
                if self.method.value_returns
                else None,
            )
        return plan


class ChainPass(TokenPass[TemporalPlan]):
    """Each segment's tail from the segments after it (``--segments chain``).

    With C(s) the amount the recursion adds at the last step of segment s,
    C(s) = gamma * V_first(s+1) + gamma * lambda * A_first(s+1), and with A_first computed with
    no tail ("local"), C(s) = b(s+1) + (gamma * lambda) ** n(s+1) * C(s+1), where
    b = gamma * V_first + gamma * lambda * A_local_first and n is a segment's step count.
    The tail is C / gamma: the value after the last step that makes the core add C.
    """

    title = "carrying values across segments"

    def __init__(self, method: TimeStepMethod, rows: Rows, p: Params):
        self.method, self.rows, self.p = method, rows, p
        self.reads_values = method.reads_values
        n = rows.n_rows
        self.steps = np.zeros(n)
        self.value = np.zeros(n)
        self.advantage = np.zeros(n)
        self.advantage_critic = np.zeros(n) if method.value_returns else None

    def measure(self, plan: TemporalPlan, row0: int, tokens: Tokens) -> tuple[np.ndarray, ...]:
        """Per row: its steps, and the value, advantage and return at its first step."""
        est = self.method.steps(plan, tokens, row0, self.p, local=True)
        counts = lengths(est.steps.step_offsets)
        first = est.steps.step_offsets[:-1][counts > 0]
        return counts, est.steps.values[first], est.advantages[first], est.returns[first]

    def add(self, plan: TemporalPlan, row0: int, measured: tuple[np.ndarray, ...]) -> None:
        counts, value, advantage, returns = measured
        has = counts > 0
        at = slice(row0, row0 + len(counts))
        self.steps[at] = counts
        self.value[at][has] = value
        self.advantage[at][has] = advantage
        if self.advantage_critic is not None:
            self.advantage_critic[at][has] = returns

    def finish(self, plan: TemporalPlan) -> TemporalPlan:
        rows, p = self.rows, self.p
        order = np.lexsort((-rows.segment_rank, rows.rollout_codes))  # per rollout, last first
        codes = rows.rollout_codes[order]
        first_of_rollout = np.r_[True, codes[1:] != codes[:-1]]
        n = self.steps[order]

        def carried(lam: Lam, first_advantage: np.ndarray, tail: np.ndarray) -> np.ndarray:
            lam_o = np.broadcast_to(lam, (rows.n_rows,))[order]
            b = p.gamma * self.value[order] + p.gamma * lam_o * first_advantage[order]
            a = np.power(p.gamma * lam_o, n)
            x = np.empty(rows.n_rows)
            x[1:] = b[:-1]
            coef = np.empty(rows.n_rows)
            coef[1:] = a[:-1]
            x[first_of_rollout] = p.gamma * tail[order][first_of_rollout]
            coef[first_of_rollout] = 0.0
            carry = linear_scan(x, coef)
            out = np.empty(rows.n_rows)
            out[order] = carry / p.gamma if p.gamma > 0 else 0.0
            return out

        plan = replace(
            plan, tail=carried(self.method.lambda_eff(plan.lam), self.advantage, plan.tail)
        )
        if self.advantage_critic is not None:
            tail_critic = carried(p.lam_critic, self.advantage_critic, plan.tail_critic)
            plan = replace(plan, tail_critic=tail_critic)
        return plan


class WhitenPass(TokenPass[TemporalPlan]):
    """Mean and variance of the advantages over each batch's action tokens (``--whiten
    batch``): (A - mean) / sqrt(var + 1e-8), token-weighted, with ``--whiten-ddof`` (or
    sqrt(max(var, 1e-8)): ``--whiten-eps-placement max``)."""

    title = "whitening statistics"
    per_batch = True

    def __init__(self, method: TimeStepMethod, rows: Rows, p: Params):
        self.method, self.p = method, p
        self.reads_values = method.reads_values
        batch_id, _, n_batches = completion_batches(rows, p.batch_size)
        self.batch_of_row = batch_id[rows.rollout_codes]
        self.moments = T.BatchMoments(n_batches)
        self.held = False  # run by the final pass: the estimates are kept for it
        self.kept: dict[int, Estimates] = {}

    def hold(self) -> None:
        self.held = True

    def measure(
        self, plan: TemporalPlan, row0: int, tokens: Tokens
    ) -> tuple[T.Moments, Estimates | None]:
        est = self.method.steps(plan, tokens, row0, self.p, returns=self.held)
        n = len(tokens.offsets) - 1
        adv, act = est.advantages, est.steps.is_action
        if not act.all():  # steps over observations: only the actions count
            adv = adv[act]
        batches = self.batch_of_row[row0 : row0 + n]
        if n and (batches == batches[0]).all():  # one batch: no batch per step to gather by
            moments = T.moments_of_one(adv, int(batches[0]), len(self.moments.count))
        else:
            step_batch = np.repeat(batches, lengths(est.steps.step_offsets))
            step_batch = step_batch if act.all() else step_batch[act]
            moments = T.moments(adv, step_batch, len(self.moments.count))
        return moments, est if self.held else None

    def add(
        self, plan: TemporalPlan, row0: int, measured: tuple[T.Moments, Estimates | None]
    ) -> None:
        moments, est = measured
        self.moments.merge(moments)
        if est is not None:
            self.kept[row0] = est

    def finish(self, plan: TemporalPlan) -> TemporalPlan:
        var = self.moments.var(self.p.whiten_ddof)
        std = np.sqrt(var + WHITEN_EPS if self.p.whiten_eps_placement == "add"
                      else np.maximum(var, WHITEN_EPS))  # fmt: skip
        kept, self.kept = self.kept, {}
        return replace(plan, whiten_batch=self.batch_of_row, whiten_mean=self.moments.mean,
                       whiten_std=std, measured=kept)  # fmt: skip
