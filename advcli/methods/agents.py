"""Baselines scoped by agent role, for multi-agent logs (prime-rl's ``hierarchical_grpo`` and
``rae``). Each rollout is one agent's trace (role ``agent``); its reward is its own.

- ``hierarchical-grpo`` (prime-rl ``orchestrator/algo/hierarchical_grpo.py``): a rollout's peers
  are the rollouts of the same agent in the same group, or, for the agents named by
  ``--episode-agents``, in the same episode (role ``episode``: the agents of one interaction):

      A_i = R_i − mean(R_j : j a peer of i, i included)       (no std; a lone peer gives 0)

  Rewards of a proposer in one group [0.6, 0.2] and of a solver in one episode [1, 0, 0]:
  the proposers get [0.2, −0.2], the solvers [2/3, −1/3, −1/3].
- ``rae`` (prime-rl ``orchestrator/algo/rae.py``, SPIRAL's role-aware estimator): a moving
  average of each agent's rewards, in arrival order (``completion_time``, else row order), the
  whole log one run:

      A_k = R_k − b_agent,   then   b_agent ← d·b_agent + (1 − d)·R_k      (b starts at 0)

  With d = 0.5 and one agent's rewards [1, 1, 0]: b = 0, 0.5, 0.75; A = [1, 0.5, −0.75].

Rollouts without a reward (role ``unscored``) are in no mean and move no baseline: prime-rl
skips the traces it cannot train on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from advcli.core import group as G
from advcli.core.scan import linear_scan
from advcli.errors import RowError, UsageError
from advcli.lazy_imports import np
from advcli.methods.group import (
    PANEL,
    ZERO_VARIANCE,
    ZERO_VARIANCE_TOL,
    OutcomeMethod,
    RolloutAdvantages,
)
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.io.rollouts import Rows

EPISODE_AGENTS = Param(
    "episode_agents",
    str,
    "",
    "hierarchical-grpo: the agents whose peers are the same agent's rollouts in the same "
    "episode (comma-separated names, the log's `agent` values; prime-rl's episode_agents); "
    "the others' peers are the same agent's rollouts in the same group.",
    PANEL,
)
BASELINE_DECAY = Param(
    "baseline_decay",
    float,
    0.95,
    "rae: d, the decay of each agent's moving-average baseline (prime-rl's decay).",
    PANEL,
    range=Range(0, 1, high_open=True),
)


def agent_codes(rows: Rows, role: str = "agent") -> np.ndarray:
    """Each rollout's code of ``role``; a rollout without one is an error."""
    codes = rows.rollout_labels(role)
    if (codes < 0).any():
        row = int(rows.last_segment_row()[np.flatnonzero(codes < 0)[0]])
        raise RowError(row, (role,), f"the {role} is missing (null)")
    return codes


class HierarchicalGrpo(OutcomeMethod):
    """A_i = R_i − mean of i's peers: the same agent in the same group, or episode for the
    ``--episode-agents`` (prime-rl ``hierarchical_grpo``)."""

    name = "hierarchical-grpo"
    summary = (
        "R − mean of the rollout's peers: the same `agent` in the same group, or in the same "
        "`episode` for `--episode-agents` (prime-rl `hierarchical_grpo`); a lone peer gets 0"
    )
    roles: ClassVar[tuple[str, ...]] = ("prompt_id", "reward", "agent")
    parameters = (EPISODE_AGENTS, ZERO_VARIANCE, ZERO_VARIANCE_TOL)
    outputs = ("advantages", "advantage", "group_size", "group_mean", "zero_variance", "singleton")

    def needs(self, p: Params) -> set[str]:
        return super().needs(p) | ({"episode"} if p.episode_agents else set())

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        assert rows.group_keys is not None
        agents = agent_codes(rows)
        scoped_names = {name.strip() for name in p.episode_agents.split(",") if name.strip()}
        scope = rows.rollout_groups()
        if scoped_names:
            episodes = agent_codes(rows, "episode")
            names = [str(name) for name in rows.label_keys["agent"].to_pylist()]
            unknown = sorted(scoped_names - set(names))
            if unknown:
                msg = (
                    f"`episode_agents`: no rollout of agent {', '.join(map(repr, unknown))} in "
                    f"the log. Hint: its agents are {', '.join(sorted(set(names)))}"
                )
                raise UsageError(msg)
            scoped = np.isin(agents, [i for i, name in enumerate(names) if name in scoped_names])
            scope = np.where(scoped, episodes + len(rows.group_keys), scope)
        _, peers = np.unique(np.c_[agents, scope], axis=0, return_inverse=True)
        peers = peers.ravel()
        n_peers = int(peers.max()) + 1 if len(peers) else 0
        stats = G.group_stats(rewards, peers, n_peers, ddof=0, tol=p.zero_variance_tol)
        adv = G.grpo(rewards, peers, stats, eps=0.0, scale="none")
        return RolloutAdvantages(
            advantage=adv,
            columns={
                "group_size": stats.size[peers],
                "group_mean": stats.mean[peers],
                "zero_variance": stats.zero_variance[peers],
                "singleton": stats.singleton[peers],
            },
            zero_variance=stats.zero_variance[peers],
            drop={},
            stats={
                "peer_groups": n_peers,
                "zero_variance_groups": int(stats.zero_variance.sum()),
                "singleton_groups": int(stats.singleton.sum()),
            },
        )


def moving_baselines(rewards: np.ndarray, agents: np.ndarray, decay: float) -> np.ndarray:
    """Each rollout's baseline before it: its agent's moving average of the earlier rewards,
    b ← d·b + (1 − d)·R from b = 0, the rollouts in the order given.

    >>> moving_baselines(np.array([1.0, 1.0, 5.0, 0.0]), np.array([0, 0, 1, 0]), 0.5).tolist()
    [0.0, 0.5, 0.0, 0.75]
    """
    order = np.lexsort((np.arange(len(agents)), agents))
    first = np.r_[True, agents[order][1:] != agents[order][:-1]] if len(order) else order
    # s_k = (1 − d)·R_k + d·s_{k−1} within an agent: the baseline after rollout k
    after = linear_scan((1.0 - decay) * rewards[order], np.where(first, 0.0, decay))
    before = np.where(first, 0.0, np.r_[0.0, after[:-1]])
    out = np.empty(len(agents))
    out[order] = before
    return out


class Rae(OutcomeMethod):
    """A_k = R_k − b_agent, each agent's moving-average baseline in arrival order (prime-rl
    ``rae``)."""

    name = "rae"
    summary = (
        "R − b_agent, then b_agent ← d·b_agent + (1 − d)·R: a moving-average baseline per "
        "`agent`, in arrival order (`--baseline-decay`, 0.95; prime-rl `rae`)"
    )
    roles: ClassVar[tuple[str, ...]] = ("reward", "agent")
    parameters = (BASELINE_DECAY,)
    outputs = ("advantages", "advantage", "baseline")

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        order, agents = rows.completion_order(), agent_codes(rows)
        baseline = np.empty(rows.n_rollouts)
        baseline[order] = moving_baselines(rewards[order], agents[order], p.baseline_decay)
        stats: dict[str, Any] = {"agents": len(np.unique(agents))}
        return RolloutAdvantages(
            advantage=rewards - baseline,
            columns={"baseline": baseline},
            zero_variance=np.zeros(rows.n_rollouts, dtype=bool),
            drop={},
            stats=stats,
        )


METHODS = (HierarchicalGrpo(), Rae())
