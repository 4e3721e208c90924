"""What the per-step methods of :mod:`advcli.methods.steps` share: the parameters they declare,
:class:`StepMethod` (one advantage per step, on its action tokens), and ROLL's way from a
step's scalar to token advantages (:class:`RollTokens`), whose whitening of the advantages is a
token pass (:class:`AdvantageMoments`).
"""

from __future__ import annotations

from abc import abstractmethod
from copy import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from advcli.core import steps as S
from advcli.core import temporal as T
from advcli.core.conventions import WHITEN_EPS, Convention
from advcli.core.scan import reverse_discounted_scan
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import Method, TokenPass, completion_batches
from advcli.methods.group import OutcomePlan, on_actions
from advcli.methods.temporal import UNIT
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens


PANEL = "Agent steps"

IMPLEMENTATIONS = ("verl-agent", "trinity", "roll")


STEP_GAMMA = Param(
    "step_gamma",
    float,
    None,
    "γ per agent step: G_t = r_t + γ·G_{t+1} (verl-agent, Trinity-RFT: 1; ROLL: 0.95); "
    "agentic-reinforce: the discount per turn (ROLL's gamma, 1).",
    PANEL,
    conventional=True,
    range=UNIT,
)
STEP_NORM = Param(
    "step_norm",
    str,
    None,
    "Normalisation of the episode and step terms: none, mean (x − mean) or std ((x − mean) / "
    "(std + eps)). gigpo: verl-agent's mode (mean_norm: mean); ROLL's method (identity: none).",
    PANEL,
    choices=("none", "mean", "std"),
    conventional=True,
)
IMPLEMENTATION = Param(
    "implementation",
    str,
    None,
    "gigpo: whose GiGPO (verl-agent, trinity or roll); --convention roll picks roll.",
    PANEL,
    choices=IMPLEMENTATIONS,
    conventional=True,
)
STEP_WEIGHT = Param(
    "step_weight",
    float,
    1.0,
    "gigpo: ω, the weight of the step term (verl-agent's step_advantage_w).",
    PANEL,
)
EPISODE_WEIGHT = Param(
    "episode_weight",
    float,
    1.0,
    "gigpo (roll): the weight of the episode term (ROLL's episode_reward_weight).",
    PANEL,
)
SIMILARITY = Param(
    "similarity",
    float,
    0.0,
    "gigpo (verl-agent): text states of one group whose SequenceMatcher ratio to a state group's "
    "first state is at least this join it (verl-agent's similarity_thresh); 0: equal states.",
    PANEL,
    range=Range(0, 1, high_open=True),
    check=lambda value, values: (
        "`similarity` applies to `implementation='verl-agent'`"
        if value and values.get("implementation") != "verl-agent"
        else None
    ),
)
NORM_SCOPE = Param(
    "norm_scope",
    str,
    "group",
    "The rows normalised together: the episode group (ROLL's grouping traj_group_id) or the "
    "batch; step-grpo: the std's (Trinity-RFT's std_cal_level).",
    PANEL,
    choices=("group", "batch"),
)
REWARD_CLIP = Param(
    "reward_clip",
    float,
    None,
    "roll: clip the step's scalar to ±this before it goes on the tokens (ROLL's reward_clip).",
    PANEL,
    range=Range(0, low_open=True),
)
ADVANTAGE_CLIP = Param(
    "advantage_clip",
    float,
    None,
    "roll: clip the advantages to ±this (ROLL's advantage_clip).",
    PANEL,
    range=Range(0, low_open=True),
)
NORM_MEAN = Param(
    "norm_mean",
    str,
    "auto",
    "roll: the mean subtracted: the group's, the batch's or none (ROLL's norm_mean_type); "
    "auto: as --step-norm.",
    PANEL,
    choices=("auto", "group", "batch", "none"),
)
NORM_STD = Param(
    "norm_std",
    str,
    "auto",
    "roll: the std divided by: the group's, the batch's or none (ROLL's norm_std_type); "
    "auto: as --step-norm.",
    PANEL,
    choices=("auto", "group", "batch", "none"),
)
TOKEN_GAMMA = Param(
    "token_gamma",
    float,
    1.0,
    "roll (gigpo, step-reinforce): ROLL's gamma, the per-token discount of the reward-to-go "
    "from the step's last token (1: the same advantage on every token).",
    PANEL,
    range=UNIT,
)
WHITEN_REWARDS = Param(
    "whiten_rewards",
    bool,
    False,
    "roll: whiten the token rewards over the batch's action tokens before the returns "
    "(ROLL's whiten_rewards).",
    PANEL,
)
WHITEN_ADVANTAGES = Param(
    "whiten_advantages",
    bool,
    False,
    "roll: whiten the advantages over the batch's action tokens (ROLL's whiten_advantages).",
    PANEL,
)
DIVIDE_BY_STEPS = Param(
    "divide_by_steps",
    bool,
    False,
    "step-grpo: divide by the trajectory's number of steps (Trinity-RFT's enable_step_norm).",
    PANEL,
)
STD_THRESHOLD = Param(
    "std_threshold",
    float,
    None,
    "step-grpo: leave out the groups of one trajectory or of std ≤ this (Trinity-RFT).",
    PANEL,
    range=Range(0),
)

