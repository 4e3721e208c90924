"""GDPO: several rewards, each normalised within its group, then summed and normalised over the
batch (arXiv 2601.05242). Two forms, as the frameworks compute them:

- ``--aggregation verl`` (the default but under ``--convention trl``; verl
  ``compute_gdpo_outcome_advantage``): every reward column k is z-scored in its group as verl's
  GRPO does, A_k = (R_k - mean_g) / (std_g + eps) (a singleton:
  mean 0, std 1 with ``--singleton raw``); then x = sum_k w_k A_k, whitened over the batch's
  action tokens as verl's ``masked_whiten``: (x - mean) / sqrt(var + 1e-8), mean and variance
  (``--whiten-ddof``, verl 1) token-weighted.
- ``--aggregation trl`` (TRL's ``multi_objective_aggregation="normalize_then_sum"``, the default
  under ``--convention trl``): per column a NaN-aware group z-score (a missing reward is NaN; a
  group of one gets 0), s = NaN-aware sum_k w_k z_k (NaN when every reward is missing), then a
  NaN-aware z-score over the batch, one value per rollout; NaN ends as 0.

A group where every reward column is zero-variance is flagged; as in both frameworks, its
advantage is what the batch normalisation makes of 0, not 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advcli.core import group as G
from advcli.core.conventions import WHITEN_EPS
from advcli.errors import RowError, UsageError
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import BATCH_SIZE, completion_batches
from advcli.methods.group import (
    EPS,
    EPS_PLACEMENT,
    PANEL,
    SINGLETON,
    STD_DDOF,
    ZERO_VARIANCE,
    ZERO_VARIANCE_TOL,
    OutcomeMethod,
    RolloutAdvantages,
    refuse_singletons,
)
from advcli.methods.temporal import WHITEN_DDOF
from advcli.params import Param, Params

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows


def _columns(value: Any) -> str:
    """``acc, fmt`` (or a list, from Python) as ``acc,fmt``."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return ",".join(name.strip() for name in map(str, items) if name.strip())


def columns(p: Params) -> tuple[str, ...]:
    """The reward columns of ``--reward-columns``."""
    return tuple(p.reward_columns.split(",")) if p.reward_columns else ()


def _weights(value: Any) -> str | None:
    return None if value is None else str(value)


REWARD_COLUMNS = Param(
    "reward_columns",
    str,
    None,
    "gdpo: the reward columns, comma-separated (acc,fmt).",
    PANEL,
    parse=_columns,
)
REWARD_WEIGHTS = Param(
    "reward_weights",
    str,
    None,
    "gdpo: their weights, acc=1,fmt=0.5 or 1,0.5 (default: all 1).",
    PANEL,
    parse=_weights,
)
AGGREGATION = Param(
    "aggregation",
    str,
    "auto",
    "gdpo: verl (whitened over the batch's tokens), trl (normalize_then_sum), or auto (trl "
    "under --convention trl, else verl).",
    PANEL,
    choices=("auto", "verl", "trl"),
)


def aggregation(p: Params) -> str:
    """verl or trl: ``--aggregation``, or the convention's."""
    if p.aggregation != "auto":
        return str(p.aggregation)
    return "trl" if p.convention == "trl" else "verl"


def weights(columns: tuple[str, ...], text: str | None) -> np.ndarray:
    """The weight of each reward column from ``--reward-weights`` (a ValueError if malformed)."""
    if text is None:
        return np.ones(len(columns))
    items = [item.strip() for item in text.split(",") if item.strip()]
    named = [item.partition("=") for item in items]
    try:
        if all(sep for _, sep, _ in named):
            given = {name.strip(): float(w) for name, _, w in named}
            unknown = sorted(set(given) - set(columns))
            if unknown:
                msg = f"`reward_weights` names '{unknown[0]}', not one of `reward_columns`"
                raise ValueError(msg)
            return np.array([given.get(name, 1.0) for name in columns])
        if len(items) != len(columns):
            raise ValueError(
                f"`reward_weights` has {len(items)} weights for {len(columns)} reward columns"
            )
        return np.array([float(w) for w in items])
    except ValueError as exc:
        if "reward" in str(exc):
            raise
        msg = f"`reward_weights={text!r}`: expected NAME=W,... or W,W,... with numbers"
        raise ValueError(msg) from None


