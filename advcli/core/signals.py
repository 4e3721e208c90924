"""Per-token signals added to the rewards or the advantages: KL penalties and distillation.

- KL (verl ``kl_penalty``), with d = log pi(a_t) - log pi_ref(a_t):

  - ``k1``: d;  ``abs``: |d|;  ``k2``: d^2 / 2;
  - ``k3`` (verl's ``low_var_kl``): with c = clamp(-d, -20, 20), clamp(exp(c) - c - 1, -10, 10).

- On-policy distillation (NeMo-RL's OPD estimator): A_t = log pi_teacher(a_t) - log pi(a_t);
  slime's form on any estimator: A_t -= c (log pi(a_t) - log pi_teacher(a_t)).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

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
