"""Whether advcli gives the advantages a framework logged beside its rollouts, and what
setting would.

Some dumps carry the trainer's own advantages (TRL's ``advantage``, NeMo-RL's and prime-rl's
per-token ``advantages``), read as ``source_advantage`` (one per row) or ``source_advantages``
(per token). Every command that computes advantages compares them with its own
(:func:`agreement`: one subtraction per row), says so in its summary, and where they differ
names a setting of the framework that gives them (:func:`reproducing`), tried over the
preset's :attr:`~advcli.presets.Preset.settings` on the rows already read.

TRL's dump leaves out two of the settings that shape its numbers, the group size
(``num_generations``) and which float columns are reward functions; :func:`settle` finds them
from the logged advantages, or refuses naming the option.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from advcli import methods, presets
from advcli.errors import DataError, UsageError
from advcli.io.arrow import flat_list
from advcli.io.rollouts import Rows, extract_rows, row_columns
from advcli.lazy_imports import np, pa, pc
from advcli.params import Params

TOL = 1e-5
"""Largest absolute difference that counts as the same advantage (the logged ones are float32
from the framework's own float32 arithmetic)."""


@dataclass(frozen=True)
class Agreement:
    """advcli's advantages against the logged ones, over the rows both have."""

    framework: str
    compared: int
    differ: int
    max_difference: float
    worst_row: int | None  # row of the log (0-based) with the largest difference

    @property
    def reproduces(self) -> bool:
        return self.differ == 0

    def sentence(self) -> str:
        if self.reproduces:
            return (
                f"reproduces {self.framework}'s logged advantages ({self.compared} rows, "
                f"max |Δ| {self.max_difference:.1e})"
            )
        return (
            f"differs from {self.framework}'s logged advantages in {self.differ} of "
            f"{self.compared} rows (max |Δ| {self.max_difference:.3g})"
        )


def logged_per_row(source: Any, roles: Any, column: str) -> np.ndarray:
    """The logged advantage of every row: the column itself, or for per-token advantages the
    value at the row's first action token (the frameworks broadcast one value over them); NaN
    where the row has none."""
    if column == "source_advantage":
        values = source.columns([column]).column(column).combine_chunks()
        return _floats(values)
    mask_col = roles["action_mask"]
    out = []
    for _, table in source.batches([c for c in (column, mask_col) if c], 4096):
        values, offsets = flat_list(table.column(column))
        adv = _floats(values)
        n = len(offsets) - 1
        first = np.full(n, np.nan)
        if mask_col is not None:
            mask = _floats(flat_list(table.column(mask_col))[0]) > 0
        else:
            mask = np.ones(len(adv), dtype=bool)
        rows = np.repeat(np.arange(n), np.diff(offsets))
        hit = np.flatnonzero(mask & np.isfinite(adv))
        owners, at = np.unique(rows[hit], return_index=True)  # each row's first action token
        first[owners] = adv[hit[at]]
        out.append(first)
    return np.concatenate(out) if out else np.zeros(0)


def _floats(values: pa.Array) -> np.ndarray:
    filled = pc.fill_null(values.cast(pa.float64()), np.nan)
    floats: np.ndarray = filled.to_numpy(zero_copy_only=False)
    return floats


def compare(
    ours: np.ndarray, logged: np.ndarray, kept: np.ndarray | None, framework: str
) -> Agreement:
    """``ours`` (per row) against ``logged`` on the kept rows (None: all) where a value was
    logged."""
    have = np.isfinite(logged) if kept is None else kept & np.isfinite(logged)
    diff = np.where(have, np.abs(ours - np.where(have, logged, 0.0)), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = int(np.argmax(diff)) if have.any() else None
    return Agreement(
        framework=framework,
        compared=int(have.sum()),
        differ=int((diff > TOL).sum()),
        max_difference=float(diff.max()) if have.any() else 0.0,
        worst_row=worst,
    )


def agreement(run: Any, preset: presets.Preset | None) -> Agreement | None:
    """The run's advantages against the framework's logged ones, if the log has them and the
    method gives one advantage per rollout."""
    if preset is None or preset.logged is None or preset.logged not in run.source.schema.names:
        return None
    if not hasattr(run.plan, "advantage"):  # a per-token method: compared by ``check``
        return None
    logged = logged_per_row(run.source, run.roles, preset.logged)
    return compare(run.plan.advantage, logged, run.plan.kept, preset.framework)


@dataclass(frozen=True)
class Setting:
    """A way to run a framework's numbers: what the user would pass, and the run it makes."""

    flags: str  # e.g. "--scale batch"
    params: Params
    options: presets.PresetOptions


def _advantages(rows: Rows, p: Params) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row, the advantages of ``p`` on ``rows`` and the rows kept; None when the method
    cannot run on them (a missing column, a refused singleton)."""
    method = methods.get(p.method)
    try:
        if not set(method.named_columns(p)) <= set(rows.named):  # the log lacks one
            return None
        plan = method.plan(rows, p)
    except (DataError, UsageError, ValueError):
        return None
    advantage = getattr(plan, "advantage", None)
    return None if advantage is None else (advantage, plan.kept)


def _settings(
    preset: presets.Preset, options: presets.PresetOptions, reward_columns: list[str]
) -> Iterator[Setting]:
    """The preset's settings, each under the framework's convention."""
    for flags, method, given in preset.settings(reward_columns, options.reward_weights):
        try:
            p = methods.resolve(method, preset.convention, **given)
        except UsageError:
            continue
        yield Setting(flags, p, options)


def reproducing(log: Any, preset: presets.Preset | None, params: Params) -> str | None:
    """The flags of a setting that gives the framework's logged advantages on this log, when
    the run with ``params`` does not; None when none of the preset's settings does."""
    if preset is None or preset.logged is None or preset.logged not in log.source.schema.names:
        return None
    rows, logged, names = _rows(log)
    for setting in _settings(preset, log.options, names):
        if setting.params == params:
            continue
        got = _advantages(_with_rewards(rows, preset, setting), setting.params)
        if got is not None and compare(got[0], logged, got[1], "").reproduces:
            return setting.flags
    return None


def _rows(log: Any) -> tuple[Rows, np.ndarray, list[str]]:
    """The log's rows (with its float reward columns, for settings that sum others), the
    logged advantage of each, and those columns."""
    preset = log.preset
    names = preset.reward_components(log.source.schema, log.options)
    read = [n for s in _settings(preset, log.options, names)
            for n in _named(s.params)]  # fmt: skip
    wanted = [n for n in dict.fromkeys([*names, *read]) if n in log.source.schema.names]
    table = log.source.columns(list(dict.fromkeys([*row_columns(log.roles), *wanted])))
    rows = extract_rows(table, log.roles, log.source.sources, named=tuple(wanted))
    return rows, logged_per_row(log.source, log.roles, preset.logged), wanted


def _named(p: Params) -> tuple[str, ...]:
    """The columns a setting's method reads by name (none where its options are wrong)."""
    try:
        return methods.get(p.method).named_columns(p)
    except UsageError:
        return ()


def _with_rewards(rows: Rows, preset: presets.Preset, setting: Setting) -> Rows:
    """``rows`` with the reward (and unscored flags) the preset makes of the setting's reward
    columns, where it makes one (TRL); else as they are."""
    columns = setting.options.reward_columns
    if not columns or not set(columns) <= set(rows.named):
        return rows
    made = preset.reward_of({c: rows.named[c] for c in columns}, setting.options)
    if made is None:
        return rows
    reward, unscored = made
    return replace(rows, reward=reward, unscored=unscored)


Opener = Callable[[presets.PresetOptions], Any]
"""Opens the log with these preset options (a :class:`advcli.engine.Log`)."""


def _fits(preset: presets.Preset, log: Any) -> bool:
    """Whether one of the preset's settings gives the logged advantages on ``log``."""
    try:
        rows, logged, names = _rows(log)
    except DataError:
        return False
    for setting in _settings(preset, log.options, names):
        got = _advantages(_with_rewards(rows, preset, setting), setting.params)
        if got is not None and compare(got[0], logged, got[1], "").reproduces:
            return True
    return False


def _regrouped(
    preset: presets.Preset, options: presets.PresetOptions, open_with: Opener, log: Any
) -> Any:
    """``log`` grouped in blocks of ``--group-size`` rows where its logged advantages call
    for it (NeMo-RL's rollout-identity groups) and its own grouping misses them; ``log`` as it
    is otherwise."""
    sizes = preset.group_sizes(log)
    if not sizes or preset.logged not in log.source.schema.names or _fits(preset, log):
        return log
    for size in sizes:
        trial = open_with(replace(options, group_size=size))
        if _fits(preset, trial):
            trial.settled = (
                f"--group-size {size} (found from {preset.framework}'s logged advantages: "
                f"its groups are blocks of {size} rows, not the rows of one prompt)"
            )
            return trial
    return log


def settle(preset: presets.Preset, options: presets.PresetOptions, open_with: Opener) -> Any:
    """The log opened with what the preset's dump leaves out filled in from its logged
    advantages (TRL: ``--group-size`` and ``--reward-columns``); the log as ``options`` open it
    when nothing is left out. Refuses, naming the option, when the advantages do not tell."""
    log = open_with(options)
    if not preset.leaves_out(options):
        return log
    if not preset.needs_group_size():
        return _regrouped(preset, options, open_with, log)
    if preset.logged is None or preset.logged not in log.source.schema.names:
        if options.group_size is not None:
            return log
        msg = (
            f"{log.files}: {preset.framework}'s dump does not say how many rollouts a prompt "
            "has, and holds no logged advantages to tell. Hint: give TRL's num_generations "
            "with --group-size"
        )
        raise UsageError(msg)
    found: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    for size in preset.group_sizes(log) if options.group_size is None else [options.group_size]:
        trial = open_with(replace(options, group_size=size))
        rows, logged, names = _rows(trial)
        column_sets = [names[:k] for k in range(1, len(names) + 1)
                       if set(options.reward_weights) <= set(names[:k])]  # fmt: skip
        if options.reward_columns is not None:
            column_sets = [list(options.reward_columns)]
        for columns in column_sets:
            tried = replace(options, group_size=size, reward_columns=columns)
            for setting in _settings(preset, tried, columns):
                got = _advantages(_with_rewards(rows, preset, setting), setting.params)
                if got is not None and compare(got[0], logged, got[1], "").reproduces:
                    found.setdefault((size, tuple(columns)), []).append(setting.flags)
    sizes = sorted({size for size, _ in found})
    if len(sizes) != 1:
        fits = (
            f"fit --group-size {' and '.join(map(str, sizes))}"
            if sizes
            else "fit no group size with its reward columns"
            + (
                " and --reward-weights"
                if options.reward_weights
                else " (TRL's reward_weights are not in the dump either: --reward-weights)"
            )
        )
        msg = (
            f"{log.files}: {preset.framework}'s dump does not say how many rollouts a prompt "
            f"has, and its logged advantages {fits}. Hint: give TRL's num_generations with "
            "--group-size"
        )
        raise UsageError(msg)
    fitting = sorted({columns for size, columns in found}, key=len)
    if len(fitting) > 1:
        listed = " or ".join(",".join(c) for c in fitting)
        msg = (
            f"{log.files}: the logged advantages fit more than one set of reward columns "
            f"({listed}; the others are log_extra columns). Hint: name the reward functions' "
            "columns with --reward-columns"
        )
        raise UsageError(msg)
    settled = replace(options, group_size=sizes[0], reward_columns=list(fitting[0]))
    log = open_with(settled)
    log.settled = (
        f"--group-size {sizes[0]} --reward-columns {','.join(fitting[0])} "
        f"(found from {preset.framework}'s logged advantages)"
    )
    return log