class Gdpo(OutcomeMethod):
    name = "gdpo"
    summary = (
        "Σ_k w_k·(group z-score of reward column k), then normalised over the batch "
        "(`--reward-columns`, `--reward-weights`; verl `compute_gdpo_outcome_advantage`, or "
        "TRL's normalize_then_sum with `--convention trl`)"
    )
    roles = ("prompt_id",)
    also_needs = "the `--reward-columns`; input_ids with `--aggregation verl`"
    shared = signals.WITHOUT_KL
    parameters = (REWARD_COLUMNS, REWARD_WEIGHTS, AGGREGATION, STD_DDOF, EPS, EPS_PLACEMENT,
                  SINGLETON, WHITEN_DDOF, BATCH_SIZE, ZERO_VARIANCE, ZERO_VARIANCE_TOL)  # fmt: skip
    outputs = ("advantages", "advantage", "group_size", "gdpo_score", "zero_variance", "singleton")

    def named_columns(self, p: Params) -> tuple[str, ...]:
        names = columns(p)
        if not names:
            raise UsageError(
                "gdpo needs `reward_columns`: the log's reward columns, comma separated"
            )
        if len(set(names)) < len(names):
            raise UsageError(f"`reward_columns={p.reward_columns!r}`: a column is named twice")
        try:
            weights(names, p.reward_weights)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return names

    def row_sums(self, p: Params) -> tuple[str, ...]:
        return ("actions",) if aggregation(p) == "verl" else ()

    def reading_tokens(self, p: Params) -> str:
        if aggregation(p) == "verl":
            return "gdpo with `aggregation='verl'` (it whitens over the action tokens)"
        return super().reading_tokens(p)

    def rewards(self, rows: Rows, p: Params) -> np.ndarray:
        """Unused: GDPO reads its reward columns."""
        return np.zeros(rows.n_rollouts)

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        assert rows.group_keys is not None
        codes, n_groups = rows.rollout_groups(), len(rows.group_keys)
        last = rows.last_segment_row()
        w = weights(columns(p), p.reward_weights)
        batch_id, _, n_batches = completion_batches(rows, p.batch_size)
        size = np.bincount(codes, minlength=n_groups)
        single = (size == 1)[codes]
        refuse_singletons(rows, single, p)
        zero_var = size >= 2
        score = np.zeros(rows.n_rollouts)
        scored = np.zeros(rows.n_rollouts, dtype=bool)
        for name, weight in zip(columns(p), w, strict=True):
            r = rows.named[name][last]
            have = ~np.isnan(r)
            stats = G.group_stats(np.where(have, r, 0.0), codes, n_groups, ddof=p.std_ddof,
                                  tol=p.zero_variance_tol)  # fmt: skip
            if aggregation(p) == "verl":
                if not have.all():
                    row = int(last[np.flatnonzero(~have)[0]])
                    raise RowError(row, (), _missing(), column=name)
                z = G.grpo(r, codes, stats, eps=p.eps, eps_placement=p.eps_placement,
                           singleton="raw" if p.singleton == "raw" else "zero")  # fmt: skip
            else:
                z = G.nan_group_zscore(r, codes, n_groups, ddof=p.std_ddof, eps=p.eps)
                z = np.where(single & have, 0.0, z)
            zero_var &= G.spread(r, codes, n_groups) <= p.zero_variance_tol
            score += np.where(np.isnan(z), 0.0, weight * z)
            scored |= have
        if aggregation(p) == "verl":
            lengths = np.bincount(rows.rollout_codes, weights=rows.sums["actions"])
            adv = G.token_weighted_whiten(score, lengths, batch_id, n_batches,
                                          ddof=p.whiten_ddof, eps=WHITEN_EPS)  # fmt: skip
        else:
            score = np.where(scored, score, np.nan)
            adv = G.nan_group_zscore(score, batch_id, n_batches, ddof=p.std_ddof, eps=p.eps)
            adv = np.where(np.isnan(adv), 0.0, adv)
        if p.singleton == "zero":
            adv = np.where(single, 0.0, adv)
        return RolloutAdvantages(
            advantage=adv,
            columns={
                "group_size": size[codes],
                "gdpo_score": score,
                "zero_variance": zero_var[codes],
                "singleton": single,
            },
            zero_variance=zero_var[codes],
            drop={"singleton": single} if p.singleton == "drop" else {},
            stats={
                "zero_variance_groups": int(zero_var.sum()),
                "singleton_groups": int((size == 1).sum()),
            },
        )


def _missing() -> str:
    return (
        "no value (null or NaN), which `aggregation='verl'` needs. "
        "Hint: fill it, or use `aggregation='trl'` (a missing reward counts as none)"
    )


METHODS = (Gdpo(),)
