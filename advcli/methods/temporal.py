"""Temporal estimators: per-token advantages over a rollout's time steps, from its rewards and
(for mc, td and gae) its critic values. The recursions are in :mod:`advcli.core.temporal`; here
they meet the log: which tokens are steps, where rewards sit, what comes after a row's last step
(a bootstrap value, the next segment), and the batch whitening.

Time steps are the action tokens (``--observations skip``), or every token from a row's first
to last action (``step``). The outcome reward sits on the last action token; ``token_rewards``
add per token. After the last step comes 0, or ``bootstrap_value`` when the row is truncated.

Segments of one rollout (rows sharing ``rollout_id``, ordered by ``segment_index``):

- ``--segments compaction``: every segment is its own sample with the rollout's reward on its
  last action, its advantages scaled by (gamma * lambda) ** (action tokens in later segments);
- ``--segments chain``: one recursion over all segments; each segment's last step bootstraps
  from what the next segment starts with (:class:`ChainPass`).

Token passes before the final one, as the run needs them (:mod:`advcli.methods.temporal_passes`):
action counts (adaptive lambda, compaction), the segment chain, whitening moments per batch.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, get_args

from advcli.core import group as G
from advcli.core import temporal as T
from advcli.core.conventions import Convention, EpsPlacement, KlOn, Observations, Whiten
from advcli.core.ragged import lengths
from advcli.errors import RowError, UsageError
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import (
    BATCH_SIZE,
    DDOF,
    Method,
    TokenPass,
)
from advcli.methods.temporal_passes import (
    ChainPass,
    CountPass,
    Estimates,
    Lam,
    Steps,
    TemporalPlan,
    WhitenPass,
    adaptive,
)
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens

PANEL = "Temporal estimators"
Deltas: TypeAlias = "Callable[[], np.ndarray]"


def _parse_lam(value: Any) -> float | str:
    if value == "adaptive":
        return "adaptive"
    try:
        return float(value)
    except (TypeError, ValueError):
        msg = f"`lam` {value!r}: expected a number in [0, 1] or 'adaptive'"
        raise UsageError(msg) from None


UNIT = Range(0, 1)


def _check_lam(value: Any, values: Any) -> str | None:
    if value == "adaptive" and values["alpha"] is None:
        return "`lam='adaptive'` needs `alpha` A > 0 (VAPO uses 0.05, SAO 1.5)"
    return None


GAMMA = Param("gamma", float, 1.0, "Discount per action step.", PANEL, range=UNIT)
LAM = Param(
    "lam",
    str,
    "0.95",
    "GAE lambda, or 'adaptive' (needs --alpha).",
    PANEL,
    parse=_parse_lam,
    check=_check_lam,
    range=UNIT,
)
ALPHA = Param(
    "alpha",
    float,
    None,
    "Adaptive lambda: clamp(1 - 1/(alpha * l), 0, 1).",
    PANEL,
    range=Range(0, low_open=True),
)
LAM_CRITIC = Param(
    "lam_critic",
    float,
    1.0,
    "Lambda of the returns (critic targets).",
    PANEL,
    range=UNIT,
)
OBSERVATIONS = Param(
    "observations",
    str,
    None,
    "skip (not time steps) or step (zero-reward, zero-value steps).",
    PANEL,
    choices=get_args(Observations),
    conventional=True,
)
SEGMENTS = Param(
    "segments",
    str,
    "compaction",
    "Segmented rollouts: compaction or chain.",
    PANEL,
    choices=("compaction", "chain"),
)
WHITEN = Param(
    "whiten",
    str,
    "none",
    "none or batch (token-weighted, per batch).",
    PANEL,
    choices=get_args(Whiten),
    conventional=True,
)
WHITEN_DDOF = Param(
    "whiten_ddof", int, None, "ddof of whitening.", PANEL, conventional=True, range=DDOF
)
WHITEN_EPS_PLACEMENT = Param(
    "whiten_eps_placement",
    str,
    None,
    "Whitening divides by sqrt(var + 1e-8) (add) or sqrt(max(var, 1e-8)) (max, NeMo-RL).",
    PANEL,
    choices=get_args(EpsPlacement),
    conventional=True,
)
STRICT = Param(
    "strict", bool, False, "A reward on a non-action token is an error, not moved.", PANEL
)
KL_ON = Param(
    "kl_on",
    str,
    None,
    "--kl-coef's tokens: the actions, or every step (with --observations step: the tool "
    "tokens between actions too, as miles' REINFORCE++).",
    PANEL,
    choices=get_args(KlOn),
    conventional=True,
    check=lambda value, values: (
        "`kl_on='steps'`: the steps between actions are tokens only with `observations='step'`"
        if value == "steps" and values.get("observations") != "step" and values.get("kl_coef")
        else None
    ),
)

PARAMETERS = (GAMMA, LAM, ALPHA, LAM_CRITIC, OBSERVATIONS, SEGMENTS, WHITEN, WHITEN_DDOF,
              WHITEN_EPS_PLACEMENT, STRICT, KL_ON)  # fmt: skip
_COMMON = (GAMMA, OBSERVATIONS, SEGMENTS, WHITEN, WHITEN_DDOF, WHITEN_EPS_PLACEMENT, BATCH_SIZE,
           STRICT, KL_ON)  # fmt: skip


class TemporalMethod(Method[TemporalPlan]):
    """A per-token estimator over time steps. Subclasses give :meth:`estimates`."""

    value_returns: ClassVar[bool]  # returns are the critic's targets (GAE with lam_critic + V)
    outputs = ("advantages", "returns")  # and `lam`, per row, with --lam adaptive

    def lambda_eff(self, lam: Lam) -> Lam:
        """The lambda that discounts the advantages from one step to the one before."""
        return 1.0

    def outcomes(self, rows: Rows, p: Params) -> np.ndarray:
        """Per row: the reward of its rollout."""
        assert rows.reward is not None
        outcome: np.ndarray = rows.reward[rows.last_segment_row()][rows.rollout_codes]
        return outcome

    @abstractmethod
    def estimates(
        self, steps: Steps, p: Params, *, returns: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(advantages, returns)`` per step; ``returns=False``: the advantages only (the
        returns may then be anything: the whitening pass needs no returns)."""

    def plan(self, rows: Rows, p: Params) -> TemporalPlan:
        _check_bootstrap(rows)
        last_seg = rows.is_last_segment()
        outcome = self.outcomes(rows, p)
        if rows.segmented and p.segments == "chain":
            outcome = np.where(last_seg, outcome, 0.0)
        tail = np.where(last_seg, rows.bootstrap, 0.0)
        return TemporalPlan(
            columns={},
            stats=signals.kl_stats(rows, p),
            outcome=outcome,
            alone=last_seg & (rows.segment_rank == 0),
            tail=tail,
            tail_critic=tail.copy(),
            lam=p.lam if "lam" in p else 1.0,  # without a lambda of its own: unused
        )

    def passes(self, rows: Rows, p: Params) -> list[TokenPass[TemporalPlan]]:
        passes: list[TokenPass[TemporalPlan]] = []
        if adaptive(p) or (rows.segmented and p.segments == "compaction"):
            passes.append(CountPass(self, rows, p))
        if rows.segmented and p.segments == "chain":
            passes.append(ChainPass(self, rows, p))
        if "whiten" in p and p.whiten == "batch":
            passes.append(WhitenPass(self, rows, p))
        return passes

    def steps(
        self,
        plan: TemporalPlan,
        tokens: Tokens,
        row0: int,
        p: Params,
        *,
        local: bool = False,
        returns: bool = True,
    ) -> Estimates:
        """The method on one batch, before whitening. ``local``: as if nothing came after each
        row's last step (what :class:`ChainPass` measures); ``returns=False``: the advantages
        only."""
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
        untrained = plan.alone[rows] & (step_offsets[1:] == step_offsets[:-1])
        _check_rewards(orphaned & ~untrained, moved, row0, strict=p.strict)
        if p.kl_coef:  # the penalty sits on the action tokens (or every step), before any
            # estimate
            on = positions if "kl_on" in p and p.kl_on == "steps" else None
            kl = signals.token_kl(tokens, p, on=on, row0=row0)
            rewards = rewards - p.kl_coef * kl[positions]
        # With observations skipped the steps are exactly the action tokens: boolean gathers and
        # scatters then move the data (twice as fast as index arrays, masks coming in spans).
        skip = p.observations == "skip"
        is_action = np.ones(len(positions), dtype=bool) if skip else tokens.mask[positions]
        if self.reads_values:
            assert tokens.values is not None
            if skip:
                values = tokens.values[tokens.mask].astype(np.float64)
            else:
                values = np.take(tokens.values, positions).astype(np.float64)
                values[~is_action] = 0.0
        else:
            values = np.zeros(len(positions))
        steps = Steps(
            step_offsets,
            is_action,
            values,
            rewards,
            tail=np.zeros(n) if local else plan.tail[rows],
            tail_critic=np.zeros(n) if local else plan.tail_critic[rows],
            lam=plan.lam if np.ndim(plan.lam) == 0 else plan.lam[rows],  # type: ignore[index]
        )
        adv, step_returns = self.estimates(steps, p, returns=returns)
        if plan.scale is not None:
            step_lens = lengths(step_offsets)
            adv *= np.repeat(plan.scale[rows], step_lens)
            if self.value_returns and returns:
                assert plan.scale_critic is not None
                step_returns *= np.repeat(plan.scale_critic[rows], step_lens)
        if plan.baseline is not None:
            adv -= np.repeat(plan.baseline[rows], lengths(step_offsets))
        return Estimates(steps, adv, step_returns)

    def apply(
        self, plan: TemporalPlan, tokens: Tokens, row0: int, p: Params
    ) -> dict[str, np.ndarray]:
        """Whiten if planned, then the steps' results as per-token float32 columns (the
        estimates a held whitening pass measured on these rows, where it kept them)."""
        est = plan.measured.pop(row0, None) or self.steps(plan, tokens, row0, p)
        steps, adv = est.steps, est.advantages
        if plan.whiten_mean is not None:
            assert plan.whiten_std is not None and plan.whiten_batch is not None
            batch = plan.whiten_batch[row0 : row0 + len(steps.step_offsets) - 1]
            if len(batch) and (batch == batch[0]).all():  # one batch: its statistics alone
                mean, std = plan.whiten_mean[batch[0]], plan.whiten_std[batch[0]]
            else:  # the rows' statistics repeated over their steps (a gather per step costs
                # more)
                step_lens = lengths(steps.step_offsets)
                mean = np.repeat(plan.whiten_mean[batch], step_lens)
                std = np.repeat(plan.whiten_std[batch], step_lens)
            whitened = (adv - mean) / std
            adv = whitened if steps.is_action.all() else np.where(steps.is_action, whitened, adv)
        returns = est.returns + steps.values if self.value_returns else est.returns
        return {
            "advantages": _scatter(adv, steps, tokens.mask),
            "returns": _scatter(returns, steps, tokens.mask),
        }


