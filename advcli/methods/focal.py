"""F-GRPO (``focal-grpo``): GRPO's advantage scaled down on prompts the policy already solves,
by a focal weight on the group's success rate (verl's ``compute_f_grpo_outcome_advantage``,
the F-GRPO branch at 5b98636, RFC verl#5256):

    μ̂ = clamp((mean_g − R_wrong) / (R_correct − R_wrong), 0, 1)     (the group's success rate)
    A_i = (1 − μ̂)^γ · A_GRPO,i

The tests run the function from PR #5334's head (644e540), whose ``core_algos.py`` is the text
of 5b98636. A_GRPO is :mod:`advcli.methods.group`'s GRPO under the run's convention
(``--scale none`` is verl's ``norm_adv_by_std_in_grpo: false``). A singleton kept ``raw`` has
mean 0 (as verl sets it), which is also the mean its weight reads. With γ = 0 it is GRPO.

Rewards [1, 0, 0, 0] (verl: ddof 1, eps 1e-6): A_GRPO = [1.5, −0.5, −0.5, −0.5], μ̂ = 0.25,
weight 0.75, A = [1.125, −0.375, −0.375, −0.375].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from advcli.core import group as G
from advcli.errors import UsageError
from advcli.lazy_imports import np
from advcli.methods.group import PANEL, Grpo
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows

FOCAL_GAMMA = Param(
    "focal_gamma", float, 1.0,
    "focal-grpo: γ, the power of the focal weight (1 − μ̂)^γ (verl's f_grpo_gamma; 0: grpo).",
    PANEL, range=Range(0),
)  # fmt: skip
REWARD_CORRECT = Param(
    "reward_correct", float, 1.0,
    "focal-grpo: a right answer's reward, where the success rate is 1 (f_grpo_reward_correct).",
    PANEL,
)  # fmt: skip
REWARD_WRONG = Param(
    "reward_wrong", float, 0.0,
    "focal-grpo: a wrong answer's reward, where the success rate is 0 (f_grpo_reward_wrong).",
    PANEL,
)  # fmt: skip


class FocalGrpo(Grpo):
    """A_i = (1 − μ̂_g)^γ · A_GRPO,i (:func:`advcli.core.group.focal_weight`)."""

    name = "focal-grpo"
    summary = (
        "(1 − μ̂)^γ · grpo, μ̂ = clamp((mean_g − R_wrong)/(R_correct − R_wrong), 0, 1) the group's "
        "success rate (F-GRPO, verl `compute_f_grpo_outcome_advantage`)"
    )
    parameters: ClassVar[tuple[Param, ...]] = (
        *Grpo.parameters, FOCAL_GAMMA, REWARD_CORRECT, REWARD_WRONG,
    )  # fmt: skip

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        if p.reward_correct == p.reward_wrong:
            msg = (
                f"`reward_correct={p.reward_correct}` equals `reward_wrong`: focal-grpo's success "
                "rate divides by their difference"
            )
            raise UsageError(msg)
        if p.baseline != "group":
            raise UsageError(f"`baseline={p.baseline!r}`: focal-grpo weighs grpo's group baseline")
        mean = np.where(stats.singleton, 0.0, stats.mean)  # verl's singleton: mean 0
        weight = G.focal_weight(mean, gamma=p.focal_gamma, correct=p.reward_correct,
                                wrong=p.reward_wrong)  # fmt: skip
        adv: np.ndarray = weight[codes] * super().from_group(rows, rewards, codes, stats, p)
        return adv


METHODS = (FocalGrpo(),)