ROLL_TOKENS = (NORM_MEAN, NORM_STD, REWARD_CLIP, ADVANTAGE_CLIP, WHITEN_REWARDS,
               WHITEN_ADVANTAGES)  # fmt: skip
"""What ROLL's token pipeline takes (:class:`RollTokens`)."""


@dataclass
class StepAdvantages:
    """What a step method computes per row (step)."""

    advantage: np.ndarray  # float64
    columns: dict[str, np.ndarray]  # output columns, per row
    drop: dict[str, np.ndarray] = field(default_factory=dict)  # reason -> bool per row
    stats: dict[str, Any] = field(default_factory=dict)


def clipped(x: np.ndarray, clip: float | None) -> np.ndarray:
    return x if clip is None else np.clip(x, -clip, clip)


class StepMethod(Method[OutcomePlan]):
    """A method that gives each step (row) one advantage."""

    def defaults(self, convention: Convention) -> dict[str, Any]:
        roll = convention.name == "roll"
        return {"step_gamma": 0.95 if roll else 1.0, "step_norm": "none" if roll else "mean",
                "implementation": "roll" if roll else "verl-agent"}  # fmt: skip

    @abstractmethod
    def step_advantages(self, rows: Rows, p: Params) -> StepAdvantages:
        """Per row: the advantage and the output columns (rows of unscored rollouts left out)."""

    def plan(self, rows: Rows, p: Params) -> OutcomePlan:
        r = self.step_advantages(rows.scored(), p)
        keep = np.ones(rows.n_rows, dtype=bool) if rows.unscored is None else ~rows.unscored

        def full(x: np.ndarray) -> np.ndarray:
            out = np.full(rows.n_rows, np.nan if x.dtype.kind == "f" else 0, dtype=x.dtype)
            out[keep] = x
            return out

        advantage = signals.clamped(np.where(keep, full(r.advantage), 0.0), p)
        drop = np.zeros(rows.n_rows, dtype=bool)
        dropped = {}
        for reason, flags in r.drop.items():
            if flags.any():
                drop |= full(flags)
                dropped[reason] = int(flags.sum())
        stats = {**r.stats}
        if not keep.all():
            stats["unscored_steps"] = int((~keep).sum())
        columns = {"advantage": advantage.astype(np.float32)}
        columns.update({name: full(values) for name, values in r.columns.items()})
        return OutcomePlan(columns=columns, kept=None if not drop.any() else ~drop,
                           dropped=dropped, stats=stats, advantage=advantage)  # fmt: skip

    def apply(
        self, plan: OutcomePlan, tokens: Tokens, row0: int, p: Params
    ) -> dict[str, np.ndarray]:
        return {"advantages": on_actions(plan.advantage, tokens, row0)}


@dataclass(frozen=True, kw_only=True)
class RollPlan(OutcomePlan):
    """What ROLL's token pipeline needs per row besides the scalar."""

    end_reward: np.ndarray  # the scalar, on the row's last token where it is an action, else 0
    reward_mean: np.ndarray  # the batch's token-reward mean and std (NaN: no whitening)
    reward_std: np.ndarray
    adv_mean: np.ndarray  # the batch's advantage mean and std (NaN: no whitening)
    adv_std: np.ndarray
    batch_of_row: np.ndarray
    carry: np.ndarray  # per-turn returns: the return of the rollout's later segments


