"""Sides side by side: logs (``report A --compare B --compare C``) or trainer steps of one
(``--steps 10,200``, ``10,50,200`` or the span ``10:200``).

A side is a set of rollouts of a collected log (:class:`~advcli.reports.collect.Gathered`).
The page shows each side's overview (rollouts, groups, their kinds, the zero-variance share),
their reward and advantage distributions overlaid on the same bins (as shares of each side's
rollouts; an advantage is a rollout's mean over its action tokens), and the prompts every side
holds, matched by their text (a prompt text column), else their tokens (those before the first
action), else their prompt ids: per side the prompt's rollouts, mean reward, groups and
zero-variance groups, and the change in mean reward from the first side to the last, the
largest changes first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from advcli.core import group as G
from advcli.core.audit import (
    ALL_CORRECT,
    ALL_WRONG,
    KINDS,
    NEAR_TIE,
    SINGLETON,
    ZERO_VARIANCE_OTHER,
)
from advcli.errors import UsageError, file_list
from advcli.lazy_imports import np
from advcli.reports.collect import Gathered, prompt_labels
from advcli.reports.page import PALETTE
from advcli.reports.rollout_pass import histogram_of
from advcli.run.prompts import BASES, group_identity, prompt_text_column, row_steps

COMPARED_PROMPTS = 2_000  # the prompts both sides hold that the page lists: the largest changes
NO_SIGNAL = (ALL_CORRECT, ALL_WRONG, ZERO_VARIANCE_OTHER, SINGLETON)


@dataclass(frozen=True)
class Side:
    """The rollouts of a collected log that one side of the comparison holds."""

    label: str
    gathered: Gathered
    rollouts: np.ndarray  # bool per rollout of the log


MAX_SIDES = len(PALETTE)  # the page tells that many sides apart by colour
COUNTS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
          9: "nine", 10: "ten"}  # fmt: skip


def labels(given: str | None, default: list[str]) -> list[str]:
    """The sides' names: ``--label a,b,…``, one per side, else ``default``."""
    if given is None:
        return default
    names = [name.strip() for name in given.split(",")]
    n = len(default)
    if len(names) != n or not all(names):
        example = ",".join("abcdefghij"[:n])
        raise UsageError(
            f"`label={given!r}`: give {COUNTS.get(n, n)} names, one per side, as "
            f"`label={example!r}`"
        )
    return names


def log_sides(gathered: list[Gathered], given_labels: str | None) -> list[Side]:
    """Every rollout of each log (this one, then ``--compare``'s), named by ``--label`` or
    the logs' files: the file's name, or a folder's (the files' common folder) where several;
    names that repeat are told apart as "a: …", "b: …"."""
    default = [_name(g.found.files) for g in gathered]
    if len(set(default)) < len(default):
        default = [f"{chr(ord('a') + i)}: {name}" for i, name in enumerate(default)]
    names = labels(given_labels, default)
    return [Side(name, g, np.ones(g.found.rows.n_rollouts, dtype=bool))
            for name, g in zip(names, gathered, strict=True)]  # fmt: skip


def _name(files: list[str]) -> str:
    if len(files) == 1:
        return os.path.basename(files[0]) or files[0]
    common = os.path.commonpath(files) if files else ""
    return (os.path.basename(common) or common or "log") + f"/ ({len(files)} files)"


STEPS_EXAMPLE = (
    "as `steps='10,200'`, `steps='10,50,200'` or `steps='10:200'` (every step from 10 to 200)"
)


def check_options(compare: list[str] | None, steps: str | None, given_labels: str | None) -> None:
    """The comparison's options, checked before anything is read."""
    sides = None
    if compare is not None:
        sides = 1 + len(compare)
        if sides > MAX_SIDES:
            raise UsageError(f"`compare`: at most {MAX_SIDES - 1} other logs (one page tells "
                             f"{MAX_SIDES} sides apart)")  # fmt: skip
    if steps is not None:
        if compare is not None:
            raise UsageError("give `compare` (other logs) or `steps` (steps of one), not both")
        wanted = step_list(steps)
        sides = None if isinstance(wanted, Span) else len(wanted)
    if given_labels is not None:
        if compare is None and steps is None:
            raise UsageError("`label` names the sides of `compare` or `steps`: give one of them")
        if sides is not None:
            labels(given_labels, [""] * sides)


@dataclass(frozen=True)
class Span:
    """``--steps A:B``: every step of the log from ``first`` to ``last``, both included."""

    first: float
    last: float


