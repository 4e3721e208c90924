"""Each prompt's history across a run, from flat per-rollout arrays.

A rollout i has a prompt p_i (a code 0..P−1), a step s_i and a reward r_i; it passes when
r_i ≥ θ (the success threshold). A cell (p, s) is the rollouts of prompt p at step s: its
rollouts n_ps, passes k_ps, pass rate k_ps / n_ps and mean reward. Per prompt p:

- ``rollouts`` n_p = Σ_s n_ps; ``steps_seen``: its cells; ``pass_rate`` k_p / n_p;
- ``mean_reward`` r̄_p and ``reward_variance`` (1/n_p) Σ_i (r_i − r̄_p)² (population, two
  passes);
- solved at s when k_ps > 0: ``first_solved_step`` and ``last_solved_step`` (NaN: never);
  ``forgotten`` when a step s' > ``first_solved_step`` has k_ps' = 0;
- ``zero_variance_steps``: cells of n_ps ≥ 2 whose rewards span max − min ≤ tol (no group
  signal, as :func:`advcli.core.group.group_stats` flags a group);
- ``trend``: the least-squares slope of the cell pass rate y_s against the step s over its
  cells, Σ (s − s̄)(y_s − ȳ) / Σ (s − s̄)² (pass rate per step; NaN with fewer than two
  steps).

Everything is a few sorts and ``bincount`` s: no loop over rollouts, cells or prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from advcli.lazy_imports import np


@dataclass(frozen=True)
class Cells:
    """The (prompt, step) cells, ordered by prompt then step."""

    prompt: np.ndarray  # int64 per cell
    step: np.ndarray  # float64 per cell
    rollouts: np.ndarray  # int64 per cell
    passes: np.ndarray  # int64 per cell
    mean_reward: np.ndarray  # float64 per cell
    zero_variance: np.ndarray  # bool per cell

    @property
    def pass_rate(self) -> np.ndarray:
        out: np.ndarray = self.passes / self.rollouts
        return out


@dataclass(frozen=True)
class PromptStats:
    """Per prompt (see the module's docstring), and its cells."""

    rollouts: np.ndarray  # int64
    passes: np.ndarray  # int64
    pass_rate: np.ndarray
    mean_reward: np.ndarray
    reward_variance: np.ndarray
    steps_seen: np.ndarray  # int64
    zero_variance_steps: np.ndarray  # int64
    first_solved_step: np.ndarray  # NaN: never solved
    last_solved_step: np.ndarray
    forgotten: np.ndarray  # bool
    always_solved: np.ndarray  # bool: solved at every step seen
    trend: np.ndarray  # NaN: fewer than two steps
    cells: Cells


def prompt_stats(
    prompt: np.ndarray,
    step: np.ndarray,
    reward: np.ndarray,
    success: float,
    n_prompts: int,
    tol: float = 0.0,
) -> PromptStats:
    """Per-prompt statistics of rollouts (``prompt``: int codes < ``n_prompts``; ``step``
    and ``reward``: float64), a rollout passing when its reward ≥ ``success``; a prompt
    without rollouts gets zeros and NaN."""
    n = n_prompts
    reward = np.asarray(reward, dtype=np.float64)
    steps, step_code = np.unique(step, return_inverse=True)
    cell_key = prompt.astype(np.int64) * max(len(steps), 1) + step_code
    order = np.lexsort((reward, cell_key))  # by cell, each cell's rewards ascending
    keys, starts, counts = np.unique(cell_key[order], return_index=True, return_counts=True)
    cell_prompt = keys // max(len(steps), 1)
    cell_step = steps[keys % max(len(steps), 1)] if len(keys) else np.zeros(0)
    sorted_reward = reward[order]
    spread = sorted_reward[starts + counts - 1] - sorted_reward[starts] if len(keys) else keys
    cell_of = np.empty(len(reward), dtype=np.int64)
    cell_of[order] = np.repeat(np.arange(len(keys)), counts)
    passed = reward >= success
    passes = np.bincount(cell_of, weights=passed, minlength=len(keys)).astype(np.int64)
    reward_sum = np.bincount(cell_of, weights=reward, minlength=len(keys))
    cells = Cells(cell_prompt, cell_step, counts.astype(np.int64), passes,
                  reward_sum / np.maximum(counts, 1), (counts >= 2) & (spread <= tol))  # fmt: skip

    rollouts = np.bincount(prompt, minlength=n).astype(np.int64)
    prompt_passes = np.bincount(prompt, weights=passed, minlength=n).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(prompt, weights=reward, minlength=n) / rollouts
        variance = np.bincount(prompt, weights=(reward - mean[prompt]) ** 2, minlength=n) / rollouts
    steps_seen = np.bincount(cell_prompt, minlength=n).astype(np.int64)
    solved = passes > 0
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, cell_prompt[solved], cell_step[solved])
    np.maximum.at(last, cell_prompt[solved], cell_step[solved])
    first[np.isinf(first)] = np.nan
    last[np.isinf(last)] = np.nan
    later_unsolved = ~solved & (cell_step > first[cell_prompt])  # NaN compares False
    return PromptStats(
        rollouts=rollouts,
        passes=prompt_passes,
        pass_rate=prompt_passes / np.maximum(rollouts, 1),
        mean_reward=mean,
        reward_variance=variance,
        steps_seen=steps_seen,
        zero_variance_steps=np.bincount(
            cell_prompt, weights=cells.zero_variance, minlength=n
        ).astype(np.int64),
        first_solved_step=first,
        last_solved_step=last,
        forgotten=np.bincount(cell_prompt, weights=later_unsolved, minlength=n) > 0,
        always_solved=(steps_seen > 0)
        & (np.bincount(cell_prompt, weights=solved, minlength=n) == steps_seen),
        trend=_slopes(cells, n),
        cells=cells,
    )