class RollTokens(StepMethod):
    """ROLL's way from a step's scalar s to token advantages (``agentic_compute_advantage``):
    s goes on the row's last action token (ROLL's step row ends with its response: an
    environment's reply logged after it is the next step's prompt); the token rewards
    are whitened over the batch's action tokens (``--whiten-rewards``) and masked; the
    advantage is their reward-to-go, A_j = Σ_{k ≥ j} γ^{k−j}·r_k (``--token-gamma``), or,
    per turn, the returns of :func:`advcli.core.steps.turn_returns` (agentic-reinforce); it is
    whitened over the batch's action tokens (``--whiten-advantages``), masked, and clipped
    (``--advantage-clip``). Whitening is (x − mean)/sqrt(var + 1e-8), var ddof 1, token-weighted,
    off in a batch of one action token (as ROLL). The batch: the log's ``batch`` column (a
    trainer step), else the whole log."""

    per_turn: ClassVar[bool] = False  # returns per turn (agentic-reinforce), not per token

    token_free: bool = False  # a copy for logs without token ids (:meth:`without_tokens`)

    def rolls(self, p: Params) -> bool:
        """Whether a run with ``p`` takes ROLL's token pipeline."""
        return not self.token_free

    def without_tokens(self, p: Params) -> Method[Any] | None:
        """Without tokens, the step's scalar is what ROLL's pipeline puts on every action
        token of the step when it neither discounts, whitens nor clips over tokens (returns
        per token, not per turn)."""
        if self.per_turn:
            return None
        if p.token_gamma != 1.0 or p.whiten_rewards or p.whiten_advantages or (
                p.advantage_clip is not None):  # fmt: skip
            return None
        plain = copy(self)
        plain.token_free = True
        return plain

    def row_sums(self, p: Params) -> tuple[str, ...]:
        if not self.rolls(p):
            return super().row_sums(p)
        return ("turns", *(("turn_return",) if self.per_turn else ()), *super().row_sums(p))

    def plan(self, rows: Rows, p: Params) -> OutcomePlan:
        plan = super().plan(rows, p)
        if not self.rolls(p):
            return plan
        last = rows.is_last_segment() if self.per_turn else np.ones(rows.n_rows, dtype=bool)
        lands = (rows.sums["turns"] > 0) & last
        end_reward = np.where(lands, plan.advantage, 0.0)
        batch_id, _, n_batches = completion_batches(rows, None)
        batch = batch_id[rows.rollout_codes]
        n = np.bincount(batch, weights=rows.sums["actions"], minlength=n_batches)
        none = np.full(rows.n_rows, np.nan)
        mean = std = none
        if p.whiten_rewards:
            sums = rows.sums
            zero = np.zeros(rows.n_rows)
            tokens = sums.get("action_reward_sum", zero)
            s1 = np.bincount(batch, weights=tokens + end_reward, minlength=n_batches)
            s2 = np.bincount(batch, minlength=n_batches, weights=sums.get(
                "action_reward_sq", zero) + (2 * sums.get("last_action_reward", zero) +
                                             end_reward) * end_reward)  # fmt: skip
            with np.errstate(invalid="ignore", divide="ignore"):
                m = s1 / n
                sd = np.sqrt((s2 - n * m * m) / (n - 1) + WHITEN_EPS)
            on = n > 1
            mean, std = np.where(on, m, np.nan)[batch], np.where(on, sd, np.nan)[batch]
        carry = np.zeros(rows.n_rows)
        if self.per_turn:
            carry = self.carried(rows, p, end_reward, mean, std)
        stats = {**plan.stats}
        off = (~lands & last).sum()
        if off:
            stats["rows_without_actions"] = int(off)
        return RollPlan(**{**plan.__dict__, "stats": stats}, end_reward=end_reward,
                        reward_mean=mean, reward_std=std, adv_mean=none, adv_std=none,
                        batch_of_row=batch, carry=carry)  # fmt: skip

    def carried(self, rows: Rows, p: Params, end_reward: np.ndarray, mean: np.ndarray,
                std: np.ndarray) -> np.ndarray:  # fmt: skip
        """Per row: the per-turn return of its rollout's later segments (their turns' rewards
        and s, whitened as the tokens will be)."""
        turns, g = rows.sums["turns"], p.step_gamma
        own = rows.sums.get("turn_return", np.zeros(rows.n_rows))
        own = own + end_reward * g ** np.maximum(turns - 1, 0)
        if p.whiten_rewards:
            weight = turns.astype(np.float64) if g == 1 else (1 - g**turns) / (1 - g)
            own = np.where(np.isnan(mean), own, (own - mean * weight) / std)
        at_start = S.step_returns(own, rows.rollout_codes, rows.segment_rank, g**turns)
        after = S.next_step(rows.rollout_codes, rows.segment_rank)
        out: np.ndarray = np.where(after >= 0, at_start[after], 0.0)
        return out

    def passes(self, rows: Rows, p: Params) -> list[TokenPass[Any]]:
        return [AdvantageMoments(self, p)] if self.rolls(p) and p.whiten_advantages else []

    def raw_advantages(self, plan: RollPlan, tokens: Tokens, row0: int, p: Params) -> np.ndarray:
        """Per token, before the advantages' whitening, the mask and the clip."""
        n, lengths = len(tokens.offsets) - 1, np.diff(tokens.offsets)
        rewards = np.zeros(len(tokens.mask))
        if self.per_turn and tokens.token_rewards is not None:
            rewards += tokens.token_rewards
        owners, at = S.last_actions(tokens.mask, tokens.offsets)
        rewards[at] += plan.end_reward[row0 : row0 + n][owners]
        mean, std = (np.repeat(x[row0 : row0 + n], lengths) for x in
                     (plan.reward_mean, plan.reward_std))  # fmt: skip
        rewards = np.where(np.isnan(mean), rewards, (rewards - mean) / std) * tokens.mask
        if not self.per_turn:
            return reverse_discounted_scan(rewards, p.token_gamma, tokens.offsets)
        ends = S.turn_ends(tokens.mask, tokens.offsets)
        turns = S.turn_counts(tokens.mask, tokens.offsets)
        returns = S.turn_returns(rewards[ends], turns, p.step_gamma, plan.carry[row0 : row0 + n])
        turn_of = np.cumsum(S.turn_starts(tokens.mask, tokens.offsets)) - 1
        out = np.zeros(len(tokens.mask))
        out[tokens.mask] = returns[turn_of[tokens.mask]]
        return out

    def apply(self, plan: OutcomePlan, tokens: Tokens, row0: int, p: Params
              ) -> dict[str, np.ndarray]:  # fmt: skip
        if not isinstance(plan, RollPlan):
            return super().apply(plan, tokens, row0, p)
        adv = self.raw_advantages(plan, tokens, row0, p)
        n, lengths = len(tokens.offsets) - 1, np.diff(tokens.offsets)
        mean, std = (np.repeat(x[row0 : row0 + n], lengths) for x in
                     (plan.adv_mean, plan.adv_std))  # fmt: skip
        adv = np.where(np.isnan(mean), adv, (adv - mean) / std)
        adv = np.where(tokens.mask, clipped(adv, p.advantage_clip), 0.0)
        return {"advantages": adv.astype(np.float32)}