def _check_bootstrap(rows: Rows) -> None:
    """A truncated row needs the value after its last token."""
    bad = np.flatnonzero(rows.truncated & ~np.isfinite(rows.bootstrap))
    if not len(bad):
        return
    row = int(bad[0])
    if not rows.has_bootstrap:
        problem = (
            "the row is truncated but the log has no bootstrap_value column. Hint: add "
            "'bootstrap_value' (the critic's value after the last token), or mark the row as "
            "not truncated"
        )
        raise RowError(row, ("truncated",), problem)
    problem = (
        f"the row is truncated but its bootstrap value is {rows.bootstrap[row]}. Hint: give a "
        "finite bootstrap value (the critic's value after the last token)"
    )
    raise RowError(row, ("bootstrap_value",), problem)


def _check_rewards(orphaned: np.ndarray, moved: np.ndarray, row0: int, *, strict: bool) -> None:
    roles = ("token_rewards", "reward")  # the column that holds the reward in question
    if orphaned.any():
        problem = (
            "a reward comes before the row's first action token, so no action can take it. "
            "Hint: check the action mask, or move the reward"
        )
        raise RowError(row0 + int(np.flatnonzero(orphaned)[0]), roles, problem)
    if strict and moved.any():
        problem = (
            "a reward sits on a non-action token (`strict=True` forbids moving it to the preceding "
            "action). Hint: drop `strict`"
        )
        raise RowError(row0 + int(np.flatnonzero(moved)[0]), roles, problem)


