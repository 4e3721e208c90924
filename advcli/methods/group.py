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
from typing import Any, get_args

import numpy as np

from advcli.core import group as G
from advcli.core.conventions import EpsPlacement, Singleton
from advcli.core.ragged import lengths
from advcli.errors import RowError
from advcli.io.rollouts import Rows, Tokens
from advcli.methods.base import (
    BATCH_SIZE,
    BATCHES_PANEL,
    Method,
    Plan,
    completion_batches,
    ddof_check,
)
from advcli.params import Param, Params

PANEL = BATCHES_PANEL


def _non_negative(value: Any, _: object) -> str | None:
    return f"--eps {value}: expected a number >= 0" if value < 0 else None


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
    "std_ddof", int, None, "ddof of the group std.", PANEL, conventional=True, check=ddof_check
)
EPS = Param("eps", float, None, "eps of std + eps.", PANEL, conventional=True, check=_non_negative)
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
ZERO_VARIANCE = Param(
    "zero_variance",
    str,
    "keep",
    "keep (flagged, advantage 0) or drop zero-variance groups.",
    PANEL,
    choices=("keep", "drop"),
)
ZERO_VARIANCE_TOL = Param(
    "zero_variance_tol", float, 1e-9, "A group is zero-variance when max - min <= this.", PANEL
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
    BATCH_SIZE,
    PARTIAL,
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

    def plan(self, rows: Rows, p: Params) -> OutcomePlan:
        r = self.advantages(rows, rows.rollout_rewards(), p)
        codes = rows.rollout_codes
        drop = np.zeros(rows.n_rollouts, dtype=bool)
        dropped: dict[str, int] = {}
        for reason, flagged in r.drop.items():
            if flagged.any():
                drop |= flagged
                dropped[reason] = int(flagged[codes].sum())
        zero_var = r.zero_variance
        if p.zero_variance == "drop" and zero_var.any():
            drop |= zero_var
            dropped["zero_variance"] = int(zero_var[codes].sum())
        stats = dict(r.stats)
        stats["zero_variance_rollout_share"] = float(zero_var.mean()) if len(zero_var) else 0.0
        columns = {"advantage": r.advantage[codes].astype(np.float32)}
        columns.update({name: values[codes] for name, values in r.columns.items()})
        return OutcomePlan(
            columns=columns,
            kept=~drop[codes],
            dropped=dropped,
            stats=stats,
            advantage=r.advantage[codes],
        )

    def apply(
        self, plan: OutcomePlan, tokens: Tokens, row0: int, p: Params
    ) -> dict[str, np.ndarray]:
        """Each row's advantage on its action tokens, exactly 0 elsewhere."""
        per_row = plan.advantage[row0 : row0 + len(tokens.offsets) - 1].astype(np.float32)
        adv = np.repeat(per_row, lengths(tokens.offsets))
        adv[~tokens.mask] = 0.0
        return {"advantages": adv}


class GroupBaseline(OutcomeMethod):
    """A baseline from the rollout's group (the rollouts sharing its prompt id)."""

    roles = ("prompt_id", "reward")
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
            rewards, codes, len(rows.group_keys), ddof=p.std_ddof, tol=p.zero_variance_tol
        )
        single = stats.singleton[codes]
        if p.singleton == "error" and single.any():
            row = int(np.flatnonzero(single[rows.rollout_codes])[0])
            key = rows.group_keys[rows.group_codes[row]].as_py()
            problem = (
                f"prompt {key!r} has a single rollout; --singleton error (convention "
                f"{p.convention}) forbids singleton groups. Hint: pass --singleton zero, raw "
                "or drop"
            )
            raise RowError(row, ("prompt_id",), problem)
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
    parameters = (
        BASELINE,
        SCALE,
        STD_DDOF,
        EPS,
        EPS_PLACEMENT,
        SINGLETON,
        ZERO_VARIANCE,
        ZERO_VARIANCE_TOL,
        BATCH_SIZE,
    )

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        batch_std = None
        if p.scale == "batch":
            batch_id, _, n_batches = completion_batches(rows, p.batch_size)
            batch_std = G.batch_std(rewards, batch_id, n_batches, ddof=p.std_ddof)
        return G.grpo(
            rewards,
            codes,
            stats,
            eps=p.eps,
            eps_placement=p.eps_placement,
            baseline=p.baseline,
            scale=p.scale,
            batch_std=batch_std,
            singleton="raw" if p.singleton == "raw" else "zero",
        )


class Rloo(GroupBaseline):
    name = "rloo"
    summary = "R_i − mean of the other rollouts of the group = n/(n−1)·(R_i − mean_g)"
    parameters = (STD_DDOF, SINGLETON, ZERO_VARIANCE, ZERO_VARIANCE_TOL)

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        return G.rloo(rewards, codes, stats, singleton="raw" if p.singleton == "raw" else "zero")


class BatchMean(OutcomeMethod):
    name = "batch-mean"
    summary = (
        "R_i − mean of its batch: one-batch REINFORCE over completion-ordered batches of "
        "`--batch-size B`"
    )
    roles = ("reward",)
    parameters = (BATCH_SIZE, PARTIAL, ZERO_VARIANCE, ZERO_VARIANCE_TOL)
    outputs = (
        "advantages",
        "advantage",
        "batch_id",
        "batch_size",
        "batch_mean",
        "partial_batch",
        "zero_variance",
    )

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        batch_id, partial, n_batches = completion_batches(rows, p.batch_size)
        adv, stats = G.batch_mean(rewards, batch_id, n_batches, tol=p.zero_variance_tol)
        drop_partial = p.partial == "drop" and partial.any()
        if drop_partial:
            adv = np.where(partial, 0.0, adv)
        zero_var = stats.zero_variance[batch_id]
        return RolloutAdvantages(
            advantage=adv,
            columns={
                "batch_id": batch_id,
                "batch_size": stats.size[batch_id],
                "batch_mean": stats.mean[batch_id],
                "partial_batch": partial,
                "zero_variance": zero_var,
            },
            zero_variance=zero_var,
            drop={"partial_batch": partial} if drop_partial else {},
            stats={},
        )


METHODS = (Grpo(), Rloo(), BatchMean())
