"""Two sides side by side: two logs (``report A --compare B``) or two trainer steps of one
(``--steps 10,200``).

A side is a set of rollouts of a collected log (:class:`~advcli.reports.collect.Gathered`).
The page shows each side's overview (rollouts, groups, their kinds, the zero-variance share),
their reward and advantage distributions overlaid on the same bins (as shares of each side's
rollouts; an advantage is a rollout's mean over its action tokens), and the prompts both sides
hold, matched by their text (a prompt text column), else their tokens (those before the first
action), else their prompt ids: per side the prompt's rollouts, mean reward, groups and
zero-variance groups, and the change in mean reward, the largest changes first.
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
from advcli.lazy_imports import np, pa
from advcli.reports.collect import PROMPT_CHARS, Gathered, group_texts
from advcli.reports.rollout_pass import histogram_of, shortened
from advcli.run.prompts import BASES, group_identity, prompt_text_column, row_steps

COMPARED_PROMPTS = 2_000  # the prompts both sides hold that the page lists: the largest changes
NO_SIGNAL = (ALL_CORRECT, ALL_WRONG, ZERO_VARIANCE_OTHER, SINGLETON)


@dataclass(frozen=True)
class Side:
    """The rollouts of a collected log that one side of the comparison holds."""

    label: str
    gathered: Gathered
    rollouts: np.ndarray  # bool per rollout of the log


def labels(given: str | None, default: tuple[str, str]) -> tuple[str, str]:
    """The two sides' names: ``--label a,b``, else ``default``."""
    if given is None:
        return default
    names = [name.strip() for name in given.split(",")]
    if len(names) != 2 or not all(names):
        raise UsageError(f"`label={given!r}`: give two names, one per side, as `label='a,b'`")
    return names[0], names[1]


def log_sides(ours: Gathered, theirs: Gathered, given_labels: str | None) -> tuple[Side, Side]:
    """Every rollout of two logs (``--compare``), named by ``--label`` or the logs' files:
    the file's name, or a folder's (the files' common folder) where several."""
    default = (_name(ours.found.files), _name(theirs.found.files))
    if default[0] == default[1]:
        default = ("a: " + default[0], "b: " + default[1])
    a, b = labels(given_labels, default)
    return (Side(a, ours, np.ones(ours.found.rows.n_rollouts, dtype=bool)),
            Side(b, theirs, np.ones(theirs.found.rows.n_rollouts, dtype=bool)))  # fmt: skip


def _name(files: list[str]) -> str:
    if len(files) == 1:
        return os.path.basename(files[0]) or files[0]
    common = os.path.commonpath(files) if files else ""
    return (os.path.basename(common) or common or "log") + f"/ ({len(files)} files)"


def check_options(compare: str | None, steps: str | None, given_labels: str | None) -> None:
    """The comparison's options, checked before anything is read."""
    if steps is not None:
        if compare is not None:
            raise UsageError("give `compare` (two logs) or `steps` (two steps of one), not both")
        two_steps(steps)
    if given_labels is not None:
        if compare is None and steps is None:
            raise UsageError("`label` names the sides of `compare` or `steps`: give one of them")
        labels(given_labels, ("", ""))


def two_steps(steps: str) -> tuple[float, float]:
    """``--steps 10,200`` as two numbers."""
    try:
        wanted = [float(x) for x in steps.split(",")]
    except ValueError:
        wanted = []
    if len(wanted) != 2 or wanted[0] == wanted[1] or not all(np.isfinite(wanted)):
        raise UsageError(
            f"`steps={steps!r}`: give two different trainer steps, as `steps='10,200'`"
        )
    return wanted[0], wanted[1]


def step_sides(gathered: Gathered, steps: str, given_labels: str | None) -> tuple[Side, Side]:
    """The rollouts of two trainer steps of one log (``--steps 10,200``)."""
    wanted = two_steps(steps)
    step_of_row = row_steps(gathered.log)
    files = file_list(gathered.found.files)
    if step_of_row is None:
        raise UsageError(
            f"{files}: `steps` needs a 'step' column of numbers (the `from_` presets write each "
            "dump file's step). Hint: compare two logs with `compare`"
        )
    step = step_of_row[gathered.found.rows.last_segment_row()]
    known = np.unique(step[~np.isnan(step)])
    for x in wanted:
        if not (step == x).any():
            shown = ", ".join(_number(s) for s in known[:10]) + (" …" if len(known) > 10 else "")
            raise UsageError(
                f"`steps={steps!r}`: the log has no rollout at step {_number(x)}. "
                f"Its steps: {shown or 'none'}"
            )
    names = labels(given_labels, (f"step {_number(wanted[0])}", f"step {_number(wanted[1])}"))
    return (
        Side(names[0], gathered, step == wanted[0]),
        Side(names[1], gathered, step == wanted[1]),
    )


def comparison(a: Side, b: Side, bins: int, batch_rows: int) -> dict[str, Any]:
    """What the page's Compare section shows (see the module's docstring)."""
    sides = (a, b)
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
        "prompts": _common(prompts, a, batch_rows),
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


def _common(prompts: list[_Prompts], a: Side, batch_rows: int) -> dict[str, Any]:
    """The prompts both sides hold, the largest changes in mean reward first."""
    pa_, pb = prompts
    keys, ia, ib = np.intersect1d(pa_.keys, pb.keys, assume_unique=True, return_indices=True)
    change = pb.mean_reward[ib] - pa_.mean_reward[ia]
    order = np.lexsort((keys, -np.abs(change)))[:COMPARED_PROMPTS]
    ia, ib, change = ia[order], ib[order], change[order]
    groups = pa_.group[ia]
    found = a.gathered.found
    texts = group_texts(a.gathered.log, found, groups, batch_rows)
    assert found.rows.group_keys is not None
    ids = [shortened(k) for k in found.rows.group_keys.take(pa.array(groups)).to_pylist()]

    def side(p: _Prompts, at: np.ndarray) -> dict[str, Any]:
        spread = p.spread[at]
        return {
            "rollouts": p.rollouts[at].tolist(),
            "mean_reward": p.mean_reward[at].tolist(),
            "groups": p.groups[at].tolist(),
            "zero_variance": p.zero_variance[at].tolist(),
            "spread": [None if np.isnan(x) else float(x) for x in spread],
        }

    return {
        "total": len(keys),
        "listed": len(order),
        "prompt": [shortened(t, PROMPT_CHARS) for t in texts] if texts is not None else ids,
        "change": change.tolist(),
        "sides": [side(pa_, ia), side(pb, ib)],
    }
