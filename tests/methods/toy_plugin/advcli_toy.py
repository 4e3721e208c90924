"""A new estimator in one file, as a third party would add one: the entry point in this folder's
``pyproject.toml`` makes it a method of every command once the package is installed.
(Not installed by the test suite itself: ``test_registry`` installs it in a folder of its own.)

``scaled-mean``: A_i = toy_factor * (R_i - mean_g), a made-up baseline with a new parameter.
"""

from __future__ import annotations

import numpy as np

from advcli.core import group as G
from advcli.io.rollouts import Rows
from advcli.methods.group import ZERO_VARIANCE, OutcomeMethod, RolloutAdvantages
from advcli.params import Param, Params

TOY_FACTOR = Param("toy_factor", float, 1.0, "Scaled-mean: the factor.", "Toy estimators")


class ScaledMean(OutcomeMethod):
    name = "scaled-mean"
    summary = "toy_factor · (R − mean_g)"
    roles = ("prompt_id", "reward")
    parameters = (TOY_FACTOR, ZERO_VARIANCE)

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        assert rows.group_keys is not None
        codes = rows.rollout_groups()
        stats = G.group_stats(rewards, codes, len(rows.group_keys), ddof=0, tol=0.0)
        return RolloutAdvantages(
            advantage=p.toy_factor * (rewards - stats.mean[codes]),
            columns={"group_mean": stats.mean[codes]},
            zero_variance=stats.zero_variance[codes],
            drop={},
            stats={},
        )