class AdvantageMoments(TokenPass[RollPlan]):
    """The batch's mean and variance of the advantages over its action tokens, for
    ``--whiten-advantages`` (off in a batch of one action token)."""

    title = "whitening statistics"

    def __init__(self, method: RollTokens, p: Params):
        self.method, self.p = method, p
        self.moments: T.BatchMoments | None = None

    def measure(self, plan: RollPlan, row0: int, tokens: Tokens) -> T.Moments:
        adv = self.method.raw_advantages(plan, tokens, row0, self.p)
        n = len(tokens.offsets) - 1
        batch = np.repeat(plan.batch_of_row[row0 : row0 + n], np.diff(tokens.offsets))
        n_batches = int(plan.batch_of_row.max()) + 1 if len(plan.batch_of_row) else 0
        return T.moments(adv[tokens.mask], batch[tokens.mask], n_batches)

    def add(self, plan: RollPlan, row0: int, measured: T.Moments) -> None:
        if self.moments is None:
            self.moments = T.BatchMoments(len(measured[0]))
        self.moments.merge(measured)

    def finish(self, plan: RollPlan) -> RollPlan:
        if self.moments is None:
            return plan
        on = self.moments.count > 1
        mean = np.where(on, self.moments.mean, np.nan)
        std = np.where(on, np.sqrt(self.moments.var(1) + WHITEN_EPS), np.nan)
        return replace(plan, adv_mean=mean[plan.batch_of_row], adv_std=std[plan.batch_of_row])
