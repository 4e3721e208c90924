"""Outcome baselines: one advantage per rollout from the rewards of its group or batch, broadcast
to its action tokens (exactly 0 on every other token). The formulas are in
:mod:`advcli.core.group`; here they meet the log: which rollouts form a group or batch, the
zero-variance and singleton rules, and the rows dropped.

A segmented rollout counts once, with its last segment's reward; its advantage goes to every
segment. Statistics are float64; the advantages are written as float32.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from advcli.core import group as G
from advcli.core.conventions import Convention, EpsPlacement, Singleton, TiedStd
from advcli.core.ragged import lengths
from advcli.errors import RowError, UsageError
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import (
    BATCH_SIZE,
    BATCHES_PANEL,
    DDOF,
    Method,
    Plan,
    completion_batches,
)
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens

PANEL = BATCHES_PANEL


BASELINE = Param(
    "baseline",
    str,
    "group",
    "grpo: subtract the group's mean, or the mean of the others (leave-one-out).",
    PANEL,
    choices=get_args(G.Baseline),
    conventional=True,
)
SCALE = Param(
    "scale",
    str,
    "group",
    "grpo: divide by the group's std, the batch's, the others' (leave-one-out), or none "
    "(Dr. GRPO).",
    PANEL,
    choices=get_args(G.Scale),
    conventional=True,
)
STD_DDOF = Param(
    "std_ddof", int, None, "ddof of the group std.", PANEL, conventional=True, range=DDOF
)
EPS = Param("eps", float, None, "eps of std + eps.", PANEL, conventional=True, range=Range(0))
EPS_PLACEMENT = Param(
    "eps_placement",
    str,
    None,
    "add (std + eps) or max (max(std, eps)).",
    PANEL,
    choices=get_args(EpsPlacement),
    conventional=True,
)
SINGLETON = Param(
    "singleton",
    str,
    None,
    "Groups of one: zero, raw, error or drop.",
    PANEL,
    choices=get_args(Singleton),
    conventional=True,
)
TIED_STD = Param(
    "tied_std",
    str,
    None,
    "grpo: the std of equal rewards: zero, or float32 (NeMo-RL before its PR #4158 divided "
    "by the rounding noise its float32 moments left).",
    PANEL,
    choices=get_args(TiedStd),
    conventional=True,
)
ZERO_VARIANCE = Param(
    "zero_variance",
    str,
    "keep",
    "keep (flagged, advantage 0) or drop zero-variance groups.",
    PANEL,
    choices=("keep", "drop"),
)
ZERO_VARIANCE_TOL = Param(
    "zero_variance_tol",
    float,
    G.ZERO_VARIANCE_TOL,
    f"A group is zero-variance when max - min <= this (default {G.ZERO_VARIANCE_TOL:g}; "
    "nemo-rl: 0, as NeMo-RL normalises any spread).",
    PANEL,
    conventional=True,
    range=Range(0),
)
ZERO_STD = Param(
    "zero_std",
    float,
    None,
    "A group is also zero-variance when its std <= this (ROLL: 1e-6; 0: off).",
    PANEL,
    conventional=True,
    range=Range(0),
)
F_NORM = Param(
    "f_norm",
    float,
    1.0,
    "gpg: divide the advantages by this.",
    PANEL,
    range=Range(0, low_open=True),
)
BETA = Param(
    "beta",
    float,
    1.0,
    "sppo: the baseline is (1/beta) log mean exp(beta R) over the batch (0: the mean).",
    PANEL,
)
PARTIAL = Param(
    "partial",
    str,
    "drop",
    "A trailing short batch: drop or keep.",
    PANEL,
    choices=("drop", "keep"),
)

PARAMETERS = (
    BASELINE,
    SCALE,
    STD_DDOF,
    EPS,
    EPS_PLACEMENT,
    SINGLETON,
    ZERO_VARIANCE,
    ZERO_VARIANCE_TOL,
    ZERO_STD,
    BATCH_SIZE,
    PARTIAL,
    F_NORM,
    BETA,
)


@dataclass(frozen=True, kw_only=True)
class OutcomePlan(Plan):
    advantage: np.ndarray  # per row: its rollout's advantage (float64)


@dataclass
class RolloutAdvantages:
    """What an outcome method computes per rollout."""

    advantage: np.ndarray  # float64
    columns: dict[str, np.ndarray]  # output columns, per rollout
    zero_variance: np.ndarray  # bool: the rollout's group (or batch) carries no signal
    drop: dict[str, np.ndarray]  # reason -> bool per rollout: rows the method leaves out
    stats: dict[str, Any]  # for the summary


class OutcomeMethod(Method[OutcomePlan]):
    """A method that gives each rollout one advantage, from the rollouts' rewards alone."""

    @abstractmethod
    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        """Advantages and group columns per rollout; ``rewards`` has one per rollout."""

    def rewards(self, rows: Rows, p: Params) -> np.ndarray:
        """One reward per rollout: its last segment's, less beta * sum_t kl_t (--kl-coef)."""
        rewards = rows.rollout_rewards()
        return rewards - p.kl_coef * signals.rollout_kl(rows) if p.kl_coef else rewards

    def rollout_advantages(self, rows: Rows, p: Params) -> RolloutAdvantages:
        """:meth:`advantages` of the rollouts that have a reward; those without one (TRL's
        unscorable completions) are left out of every statistic and get 0."""
        unscored = rows.unscored_rollouts()
        if unscored is None:
            return self.advantages(rows, self.rewards(rows, p), p)
        scored = rows.scored()
        r = self.advantages(scored, self.rewards(scored, p), p)
        keep = ~unscored

        def full(x: np.ndarray) -> np.ndarray:
            out = np.full(len(keep), np.nan if x.dtype.kind == "f" else 0, dtype=x.dtype)
            out[keep] = x
            return out

        advantage = np.zeros(len(keep))
        advantage[keep] = r.advantage
        return RolloutAdvantages(
            advantage=advantage,
            columns={name: full(values) for name, values in r.columns.items()},
            zero_variance=full(r.zero_variance),
            drop={reason: full(flags) for reason, flags in r.drop.items()},
            stats={**r.stats, "unscored_rollouts": int(unscored.sum())},
        )

    def plan(self, rows: Rows, p: Params) -> OutcomePlan:
        r = self.rollout_advantages(rows, p)
        codes = rows.rollout_codes
        drop = np.zeros(rows.n_rollouts, dtype=bool)
        dropped: dict[str, int] = {}
        for reason, flagged in r.drop.items():
            if flagged.any():
                drop |= flagged
                dropped[reason] = int(flagged[codes].sum())
        zero_var = r.zero_variance
        if zero_var.any() and p.zero_variance == "drop":  # (a method without such groups
            # takes no --zero-variance)
            drop |= zero_var
            dropped["zero_variance"] = int(zero_var[codes].sum())
        stats = {**r.stats, **signals.kl_stats(rows, p)}
        stats["zero_variance_rollout_share"] = float(zero_var.mean()) if len(zero_var) else 0.0
        advantage = signals.clamped(r.advantage, p)
        columns = {"advantage": advantage[codes].astype(np.float32)}
        columns.update({name: values[codes] for name, values in r.columns.items()})
        return OutcomePlan(
            columns=columns,
            kept=~drop[codes],
            dropped=dropped,
            stats=stats,
            advantage=advantage[codes],
        )

    def apply(
        self, plan: OutcomePlan, tokens: Tokens, row0: int, p: Params
    ) -> dict[str, np.ndarray]:
        """Each row's advantage on its action tokens, exactly 0 elsewhere."""
        return {"advantages": on_actions(plan.advantage, tokens, row0)}