def step_list(steps: str) -> list[float] | Span:
    """``--steps 10,200`` or ``10,50,200`` as the steps, or ``10:200`` as a :class:`Span`."""
    span = ":" in steps
    try:
        wanted = [float(x) for x in steps.split(":" if span else ",")]
    except ValueError:
        wanted = []
    if not all(np.isfinite(wanted)) or (span and (len(wanted) != 2 or wanted[0] >= wanted[1])):
        wanted = []
    if span and wanted:
        return Span(wanted[0], wanted[1])
    if len(wanted) < 2 or len(set(wanted)) < len(wanted):
        raise UsageError(f"`steps={steps!r}`: give two or more different trainer steps, "
                         f"{STEPS_EXAMPLE}")  # fmt: skip
    if len(wanted) > MAX_SIDES:
        raise UsageError(f"`steps={steps!r}`: at most {MAX_SIDES} steps (one page tells "
                         f"{MAX_SIDES} sides apart)")  # fmt: skip
    return wanted


def step_sides(gathered: Gathered, steps: str, given_labels: str | None) -> list[Side]:
    """The rollouts of some trainer steps of one log (``--steps``), each a side."""
    wanted = step_list(steps)
    step_of_row = row_steps(gathered.log)
    files = file_list(gathered.found.files)
    if step_of_row is None:
        raise UsageError(
            f"{files}: `steps` needs a 'step' column of numbers (the `from_` presets write each "
            "dump file's step). Hint: compare two logs with `compare`"
        )
    step = step_of_row[gathered.found.rows.last_segment_row()]
    known = np.unique(step[~np.isnan(step)])
    shown = ", ".join(_number(s) for s in known[:10]) + (" …" if len(known) > 10 else "")
    if isinstance(wanted, Span):
        span = wanted
        wanted = known[(known >= span.first) & (known <= span.last)].tolist()
        if not 2 <= len(wanted) <= MAX_SIDES:
            raise UsageError(
                f"`steps={steps!r}`: the log has {len(wanted)} step{'s' * (len(wanted) != 1)} "
                f"from {_number(span.first)} to {_number(span.last)}; give a span that holds "
                f"2 to {MAX_SIDES}. Its steps: {shown or 'none'}"
            )
    for x in wanted:
        if not (step == x).any():
            raise UsageError(
                f"`steps={steps!r}`: the log has no rollout at step {_number(x)}. "
                f"Its steps: {shown or 'none'}"
            )
    names = labels(given_labels, [f"step {_number(x)}" for x in wanted])
    return [Side(name, gathered, step == x) for name, x in zip(names, wanted, strict=True)]


def comparison(sides: list[Side], bins: int, batch_rows: int) -> dict[str, Any]:
    """What the page's Compare section shows (see the module's docstring)."""
    rewards = [s.gathered.found.rows.rollout_rewards()[s.rollouts] for s in sides]
    advantages = [
        None if (x := s.gathered.rollout_advantages) is None else x[s.rollouts] for s in sides
    ]
    basis = next(name for name in BASES if all(name in _bases(s.gathered) for s in sides))
    prompts = [_prompts(s, basis, batch_rows) for s in sides]
    return {
        "labels": [s.label for s in sides],
        "matched_by": BASES[basis],
        "overview": [_overview(s) for s in sides],
        "kinds": list(KINDS),
        "distributions": {
            "rewards": _overlaid(rewards, bins),
            "advantages": None
            if any(x is None for x in advantages)
            else _overlaid([x for x in advantages if x is not None], bins),
        },
        "prompts": _common(prompts, sides[0], batch_rows),
    }


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _bases(g: Gathered) -> set[str]:
    out = {"id"}
    if prompt_text_column(g.log) is not None:
        out.add("text")
    if g.prompt_hashes is not None:
        out.add("tokens")
    return out


def _overview(side: Side) -> dict[str, Any]:
    g = side.gathered
    rows, stats = g.found.rows, g.found.stats
    codes = rows.rollout_groups()[side.rollouts]
    groups = np.unique(codes)
    kinds = g.kinds[groups]
    rewards = rows.rollout_rewards()[side.rollouts]
    n = len(codes)
    zero_variance = stats.zero_variance[codes]
    no_signal = np.isin(g.kinds[codes], NO_SIGNAL)
    adv = g.rollout_advantages
    spread = None
    if adv is not None:
        width = G.spread(adv[side.rollouts], codes, len(stats.size))[groups]
        spread = float(width[np.isfinite(width)].mean()) if np.isfinite(width).any() else None
    return {
        "rollouts": n,
        "groups": len(groups),
        "mean_reward": float(rewards.mean()) if n else None,
        "zero_variance_groups": int(stats.zero_variance[groups].sum()),
        "near_tie_groups": int((kinds == NEAR_TIE).sum()),
        "zero_variance_rollout_share": float(zero_variance.mean()) if n else 0.0,
        "no_signal_rollout_share": float(no_signal.mean()) if n else 0.0,
        "mean_advantage_spread": spread,
        "kinds": np.bincount(kinds, minlength=len(KINDS)).tolist(),
    }


