"""The parameters each framework's own implementation uses (docs/semantics.md, "Conventions").

A convention fixes defaults; every field can still be overridden by its own command-line flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from advcli.core.group import ZERO_VARIANCE_TOL

Baseline = Literal["group", "leave-one-out", "batch", "none"]
Scale = Literal["group", "batch", "none", "leave-one-out"]
EpsPlacement = Literal["add", "max"]
Singleton = Literal["zero", "raw", "error", "drop"]
Observations = Literal["skip", "step"]
Whiten = Literal["none", "batch"]
TiedStd = Literal["zero", "float32"]
KlOn = Literal["actions", "steps"]


@dataclass(frozen=True)
class Convention:
    """Defaults of one framework.

    ``baseline`` and ``scale`` say what GRPO subtracts and divides by (:mod:`advcli.core.group`).
    ``eps_placement`` is ``"add"`` for ``std + eps`` and ``"max"`` for ``max(std, eps)``.
    ``temporal_whiten`` is the whitening the framework applies to GAE/MC/TD advantages;
    ``whiten_ddof`` the ddof of that whitening (REINFORCE++ always whitens). ``zero_std``: a
    group whose std is at most this gets advantage 0, as a zero-variance group (0: off).
    ``tied_std``: the std of equal rewards, 0 (``"zero"``), or the rounding noise NeMo-RL's
    float32 moments left of it before its PR #4158 (``"float32"``,
    :func:`advcli.core.group.nemo_float32_stats`). ``zero_variance_tol``: a group whose
    rewards span at most this is zero-variance (advantage 0). ``kl_on``: the tokens a
    temporal method's KL penalty sits on: the actions, or every step (with ``observations``
    ``"step"``, the tool tokens between them too: miles). ``whiten_eps_placement``: whitening
    divides by ``sqrt(var + 1e-8)`` (``"add"``) or ``sqrt(max(var, 1e-8))`` (``"max"``).
    """

    name: str
    baseline: Baseline
    scale: Scale
    std_ddof: int
    eps: float
    eps_placement: EpsPlacement
    singleton: Singleton
    observations: Observations
    temporal_whiten: Whiten
    whiten_ddof: int
    zero_std: float = 0.0
    tied_std: TiedStd = "zero"
    zero_variance_tol: float = ZERO_VARIANCE_TOL
    kl_on: KlOn = "actions"
    whiten_eps_placement: EpsPlacement = "add"


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("advcli", "group", "group", 0, 1e-6, "add", "zero", "skip", "none", 1),
        Convention("verl", "group", "group", 1, 1e-6, "add", "raw", "skip", "batch", 1),
        Convention("trl", "group", "group", 1, 1e-4, "add", "zero", "skip", "none", 1),
        Convention("openrlhf", "group", "group", 1, 1e-9, "add", "error", "step", "batch", 0),
        Convention("torchrl", "group", "group", 1, 1e-6, "max", "error", "skip", "none", 1),
        # SkyRL 0.4.0 skyrl/train/utils/ppo_utils.py compute_grpo_outcome_advantage: verl's
        # (torch.std, ddof 1; + 1e-6; a group of one: mean 0, std 1)
        Convention("skyrl", "group", "group", 1, 1e-6, "add", "raw", "skip", "batch", 1),
        # nemo_rl/algorithms/utils.py calculate_baseline_and_std_per_prompt; grpo.py. Since
        # PR #4158 (Sept 2026) equal rewards are not divided by their std: that is exact
        # arithmetic's std of 0. Before it, NeMo-RL divided by its float32 rounding noise.
        # advantage_estimator.py ReinforcePlusPlusAdvantageEstimator whitens each step with
        # the population variance: (A - mean) * rsqrt(clamp(var, min=1e-8)).
        Convention(
            "nemo-rl",
            "leave-one-out",
            "leave-one-out",
            1,
            1e-6,
            "add",
            "zero",
            "skip",
            "none",
            0,
            zero_variance_tol=0.0,
            whiten_eps_placement="max",
        ),
        Convention(
            "nemo-rl-pre-4158",
            "leave-one-out",
            "leave-one-out",
            1,
            1e-6,
            "add",
            "zero",
            "skip",
            "none",
            0,
            tied_std="float32",
            zero_variance_tol=0.0,
            whiten_eps_placement="max",
        ),
        # src/prime_rl/orchestrator/algo/grpo.py: reward minus the group mean
        Convention("prime-rl", "group", "none", 0, 1e-6, "add", "zero", "skip", "none", 1),
        # tinker-cookbook 0.6.1 tinker_cookbook/rl/data_processing.py compute_advantages:
        # the total reward minus the group's mean
        Convention("tinker", "group", "none", 0, 1e-6, "add", "zero", "skip", "none", 1),
        # open-instruct@e6c3044 open_instruct/data_loader.py _data_preparation_loop: centered
        # R - mean (the default), or standard (R - mean) / (np.std + 1e-8) (--scale group);
        # only groups whose np.std is exactly 0 are dropped before it
        Convention(
            "open-instruct",
            "group",
            "none",
            0,
            1e-8,
            "add",
            "zero",
            "skip",
            "none",
            1,
            zero_variance_tol=0.0,
        ),
        # AReaL@4aef98d areal/api/cli_args.py NormConfig (std_unbiased since v0.3.4, eps 1e-5),
        # areal/utils/data.py Normalization, as the GRPO examples set reward_norm; one: 0
        Convention("areal", "group", "group", 1, 1e-5, "add", "zero", "skip", "none", 1),
        # slime@624b824 slime/utils/arguments.py (rewards and GRPO std normalisation on),
        # slime/ray/rollout.py: (r - mean) / (torch.std + 1e-6); one sample per prompt: 0.
        # utils/ppo_utils.py discounts over every response token, a tool's too (steps), and
        # distributed_masked_whiten whitens over the loss mask, ddof 1
        Convention("slime", "group", "group", 1, 1e-6, "add", "zero", "step", "none", 1),
        # miles@31f1ca9 miles/backends/training_utils/loss_hub/math_utils.py
        # get_reinforce_plus_plus_returns: slime's GRPO, but REINFORCE++'s token rewards are
        # -kl_coef * kl on every response token, tool tokens too, each a discounted step
        Convention(
            "miles", "group", "group", 1, 1e-6, "add", "zero", "step", "none", 1, kl_on="steps"
        ),
        # ROLL@8eb27cc roll/configs/base_config.py (adv_estimator grpo: group mean and std),
        # roll/utils/functionals.py: torch.std + 1e-6; std <= 1e-6 and groups of one get 0
        Convention("roll", "group", "group", 1, 1e-6, "add", "zero", "skip", "none", 1, 1e-6),
    )
}

ALIASES = {"seed": "advcli"}
"""Former names of conventions, still taken (``seed`` was advcli's own before it was renamed)."""

DEFAULT = "advcli"
"""The convention of a log read without ``--from`` and without ``--convention``."""


def canonical(name: str) -> str:
    """A convention's name, its alias resolved."""
    return ALIASES.get(name, name)


WHITEN_EPS = 1e-8
"""Whitening is ``(x - mean) / sqrt(var + WHITEN_EPS)``."""