def _slopes(cells: Cells, n: int) -> np.ndarray:
    """Per prompt: the least-squares slope of its cells' pass rate against their step."""
    p, s, y = cells.prompt, cells.step, cells.pass_rate
    k = np.bincount(p, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        s_mean = np.bincount(p, weights=s, minlength=n) / k
        y_mean = np.bincount(p, weights=y, minlength=n) / k
        ds = s - s_mean[p]
        covariance = np.bincount(p, weights=ds * (y - y_mean[p]), minlength=n)
        spread = np.bincount(p, weights=ds * ds, minlength=n)
        out: np.ndarray = np.where((k >= 2) & (spread > 0), covariance / spread, np.nan)
    return out


def default_success(reward: np.ndarray) -> float | None:
    """The success threshold when the rewards take exactly two values: the higher; None
    otherwise (the caller asks for one)."""
    values = np.unique(reward)
    return float(values[1]) if len(values) == 2 else None


def selected(
    stats: PromptStats,
    *,
    band: tuple[float, float] | None = None,
    never_solved: bool = False,
    always_solved: bool = False,
    forgotten: bool = False,
    min_steps: int = 0,
) -> np.ndarray:
    """The prompts every filter given keeps (bool per prompt): pass rate within ``band``
    (inclusive), never solved, solved at every step seen, forgotten, seen at ``min_steps``
    steps or more."""
    keep = stats.rollouts > 0
    if band is not None:
        keep &= (stats.pass_rate >= band[0]) & (stats.pass_rate <= band[1])
    if never_solved:
        keep &= stats.passes == 0
    if always_solved:
        keep &= stats.always_solved
    if forgotten:
        keep &= stats.forgotten
    keep &= stats.steps_seen >= min_steps
    out: np.ndarray = keep
    return out


REWARD_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
"""The quantiles of each step's rewards the run view draws."""


def step_quantiles(
    step: np.ndarray, reward: np.ndarray, n_steps: int, q: tuple[float, ...]
) -> np.ndarray:
    """Per step s (a code 0..``n_steps``−1) and quantile q: with the step's n rewards
    ascending x_0 ≤ … ≤ x_{n−1} and h = q (n − 1), x_⌊h⌋ + (h − ⌊h⌋)(x_{⌊h⌋+1} − x_⌊h⌋)
    (numpy's default, linear); NaN for a step without rewards. Shape (steps, quantiles)."""
    reward = np.asarray(reward, dtype=np.float64)
    x = reward[np.lexsort((reward, step))]  # by step, each step's rewards ascending
    counts = np.bincount(step, minlength=n_steps)
    starts = np.cumsum(counts) - counts
    h = np.asarray(q, dtype=np.float64)[None, :] * np.maximum(counts - 1, 0)[:, None]
    below = np.floor(h).astype(np.int64)
    above = np.minimum(below + 1, np.maximum(counts - 1, 0)[:, None])
    if not len(x):
        return np.full(h.shape, np.nan)
    lo = x[np.minimum(starts[:, None] + below, len(x) - 1)]
    hi = x[np.minimum(starts[:, None] + above, len(x) - 1)]
    out: np.ndarray = np.where(counts[:, None] > 0, lo + (h - below) * (hi - lo), np.nan)
    return out


@dataclass(frozen=True)
class Moves:
    """Per prompt seen at two steps or more: its largest change between two consecutive steps
    it was seen at (the earliest of equal ones), as positions of its two cells."""

    prompt: np.ndarray  # int64
    before: np.ndarray  # int64: the cell of the earlier step
    after: np.ndarray  # int64: the cell of the later step
    change: np.ndarray  # float64: value[after] − value[before]


def largest_moves(cells: Cells, value: np.ndarray) -> Moves:
    """Each prompt's largest move of ``value`` (a figure per cell: its pass rate or mean
    reward) between consecutive cells of it, the prompts moving most first (ties: the lower
    prompt first)."""
    pair = np.flatnonzero(cells.prompt[1:] == cells.prompt[:-1])  # cells pair, pair + 1
    change = value[pair + 1] - value[pair]
    order = np.lexsort((pair, -np.abs(change), cells.prompt[pair]))
    prompts, first = np.unique(cells.prompt[pair][order], return_index=True)
    best = order[first]
    ranked = best[np.lexsort((prompts, -np.abs(change[best])))]
    return Moves(cells.prompt[pair[ranked]], pair[ranked], pair[ranked] + 1, change[ranked])