def _overlaid(values: list[np.ndarray], bins: int) -> dict[str, Any] | None:
    """Each side's histogram over the same bins (NaN left out)."""
    finite = [x[~np.isnan(x)] for x in values]
    if not all(len(x) for x in finite):
        return None
    lo = min(float(x.min()) for x in finite)
    hi = max(float(x.max()) for x in finite)
    hists = [histogram_of(iter([x]), lo, hi, bins) for x in finite]
    return {"edges": hists[0]["edges"], "counts": [h["counts"] for h in hists]}


@dataclass(frozen=True)
class _Prompts:
    """One side's rollouts gathered per prompt."""

    keys: np.ndarray  # uint64 per prompt, sorted
    rollouts: np.ndarray
    mean_reward: np.ndarray
    groups: np.ndarray
    zero_variance: np.ndarray  # its zero-variance groups
    spread: np.ndarray  # the mean advantage spread of its groups (NaN: none)
    group: np.ndarray  # a group of it (its first), for its text


def _prompts(side: Side, basis: str, batch_rows: int) -> _Prompts:
    g = side.gathered
    rows, stats = g.found.rows, g.found.stats
    identity = _identity(g, basis, batch_rows)
    codes = rows.rollout_groups()[side.rollouts]
    keys, at = np.unique(identity[codes], return_inverse=True)
    n = np.bincount(at, minlength=len(keys))
    reward = np.bincount(at, weights=rows.rollout_rewards()[side.rollouts], minlength=len(keys))
    groups = np.unique(codes)
    group_at = np.searchsorted(keys, identity[groups])
    width = np.full(len(groups), np.nan)
    if g.rollout_advantages is not None:
        full = G.spread(g.rollout_advantages[side.rollouts], codes, len(stats.size))[groups]
        width = np.where(np.isfinite(full), full, np.nan)
    have = ~np.isnan(width)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.bincount(group_at[have], weights=width[have], minlength=len(keys)) / (
            np.bincount(group_at[have], minlength=len(keys)))  # fmt: skip
    first = np.full(len(keys), -1, dtype=np.int64)
    first[group_at[::-1]] = groups[::-1]
    return _Prompts(
        keys=keys,
        rollouts=n,
        mean_reward=reward / np.maximum(n, 1),
        groups=np.bincount(group_at, minlength=len(keys)),
        zero_variance=np.bincount(
            group_at, weights=stats.zero_variance[groups], minlength=len(keys)
        ).astype(np.int64),
        spread=spread,
        group=first,
    )


def _identity(g: Gathered, basis: str, batch_rows: int) -> np.ndarray:
    """Per group: the 64-bit identity of its prompt (its first row's), by ``basis``."""
    return group_identity(g.log, g.found.rows, basis, batch_rows, g.prompt_hashes)


def _common(prompts: list[_Prompts], first: Side, batch_rows: int) -> dict[str, Any]:
    """The prompts every side holds, the largest changes in mean reward from the first side
    to the last first."""
    keys = prompts[0].keys
    for p in prompts[1:]:
        keys = np.intersect1d(keys, p.keys, assume_unique=True)
    at = [np.searchsorted(p.keys, keys) for p in prompts]  # keys sorted: each side's position
    change = prompts[-1].mean_reward[at[-1]] - prompts[0].mean_reward[at[0]]
    order = np.lexsort((keys, -np.abs(change)))[:COMPARED_PROMPTS]
    at = [x[order] for x in at]
    groups = prompts[0].group[at[0]]

    def side(p: _Prompts, where: np.ndarray) -> dict[str, Any]:
        spread = p.spread[where]
        return {
            "rollouts": p.rollouts[where].tolist(),
            "mean_reward": p.mean_reward[where].tolist(),
            "groups": p.groups[where].tolist(),
            "zero_variance": p.zero_variance[where].tolist(),
            "spread": [None if np.isnan(x) else float(x) for x in spread],
        }

    log, found = first.gathered.log, first.gathered.found
    return {
        "total": len(keys),
        "listed": len(order),
        "prompt": prompt_labels(log, found, groups, batch_rows),
        "change": change[order].tolist(),
        "sides": [side(p, where) for p, where in zip(prompts, at, strict=True)],
    }
