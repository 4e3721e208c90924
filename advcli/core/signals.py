"""Per-token signals added to the rewards or the advantages: KL penalties and distillation.

- KL (verl ``kl_penalty``), with d = log pi(a_t) - log pi_ref(a_t):

  - ``k1``: d;  ``abs``: |d|;  ``k2``: d^2 / 2;
  - ``k3`` (verl's ``low_var_kl``): with c = clamp(-d, -20, 20), clamp(exp(c) - c - 1, -10, 10).

- On-policy distillation (NeMo-RL's OPD estimator): A_t = log pi_teacher(a_t) - log pi(a_t);
  slime's form on any estimator: A_t -= c (log pi(a_t) - log pi_teacher(a_t)).
- Entropy shaping (Cheng et al. 2025, "Reasoning with Exploration: An Entropy Perspective"):
  A_t + min(alpha H_t, |A_t| / kappa) (:func:`entropy_shaped`).
"""

from __future__ import annotations

from typing import Literal

from advcli.lazy_imports import np

KlEstimator = Literal["k1", "k2", "k3", "abs"]

K3_LOG_RATIO_CLAMP = 20.0  # verl clamps log(pi_ref / pi) to [-20, 20] before the exp
K3_CLAMP = 10.0  # and the estimate to [-10, 10]


def kl_penalty(
    logprobs: np.ndarray, ref_logprobs: np.ndarray, estimator: KlEstimator
) -> np.ndarray:
    """The per-token KL estimate of ``estimator`` (float64).

    >>> kl_penalty(np.array([-1.0]), np.array([-2.0]), "k3").round(6).tolist()
    [0.367879]
    """
    d = np.asarray(logprobs, dtype=np.float64) - np.asarray(ref_logprobs, dtype=np.float64)
    if estimator == "k1":
        return d
    if estimator == "abs":
        return np.abs(d)
    if estimator == "k2":
        return 0.5 * d * d
    c = np.clip(-d, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return np.clip(np.exp(c) - c - 1.0, -K3_CLAMP, K3_CLAMP)


def entropy_shaped(
    advantages: np.ndarray, entropies: np.ndarray, *, coef: float, kappa: float
) -> np.ndarray:
    """Advantages with the entropy bonus of Cheng et al. (2025), float64:

        A_t + min(alpha H_t, |A_t| / kappa)       (alpha = ``coef``, H_t the token's entropy)

    The clip keeps the bonus below |A_t| / kappa, so with kappa > 1 it never flips an
    advantage's sign, and a token of advantage 0 (a zero-variance group) stays 0. The paper
    computes H_t under the sampling policy and stops its gradient; here it is the logged value.

    >>> entropy_shaped(np.array([1.0, -1.0, 0.0, 0.2]), np.array([0.5, 2.0, 3.0, 1.0]),
    ...                coef=0.4, kappa=2.0).tolist()
    [1.2, -0.5, 0.0, 0.30000000000000004]
    """
    a = np.asarray(advantages, dtype=np.float64)
    bonus = np.minimum(coef * np.asarray(entropies, dtype=np.float64), np.abs(a) / kappa)
    out: np.ndarray = a + bonus
    return out
