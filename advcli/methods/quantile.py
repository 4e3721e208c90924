"""The quantile baseline (``quantile``, QAE): each rollout's reward less a quantile of its
group's rewards, instead of their mean.

    A_i = R_i − Q_K(R_j : j in i's group)       (:func:`advcli.core.group.quantile_baseline`)

Q_K interpolates linearly between the sorted rewards (``numpy.quantile``'s default): with n
rewards, h = K·(n − 1), Q_K = R_(⌊h⌋) + (h − ⌊h⌋)·(R_(⌊h⌋+1) − R_(⌊h⌋)). No division: the
advantage is in reward units. Wu et al. (2025) show that with 0/1 rewards it gates by
difficulty: a prompt solved by at most 1 − K of its rollouts rewards its rare successes and
leaves its failures at 0; an easier one penalises its remaining failures. Only the paper
defines it (no framework ships it), so advcli's tests check hand-computed examples and a
float64 loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advcli.core import group as G
from advcli.methods.group import GROUP_RULES, PANEL, GroupBaseline, kept_singleton
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows
    from advcli.lazy_imports import np

QUANTILE = Param(
    "quantile",
    float,
    0.5,
    "quantile: K, the quantile of the group's rewards taken as the baseline (0.5, the "
    "default: the median; the paper tunes K per task).",
    PANEL,
    range=Range(0, 1),
)


class Quantile(GroupBaseline):
    """QAE: A_i = R_i − Q_K(R_group) (:func:`advcli.core.group.quantile_baseline`)."""

    name = "quantile"
    summary = (
        "R − Q_K(R_g), the K-quantile of the group's rewards, linearly interpolated "
        "(`--quantile`, default 0.5: the median; QAE, Wu et al. 2025)"
    )
    parameters = (QUANTILE, *GROUP_RULES)

    def from_group(
        self, rows: Rows, rewards: np.ndarray, codes: np.ndarray, stats: G.GroupStats, p: Params
    ) -> np.ndarray:
        return G.quantile_baseline(rewards, codes, stats, q=p.quantile, singleton=kept_singleton(p))


METHODS = (Quantile(),)
