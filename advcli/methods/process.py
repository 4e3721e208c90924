"""Process supervision (DeepSeekMath, section 4.1.3): GRPO over step rewards.

A row's steps come as two lists: ``step_rewards`` (a zero is a real reward) and ``step_ends``,
the index of the token that ends each step. Every step reward of every rollout of a group is
normalised together, r~ = (r - mean) / (std + eps), with the convention's ddof, eps and eps
placement; a token's advantage is the sum of the normalised rewards of the steps that end at or
after it:

    A_t = sum over steps s with end_s >= t of r~_s        (action tokens; 0 elsewhere)

A group whose step rewards are all equal (max - min <= tol) gets 0 and is flagged
zero-variance; a group of one rollout follows ``--singleton`` (``raw``: its step rewards as
they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from advcli.core import group as G
from advcli.core.ragged import lengths, row_of
from advcli.core.scan import reverse_discounted_scan
from advcli.errors import RowError
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import Method, Plan
from advcli.methods.group import (
    EPS,
    EPS_PLACEMENT,
    SINGLETON,
    STD_DDOF,
    ZERO_VARIANCE,
    ZERO_VARIANCE_TOL,
    refuse_singletons,
)

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens
    from advcli.params import Params


@dataclass(frozen=True, kw_only=True)
class ProcessPlan(Plan):
    normalized: np.ndarray  # per step, float64, in the layout of rows.steps
    ends: np.ndarray  # per step: the index of its last token in its row
    step_offsets: np.ndarray  # per row: where its steps start


class GrpoProcess(Method[ProcessPlan]):
    name = "grpo-process"
    summary = (
        "Σ of the group-normalised step rewards of the steps ending at or after the token "
        "(`step_rewards`, `step_ends`; DeepSeekMath process supervision)"
    )
    roles = ("input_ids", "prompt_id", "step_rewards", "step_ends")
    reads_steps = True
    shared = signals.WITHOUT_KL
    parameters = (STD_DDOF, EPS, EPS_PLACEMENT, SINGLETON, ZERO_VARIANCE, ZERO_VARIANCE_TOL)
    outputs = (
        "advantages",
        "group_size",
        "group_mean",
        "group_std",
        "zero_variance",
        "singleton",
    )

    def plan(self, rows: Rows, p: Params) -> ProcessPlan:
        assert rows.steps is not None and rows.group_keys is not None
        assert rows.group_codes is not None
        steps, n_groups = rows.steps, len(rows.group_keys)
        step_group = rows.group_codes[row_of(steps.offsets)]
        stats = G.group_stats(steps.rewards, step_group, n_groups, ddof=p.std_ddof, tol=0.0)
        size = np.bincount(rows.rollout_groups(), minlength=n_groups)
        single = size == 1
        refuse_singletons(rows, single[rows.rollout_groups()], p)
        spread = G.spread(steps.rewards, step_group, n_groups)
        zero_var = ~single & (spread <= p.zero_variance_tol)  # no steps at all: no signal
        std = stats.std[step_group]
        denominator = np.maximum(std, p.eps) if p.eps_placement == "max" else std + p.eps
        with np.errstate(invalid="ignore", divide="ignore"):
            normalized = (steps.rewards - stats.mean[step_group]) / denominator
        raw = p.singleton == "raw"
        normalized = np.where(single[step_group], steps.rewards if raw else 0.0, normalized)
        normalized = np.where(zero_var[step_group], 0.0, normalized)
        g = rows.group_codes
        drop = np.zeros(rows.n_rows, dtype=bool)
        dropped: dict[str, int] = {}
        for reason, flagged, on in (
            ("singleton", single[g], p.singleton == "drop"),
            ("zero_variance", zero_var[g], p.zero_variance == "drop"),
        ):
            if on and flagged.any():
                drop |= flagged
                dropped[reason] = int(flagged.sum())
        return ProcessPlan(
            columns={
                "group_size": size[g],
                "group_mean": stats.mean[g],
                "group_std": stats.std[g],
                "zero_variance": zero_var[g],
                "singleton": single[g],
            },
            kept=~drop,
            dropped=dropped,
            stats={
                "zero_variance_groups": int(zero_var.sum()),
                "singleton_groups": int(single.sum()),
                "zero_variance_rollout_share": float(zero_var[rows.rollout_groups()].mean())
                if rows.n_rollouts
                else 0.0,
            },
            normalized=normalized,
            ends=steps.ends,
            step_offsets=steps.offsets,
        )

    def apply(
        self, plan: ProcessPlan, tokens: Tokens, row0: int, p: Params
    ) -> dict[str, np.ndarray]:
        n = len(tokens.offsets) - 1
        offsets = plan.step_offsets[row0 : row0 + n + 1]
        lo, hi = int(offsets[0]), int(offsets[-1])
        step_rows = row_of(offsets - lo)
        ends = plan.ends[lo:hi]
        n_tokens = lengths(tokens.offsets)[step_rows]
        beyond = ends >= n_tokens
        if beyond.any():
            i = int(np.flatnonzero(beyond)[0])
            problem = (
                f"step end {ends[i]} is beyond the row's {n_tokens[i]} tokens. Hint: a step end "
                "is the index of the step's last token in the row, from 0"
            )
            raise RowError(row0 + int(step_rows[i]), ("step_ends",), problem)
        at = tokens.offsets[step_rows] + ends
        per_token = np.bincount(at, weights=plan.normalized[lo:hi], minlength=len(tokens.mask))
        adv = reverse_discounted_scan(per_token, 1.0, tokens.offsets)
        adv[~tokens.mask] = 0.0
        return {"advantages": adv.astype(np.float32)}


METHODS = (GrpoProcess(),)
