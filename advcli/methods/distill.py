"""On-policy distillation (NeMo-RL's OPD estimator, arXiv 2601.02780): on every action token

    A_t = log pi_teacher(a_t) - log pi(a_t)

from the per-token columns ``teacher_logprobs`` and the policy's log-probs: the trainer's
(``trainer_logprobs``, NeMo-RL's ``prev_logprobs``, which its OPD subtracts) where the log has
them, else the sampler's (``logprobs``); 0 on every other token. No group, reward or critic.
(slime's form, a term added to any method, is ``--opd-coef``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advcli.io.schema import POLICY_LOGPROBS
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import Method, Plan

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens
    from advcli.params import Params


class Opd(Method[Plan]):
    name = "opd"
    summary = "log π_teacher(a_t) − log π(a_t) per action token (NeMo-RL's OPD estimator)"
    roles = ("input_ids", POLICY_LOGPROBS, "teacher_logprobs")
    shared = signals.WITHOUT_KL
    outputs = ("advantages",)

    def token_roles(self, p: Params) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*signals.OPD_ROLES, *super().token_roles(p))))

    def plan(self, rows: Rows, p: Params) -> Plan:
        return Plan(columns={})

    def apply(self, plan: Plan, tokens: Tokens, row0: int, p: Params) -> dict[str, np.ndarray]:
        m = tokens.mask
        adv = np.zeros(len(m), dtype=np.float32)
        policy = tokens.extra[POLICY_LOGPROBS][m]
        gap = tokens.extra["teacher_logprobs"][m].astype(np.float64) - policy
        adv[m] = gap.astype(np.float32)
        return {"advantages": adv}


METHODS = (Opd(),)
