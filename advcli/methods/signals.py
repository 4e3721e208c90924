"""Signals every method can take besides its own: a KL penalty in the reward (``--kl-coef``),
an on-policy distillation term in the advantage (``--opd-coef``) and an entropy bonus
(``--entropy-coef``).

- ``--kl-coef beta --kl-estimator k1|k2|k3|abs`` (verl ``apply_kl_penalty``): temporal methods
  subtract beta * kl_t from each action token's reward; outcome methods subtract
  beta * sum_t kl_t from the rollout's reward (TRL's RLOO). Both before any group statistics
  and before the zero-variance test; only action tokens count.
- ``--opd-coef c`` (slime): after the method, A_t -= c * (log pi(a_t) - log pi_teacher(a_t)) on
  every action token.
- ``--entropy-coef alpha --entropy-kappa kappa`` (Cheng et al. 2025): after the method and
  before the distillation term, A_t += min(alpha * H_t, |A_t| / kappa) on every action token,
  H_t the log's per-token ``entropies``.
- ``--advantage-clip-low lo --advantage-clip-high hi`` (NeMo-RL's ``_clip_grpo_advantages``):
  last, every advantage clamped to [lo, hi] (the per-row ``advantage`` too).

The formulas are in :mod:`advcli.core.signals`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

from advcli.core.ragged import row_of
from advcli.core.signals import KlEstimator, entropy_shaped, kl_penalty
from advcli.errors import RowError
from advcli.io.schema import POLICY_LOGPROBS
from advcli.lazy_imports import np
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens

PANEL = "KL and distillation"


KL_COEF = Param(
    "kl_coef",
    float,
    0.0,
    "beta: subtract beta * KL(policy || ref_logprobs) from the rewards (0: off); the policy's "
    "log-probs are trainer_logprobs where the log has them, else logprobs.",
    PANEL,
)
KL_ESTIMATOR = Param(
    "kl_estimator",
    str,
    "k1",
    "The per-token KL: k1 (log-ratio), k2 (squared / 2), k3 (verl's low_var_kl) or abs.",
    PANEL,
    choices=get_args(KlEstimator),
)
OPD_COEF = Param(
    "opd_coef",
    float,
    0.0,
    "c: A_t -= c * (policy - teacher_logprobs) on action tokens, after any method (slime); the "
    "policy's log-probs as for the KL penalty.",
    PANEL,
)

ENTROPY_COEF = Param(
    "entropy_coef",
    float,
    0.0,
    "alpha: A_t += min(alpha * entropies_t, |A_t| / kappa) on action tokens, after any "
    "method (Cheng et al. 2025's entropy-shaped advantage; 0: off).",
    PANEL,
    range=Range(0),
)
ENTROPY_KAPPA = Param(
    "entropy_kappa",
    float,
    2.0,
    "kappa: the entropy bonus is at most |A_t| / kappa (the paper's 2; > 1 keeps every "
    "advantage's sign).",
    PANEL,
    range=Range(0, low_open=True),
)


def _ordered(_: Any, values: Any) -> str | None:
    low, high = values.get("advantage_clip_low"), values.get("advantage_clip_high")
    if low is not None and high is not None and low > high:
        return f"`advantage_clip_low={low}` is above `advantage_clip_high={high}`"
    return None


CLIP_LOW = Param(
    "advantage_clip_low",
    float,
    None,
    "Clamp every advantage to at least this, last (NeMo-RL's grpo.advantage_clip_low).",
    PANEL,
    check=_ordered,
)
CLIP_HIGH = Param(
    "advantage_clip_high",
    float,
    None,
    "Clamp every advantage to at most this, last (NeMo-RL's grpo.advantage_clip_high).",
    PANEL,
    check=_ordered,
)

PARAMETERS = (KL_COEF, KL_ESTIMATOR, OPD_COEF, ENTROPY_COEF, ENTROPY_KAPPA, CLIP_LOW, CLIP_HIGH)
"""The modifiers every method accepts unless it declares fewer (``Method.shared``)."""
WITHOUT_KL = (OPD_COEF, ENTROPY_COEF, ENTROPY_KAPPA, CLIP_LOW, CLIP_HIGH)
"""What a method that puts no reward on the tokens accepts (gdpo, grpo-process, opd)."""
# The policy's log-probs: the trainer's stream where the log has it, else the sampler's
KL_ROLES = (POLICY_LOGPROBS, "ref_logprobs")
OPD_ROLES = (POLICY_LOGPROBS, "teacher_logprobs")
ENTROPY_ROLES = ("entropies",)


def kl_coef(p: Params) -> float:
    """``--kl-coef`` of a run; 0 for a method that takes none."""
    return float(p.kl_coef) if "kl_coef" in p else 0.0


def token_roles(p: Params) -> tuple[str, ...]:
    """The per-token columns the signals of a run read."""
    roles = (
        *(KL_ROLES if kl_coef(p) else ()),
        *(OPD_ROLES if p.opd_coef else ()),
        *(ENTROPY_ROLES if p.entropy_coef else ()),
    )
    return tuple(dict.fromkeys(roles))


def token_kl(
    tokens: Tokens, p: Params, *, on: np.ndarray | None = None, row0: int = 0
) -> np.ndarray:
    """kl_t per token (float64): the estimate on action tokens (or at the positions ``on``,
    which must have finite log-probabilities: the batch starts at row ``row0``), 0 elsewhere."""
    kl = np.zeros(len(tokens.mask))
    m = tokens.mask if on is None else on
    logprobs, ref = tokens.extra[POLICY_LOGPROBS][m], tokens.extra["ref_logprobs"][m]
    if on is not None and not (np.isfinite(logprobs).all() and np.isfinite(ref).all()):
        bad = np.flatnonzero(~(np.isfinite(logprobs) & np.isfinite(ref)))[0]
        row = row0 + int(np.searchsorted(tokens.offsets, on[bad], side="right")) - 1
        problem = ("a log-probability between actions is not a finite number, and "
                   "`kl_on='steps'` puts the KL there. Hint: `kl_on='actions'`")  # fmt: skip
        raise RowError(row, KL_ROLES, problem)
    kl[m] = kl_penalty(logprobs, ref, p.kl_estimator)
    return kl


def row_kl(tokens: Tokens, p: Params) -> np.ndarray:
    """sum_t kl_t over each row's action tokens."""
    n_rows = len(tokens.offsets) - 1
    return np.bincount(row_of(tokens.offsets), weights=token_kl(tokens, p), minlength=n_rows)