def on_actions(per_row: np.ndarray, tokens: Tokens, row0: int) -> np.ndarray:
    """The float32 advantage of each row of the batch starting at ``row0`` on its action
    tokens, exactly 0 elsewhere."""
    rows = per_row[row0 : row0 + len(tokens.offsets) - 1].astype(np.float32)
    adv = np.repeat(rows, lengths(tokens.offsets))
    adv[~tokens.mask] = 0.0
    return adv


def refuse_singletons(rows: Rows, single: np.ndarray, p: Params) -> None:
    """With ``--singleton error``, the first rollout alone in its group is an error."""
    if p.singleton != "error" or not single.any():
        return
    assert rows.group_keys is not None and rows.group_codes is not None
    row = int(np.flatnonzero(single[rows.rollout_codes])[0])
    key = rows.group_keys[rows.group_codes[row]].as_py()
    problem = (
        f"prompt {key!r} has a single rollout; `singleton='error'` (convention {p.convention}, "
        f"method {p.method}) forbids singleton groups. Hint: pass `singleton='zero'`, raw or drop"
    )
    raise RowError(row, ("prompt_id",), problem)


GROUP_RULES = (STD_DDOF, SINGLETON, ZERO_VARIANCE, ZERO_VARIANCE_TOL, ZERO_STD)
"""What every group baseline reads: the group statistics and the zero-variance and singleton
rules (:meth:`GroupBaseline.advantages`)."""


