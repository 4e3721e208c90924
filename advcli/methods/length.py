"""GRPO with prime-rl's length penalty (``grpo-length``): shorter right answers gain on longer
ones. The shaping is :func:`advcli.core.group.length_penalized`; the costs are the log's
``num_output_tokens``, ``num_input_tokens`` and ``num_turns`` columns (``--from prime-rl``
writes them from each trace), weighted as prime-rl's ``[orchestrator.algo.length_penalty]``
``type = "linear"`` weighs them (its defaults: 0.25, 0.1, 0.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advcli.core import group as G
from advcli.errors import RowError
from advcli.lazy_imports import np
from advcli.methods.group import PANEL, Grpo
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows


def _weight(flag: str) -> Param:
    return Param(
        f"{flag}_weight",
        float,
        {"output_tokens": 0.25, "input_tokens": 0.1, "turns": 0.1}[flag],
        f"grpo-length: the weight of the rollout's {flag.replace('_', ' ')} over the group's "
        f"most (prime-rl's num_{flag}_weight; 0: not read).",
        PANEL,
        range=Range(0),
    )


WEIGHTS = {
    "num_output_tokens": _weight("output_tokens"),
    "num_input_tokens": _weight("input_tokens"),
    "num_turns": _weight("turns"),
}
"""Each cost column, and the parameter that weighs it."""


class GrpoLength(Grpo):
    """GRPO on S = R − mean_g(R) · P, P the rollout's weighted costs relative to its group's
    most (:func:`advcli.core.group.length_penalized`)."""

    name = "grpo-length"
    summary = (
        "grpo on R − mean_g(R)·Σ_k w_k·c_k / max_g c_k, c = output tokens, input tokens, turns "
        "(prime-rl's linear length penalty; `--output-tokens-weight` ...)"
    )
    also_needs = "the columns num_output_tokens, num_input_tokens, num_turns of the weights not 0"
    parameters = (*Grpo.parameters, *WEIGHTS.values())

    def named_columns(self, p: Params) -> tuple[str, ...]:
        return tuple(name for name, param in WEIGHTS.items() if getattr(p, param.name))

    def rewards(self, rows: Rows, p: Params) -> np.ndarray:
        assert rows.group_keys is not None
        last = rows.last_segment_row()
        costs = []
        for name in self.named_columns(p):
            values = rows.named[name][last]
            if np.isnan(values).any() or (values < 0).any():
                row = int(last[np.flatnonzero(np.isnan(values) | (values < 0))[0]])
                raise RowError(row, (), "expected a count >= 0 (grpo-length's cost)", column=name)
            costs.append((values, float(getattr(p, WEIGHTS[name].name))))
        codes, n_groups = rows.rollout_groups(), len(rows.group_keys)
        return G.length_penalized(super().rewards(rows, p), codes, n_groups, costs)


METHODS = (GrpoLength(),)