def _scatter(step_values: np.ndarray, steps: Steps, mask: np.ndarray) -> np.ndarray:
    """Per-token float32 array: step values on the action tokens, exactly 0 elsewhere.

    The action steps, in order, are the tokens where ``mask`` is set (a boolean scatter).
    """
    out = np.zeros(len(mask), dtype=np.float32)
    values = step_values.astype(np.float32)  # a scatter that also casts is twice as slow
    out[mask] = values if steps.is_action.all() else values[steps.is_action]
    return out


# --------------------------------------------------------------------------- the methods


class ValueMethod(TemporalMethod):
    """An estimator from critic values; its returns (the critic's targets) are GAE with
    ``--lam-critic`` plus V."""

    roles = ("input_ids", "values", "reward")
    reads_values = True
    value_returns = True
    parameters: ClassVar[tuple[Param, ...]] = (*_COMMON, LAM_CRITIC)

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"whiten": convention.temporal_whiten}

    def estimates(
        self, steps: Steps, p: Params, *, returns: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        offsets = steps.step_offsets
        if not returns:
            delta = T.td_errors(
                steps.values, steps.rewards, offsets, gamma=p.gamma, next_value=steps.tail
            )
            adv = self.advantages(steps, p, lambda: delta)
            return adv, adv
        delta_critic = T.td_errors(
            steps.values, steps.rewards, offsets, gamma=p.gamma, next_value=steps.tail_critic
        )
        targets = T.gae_from_td(delta_critic, offsets, gamma=p.gamma, lam=p.lam_critic)

        def deltas() -> np.ndarray:  # the same TD errors when both bootstrap alike
            if np.array_equal(steps.tail, steps.tail_critic):
                return delta_critic
            return T.td_errors(
                steps.values, steps.rewards, offsets, gamma=p.gamma, next_value=steps.tail
            )

        return self.advantages(steps, p, deltas), targets

    @abstractmethod
    def advantages(self, steps: Steps, p: Params, deltas: Deltas) -> np.ndarray:
        """Per step; ``deltas()`` gives the TD errors bootstrapping from ``steps.tail``."""


class MonteCarlo(ValueMethod):
    name = "mc"
    summary = "G_k − V(a_k), G the discounted return over action tokens"

    def advantages(self, steps: Steps, p: Params, deltas: Deltas) -> np.ndarray:
        return T.monte_carlo(
            steps.values, steps.rewards, steps.step_offsets, gamma=p.gamma, next_value=steps.tail
        )


class TemporalDifference(ValueMethod):
    name = "td"
    summary = "r_k + γ·V_next − V(a_k)"

    def lambda_eff(self, lam: Lam) -> Lam:
        return 0.0

    def advantages(self, steps: Steps, p: Params, deltas: Deltas) -> np.ndarray:
        return deltas()


class Gae(ValueMethod):
    name = "gae"
    summary = (
        "δ_k + γλ·A_{k+1} (`--gamma`, `--lam`; `--lam adaptive --alpha A`: "
        "λ = clamp(1 − 1/(A·l), 0, 1) per rollout, written as `lam`)"
    )
    parameters = (*ValueMethod.parameters, LAM, ALPHA)

    def lambda_eff(self, lam: Lam) -> Lam:
        return lam

    def advantages(self, steps: Steps, p: Params, deltas: Deltas) -> np.ndarray:
        return T.gae_from_td(deltas(), steps.step_offsets, gamma=p.gamma, lam=steps.lam)


class ReinforcePP(TemporalMethod):
    """REINFORCE++: the discounted return-to-go, whitened over the batch (by default)."""

    name = "reinforce-pp"
    summary = "discounted return-to-go, then whitened over the batch's action tokens"
    roles: ClassVar[tuple[str, ...]] = ("input_ids", "reward")
    value_returns = False
    parameters = _COMMON

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"whiten": "batch"}

    def estimates(
        self, steps: Steps, p: Params, *, returns: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        adv = T.discounted_returns(
            steps.rewards, steps.step_offsets, gamma=p.gamma, next_value=steps.tail
        )
        return adv, adv.copy() if returns else adv


class ReinforcePPBaseline(ReinforcePP):
    name = "reinforce-pp-baseline"
    summary = "the same after subtracting the group mean from R"
    roles = ("input_ids", "prompt_id", "reward")

    def outcomes(self, rows: Rows, p: Params) -> np.ndarray:
        assert rows.group_keys is not None
        codes = rows.rollout_groups()
        rewards = rows.rollout_rewards()  # what the group mean is of: with the KL penalty
        if p.kl_coef:
            rewards = rewards - p.kl_coef * signals.rollout_kl(rows)
        stats = G.group_stats(rewards, codes, len(rows.group_keys), ddof=0, tol=0.0)
        centred: np.ndarray = super().outcomes(rows, p) - stats.mean[codes][rows.rollout_codes]
        return centred


class ReMax(TemporalMethod):
    """ReMax (verl ``compute_remax_outcome_advantage``): A_t = G_t - b, with G_t the return-to-go
    over the action tokens (undiscounted, as verl: ``--gamma`` 1) and b the reward of the greedy
    rollout of the same prompt (``baseline_reward``); the returns are G_t."""

    name = "remax"
    summary = (
        "G_t − b: the return-to-go over action tokens minus the greedy rollout's reward "
        "(`baseline_reward`); `returns` = G_t (verl `compute_remax_outcome_advantage`)"
    )
    roles = ("input_ids", "reward", "baseline_reward")
    value_returns = False
    parameters = (GAMMA, OBSERVATIONS, SEGMENTS, STRICT)

    def plan(self, rows: Rows, p: Params) -> TemporalPlan:
        assert rows.baseline_reward is not None
        greedy = rows.baseline_reward[rows.last_segment_row()][rows.rollout_codes]
        bad = ~(np.abs(greedy) <= np.finfo(np.float32).max)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            problem = f"baseline reward {greedy[row]} is not a finite number"
            raise RowError(row, ("baseline_reward",), f"{problem}. Hint: fix or drop the row")
        return replace(super().plan(rows, p), baseline=greedy)

    def estimates(
        self, steps: Steps, p: Params, *, returns: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        to_go = T.discounted_returns(
            steps.rewards, steps.step_offsets, gamma=p.gamma, next_value=steps.tail
        )
        return to_go.copy(), to_go


METHODS = (
    MonteCarlo(),
    TemporalDifference(),
    Gae(),
    ReinforcePP(),
    ReinforcePPBaseline(),
    ReMax(),
)