class GroupBaseline(OutcomeMethod):
    """A baseline from the rollout's group (the rollouts sharing its prompt id)."""

    roles: ClassVar[tuple[str, ...]] = ("prompt_id", "reward")
    outputs = (
        "advantages",
        "advantage",
        "group_size",
        "group_mean",
        "group_std",
        "zero_variance",
        "singleton",
    )

    @abstractmethod
    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        """Advantages per rollout; ``singleton`` groups follow ``p.singleton`` (raw or zero)."""

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        assert rows.group_keys is not None and rows.group_codes is not None
        codes = rows.rollout_groups()
        stats = G.group_stats(
            rewards,
            codes,
            len(rows.group_keys),
            ddof=p.std_ddof,
            tol=p.zero_variance_tol,
            min_std=p.zero_std,
        )
        single = stats.singleton[codes]
        refuse_singletons(rows, single, p)
        zero_var = stats.zero_variance[codes]
        return RolloutAdvantages(
            advantage=self.from_group(rows, rewards, codes, stats, p),
            columns={
                "group_size": stats.size[codes],
                "group_mean": stats.mean[codes],
                "group_std": stats.std[codes],
                "zero_variance": zero_var,
                "singleton": single,
            },
            zero_variance=zero_var,
            drop={"singleton": single} if p.singleton == "drop" else {},
            stats={
                "zero_variance_groups": int(stats.zero_variance.sum()),
                "singleton_groups": int(stats.singleton.sum()),
            },
        )


class Grpo(GroupBaseline):
    name = "grpo"
    summary = (
        "(R − mean_g) / (std_g + eps); `--scale none` is Dr. GRPO (R − mean_g), "
        "`--scale batch` divides by the batch's std; `--baseline leave-one-out` and `--scale "
        "leave-one-out` use the other rollouts' mean and std (NeMo-RL)"
    )
    parameters: ClassVar[tuple[Param, ...]] = (
        BASELINE,
        SCALE,
        EPS,
        EPS_PLACEMENT,
        TIED_STD,
        BATCH_SIZE,
        *GROUP_RULES,
    )

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        batch_mean = batch_std = None
        if "batch" in (p.baseline, p.scale):
            batch_id, _, n_batches = completion_batches(rows, p.batch_size)
            batch_mean, batch_std = G.batch_mean_std(rewards, batch_id, n_batches, ddof=p.std_ddof)
        return G.grpo(
            rewards,
            codes,
            stats,
            eps=p.eps,
            eps_placement=p.eps_placement,
            baseline=p.baseline,
            scale=p.scale,
            batch_std=batch_std,
            batch_mean=batch_mean,
            singleton=kept_singleton(p),
            tied_std=p.tied_std,
        )


def kept_singleton(p: Params) -> str:
    """What the core does with a singleton that is kept: its raw reward, or 0."""
    return "raw" if p.singleton == "raw" else "zero"


class Rloo(Grpo):
    """RLOO is GRPO with the leave-one-out baseline and no scale."""

    name = "rloo"
    summary = (
        "R_i − mean of the other rollouts of the group = n/(n−1)·(R_i − mean_g): grpo with "
        "`--baseline leave-one-out --scale none`"
    )

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"baseline": "leave-one-out", "scale": "none"}


class DrGrpo(Grpo):
    """Dr. GRPO is GRPO without the std."""

    name = "dr-grpo"
    summary = "R − mean_g (Dr. GRPO): grpo with `--scale none`"

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"scale": "none"}


class Opo(GroupBaseline):
    """OPO: A_i = R_i − Σ_j |o_j|·R_j / Σ_j |o_j| over the group, |o_j| its action tokens
    (:func:`advcli.core.group.opo`)."""

    name = "opo"
    summary = (
        "R − Σ|o_j|·R_j / Σ|o_j| over the group, |o| the action tokens (verl "
        "`compute_opo_outcome_advantage`)"
    )
    roles = ("input_ids", "prompt_id", "reward")
    parameters = GROUP_RULES

    def row_sums(self, p: Params) -> tuple[str, ...]:
        return ("actions", *super().row_sums(p))

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        lengths = np.bincount(rows.rollout_codes, weights=rows.sums["actions"])
        return G.opo(rewards, codes, stats, lengths, singleton=kept_singleton(p))


class GrpoPassk(GroupBaseline):
    """Pass@k GRPO: the best rollout gets (R_max − R_second) / (std_g + eps), the rest 0
    (:func:`advcli.core.group.grpo_passk`)."""

    name = "grpo-passk"
    summary = (
        "the group's best rollout: (R_max − R_second) / (std_g + eps), every other 0; ties: the "
        "first wins (verl `compute_grpo_passk_outcome_advantage`)"
    )
    parameters = (SCALE, EPS, EPS_PLACEMENT, *GROUP_RULES)

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"std_ddof": 1, "singleton": "error", "scale": "group"}

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        if p.scale not in ("group", "none"):
            msg = (
                f"`scale={p.scale!r}`: grpo-passk divides by the group's std (group) or not (none)"
            )
            raise UsageError(msg)
        return G.grpo_passk(rewards, codes, stats, eps=p.eps, eps_placement=p.eps_placement,
                            scale=p.scale == "group", singleton=kept_singleton(p))  # fmt: skip