def rollout_kl(rows: Rows) -> np.ndarray:
    """sum_t kl_t over each rollout's action tokens (all its segments)."""
    return np.bincount(rows.rollout_codes, weights=rows.sums["kl"], minlength=rows.n_rollouts)


def kl_stats(rows: Rows, p: Params) -> dict[str, Any]:
    """What the summary says about the KL penalty (nothing when it is off)."""
    if not kl_coef(p):
        return {}
    actions = rows.sums["actions"].sum()
    total = float(rows.sums["kl"].sum())
    return {
        "kl": {
            "coef": p.kl_coef,
            "estimator": p.kl_estimator,
            "mean_per_token": total / actions if actions else 0.0,
            "mean_per_rollout": total / rows.n_rollouts if rows.n_rollouts else 0.0,
        }
    }


def entropy_bonus(advantages: np.ndarray, tokens: Tokens, p: Params) -> np.ndarray:
    """The advantages with the entropy bonus of ``--entropy-coef``, float32 (as given without
    one): :func:`advcli.core.signals.entropy_shaped` on action tokens."""
    if not p.entropy_coef:
        return advantages
    m = tokens.mask
    out: np.ndarray = advantages.copy()
    shaped = entropy_shaped(advantages[m], tokens.extra["entropies"][m],
                            coef=p.entropy_coef, kappa=p.entropy_kappa)  # fmt: skip
    out[m] = shaped.astype(np.float32)
    return out


def distill(advantages: np.ndarray, tokens: Tokens, p: Params) -> np.ndarray:
    """The advantages with slime's distillation term, float32 (as given without one)."""
    if not p.opd_coef:
        return advantages
    m = tokens.mask
    policy = tokens.extra[POLICY_LOGPROBS][m].astype(np.float64)
    gap = policy - tokens.extra["teacher_logprobs"][m]
    out: np.ndarray = advantages.copy()
    out[m] = (advantages[m].astype(np.float64) - p.opd_coef * gap).astype(np.float32)
    return out


def clamped(advantages: np.ndarray, p: Params, mask: np.ndarray | None = None) -> np.ndarray:
    """The advantages clamped to ``--advantage-clip-low`` and ``--advantage-clip-high`` (on
    the action tokens ``mask`` where given: 0 elsewhere stays 0), as given without either."""
    low, high = p.advantage_clip_low, p.advantage_clip_high
    if low is None and high is None:
        return advantages
    out: np.ndarray = np.clip(advantages, low, high).astype(advantages.dtype)
    return out if mask is None else np.where(mask, out, advantages)