class Gpg(GroupBaseline):
    """GPG: A_i = α·(R_i − mean_g) / f_norm, α = B / max(1, nonzero rewards in the batch)
    (:func:`advcli.core.group.gpg`)."""

    name = "gpg"
    summary = (
        "α·(R − mean_g) / f_norm, α = B / max(1, nonzero rewards in the batch of B rollouts) "
        "(verl `compute_gpg_outcome_advantage`)"
    )
    parameters = (F_NORM, BATCH_SIZE, *GROUP_RULES)

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        batch_id, _, n_batches = completion_batches(rows, p.batch_size)
        adv, _ = G.gpg(rewards, codes, stats, batch_id, n_batches, f_norm=p.f_norm,
                       singleton=kept_singleton(p))  # fmt: skip
        return adv


class MaxRL(GroupBaseline):
    """MaxRL: A_i = (R_i − mean_g) / mean_g, 0 where mean_g ≤ 0 (:func:`advcli.core.group.maxrl`).
    A singleton gets 0 whatever ``--singleton`` keeps: its own mean gives R − R = 0, and
    ``raw``'s mean of 0 is ≤ 0."""

    name = "maxrl"
    summary = "(R − mean_g) / mean_g, 0 where mean_g ≤ 0 (prime-rl `max_rl`)"
    parameters = GROUP_RULES

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        return G.maxrl(rewards, codes, stats)


class BatchBaseline(OutcomeMethod):
    """A baseline from the rollout's batch (``--batch-size`` rollouts in completion order)."""

    roles = ("reward",)
    parameters: ClassVar[tuple[Param, ...]] = (
        BATCH_SIZE,
        PARTIAL,
        ZERO_VARIANCE,
        ZERO_VARIANCE_TOL,
    )
    baseline_column: ClassVar[str] = "batch_baseline"

    @property
    def outputs(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("advantages", "advantage", "batch_id", "batch_size", self.baseline_column,
                "partial_batch", "zero_variance")  # fmt: skip

    @abstractmethod
    def baseline(self, rewards: np.ndarray, batch_id: np.ndarray, n: int, p: Params) -> np.ndarray:
        """The baseline of each batch."""

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        batch_id, partial, n_batches = completion_batches(rows, p.batch_size)
        base = self.baseline(rewards, batch_id, n_batches, p)
        adv, stats = G.batch_mean(rewards, batch_id, n_batches, tol=p.zero_variance_tol,
                                  baseline=base)  # fmt: skip
        drop_partial = p.partial == "drop" and partial.any()
        if drop_partial:
            adv = np.where(partial, 0.0, adv)
        zero_var = stats.zero_variance[batch_id]
        return RolloutAdvantages(
            advantage=adv,
            columns={
                "batch_id": batch_id,
                "batch_size": stats.size[batch_id],
                self.baseline_column: base[batch_id],
                "partial_batch": partial,
                "zero_variance": zero_var,
            },
            zero_variance=zero_var,
            drop={"partial_batch": partial} if drop_partial else {},
            stats={},
        )


class BatchMean(BatchBaseline):
    name = "batch-mean"
    summary = (
        "R_i − mean of its batch: one-batch REINFORCE over completion-ordered batches of "
        "`--batch-size B`"
    )
    baseline_column = "batch_mean"

    def baseline(self, rewards: np.ndarray, batch_id: np.ndarray, n: int, p: Params) -> np.ndarray:
        return G.group_stats(rewards, batch_id, n, ddof=0, tol=0.0).mean


class Sppo(BatchBaseline):
    """SPPO: A_i = R_i − (1/β)·log mean_batch exp(β·R) (:func:`advcli.core.group.soft_mean`)."""

    name = "sppo"
    summary = "R − (1/β)·log mean exp(β·R) over the batch (verl-recipe `sppo`, `--beta`, default 1)"
    parameters = (BETA, BATCH_SIZE, PARTIAL, ZERO_VARIANCE, ZERO_VARIANCE_TOL)

    def baseline(self, rewards: np.ndarray, batch_id: np.ndarray, n: int, p: Params) -> np.ndarray:
        return G.soft_mean(rewards, batch_id, n, beta=p.beta)


METHODS = (Grpo(), Rloo(), DrGrpo(), Opo(), GrpoPassk(), Gpg(), MaxRL(), BatchMean(), Sppo())
