"""Whether advcli gives the advantages a framework logged beside its rollouts, and which of the
framework's settings would.

Some dumps carry the trainer's own advantages (TRL's ``advantage``, NeMo-RL's and prime-rl's
per-token ``advantages``), read as ``source_advantage`` (one per row) or ``source_advantages``
(per token). Every command that computes advantages compares them with its own: one
subtraction per row (:func:`agreement`), or per token as the final pass streams
(:class:`TokenAgreement`), says so in its summary, and where they differ searches the
preset's settings (:meth:`advcli.presets.Preset.settings`, the framework's known settings in
combination) for one that gives them (:func:`reproducing`). That setting is named as the
options that turn the user's run into it (:func:`hint`): ``--flag VALUE``, never a
placeholder, so that following the hint reaches the logged numbers.

TRL's dump leaves out two of the settings that shape its numbers, the group size
(``num_generations``) and which float columns are reward functions; :func:`settle` finds them
from the logged advantages, or refuses naming the options only the user knows. A group size the
user gives that the logged advantages contradict is refused, naming the one they fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from advcli import methods, presets
from advcli.errors import ContradictsLog, DataError, UsageError
from advcli.io.arrow import flat_list
from advcli.io.rollouts import Rows, extract_rows, row_columns
from advcli.lazy_imports import np, pa, pc
from advcli.params import Params
from advcli.presets import Setting

TOL = 1e-5
"""Largest absolute difference that counts as the same advantage (the logged ones are float32
from the framework's own float32 arithmetic)."""

ROUNDED_TOL = 5e-5
"""The same, for logged advantages rounded to 4 decimals (prime-rl's episode records)."""


def on_grid(values: np.ndarray) -> bool:
    """Whether every finite value has at most 4 decimals (up to float32's rounding of them)."""
    v = values[np.isfinite(values)]
    scaled = v * 1e4
    return bool(len(v)) and bool(
        (np.abs(scaled - np.round(scaled)) <= np.maximum(1e-6, 1e-3 * np.abs(v))).all()
    )


def tolerance(rounded: bool, differences: np.ndarray) -> float:
    """The difference that counts as the same: :data:`TOL`, or :data:`ROUNDED_TOL` (half the
    last digit) where the logged values all have 4 decimals (``rounded``) and a difference
    falls between the two, where rounding decides."""
    between = (differences > TOL) & (differences <= ROUNDED_TOL)
    return ROUNDED_TOL if rounded and bool(between.any()) else TOL


@dataclass(frozen=True)
class Agreement:
    """advcli's advantages against the logged ones, over the rows both have."""

    framework: str
    compared: int
    differ: int
    max_difference: float
    worst_row: int | None  # row of the log (0-based) with the largest difference
    tol: float = TOL

    @property
    def reproduces(self) -> bool:
        return self.differ == 0

    def sentence(self) -> str:
        if self.reproduces:
            return (
                f"reproduces {self.framework}'s logged advantages ({self.compared} rows, "
                f"max |Δ| {self.max_difference:.1e}{self._rounded()})"
            )
        return f"differs from {self.framework}'s logged advantages in {self.counts()}"

    def counts(self) -> str:
        """``N of M rows (max |Δ| d)``: the rows that differ."""
        return (
            f"{self.differ} of {self.compared} rows (max |Δ| {self.max_difference:.3g}"
            f"{self._rounded()})"
        )

    def _rounded(self) -> str:
        return f", to {self.tol:g}: the logged values have 4 decimals" if self.tol != TOL else ""


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
    logged, to the :func:`tolerance` of the logged values."""
    have = np.isfinite(logged) if kept is None else kept & np.isfinite(logged)
    diff = np.where(have, np.abs(ours - np.where(have, logged, 0.0)), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    tol = tolerance(on_grid(logged[have]), diff)
    worst = int(np.argmax(diff)) if have.any() else None
    return Agreement(
        framework=framework,
        compared=int(have.sum()),
        differ=int((diff > tol).sum()),
        max_difference=float(diff.max()) if have.any() else 0.0,
        worst_row=worst,
        tol=tol,
    )


def logs_advantages(log: Any) -> bool:
    """Whether the log was read with a preset whose dump carries the framework's advantages."""
    preset = log.preset
    return preset is not None and preset.logged is not None and (
        preset.logged in log.source.schema.names)  # fmt: skip


def agreement(run: Any, preset: presets.Preset | None) -> Agreement | None:
    """The run's advantages against the framework's logged ones, if the log has them and the
    method gives one advantage per rollout (a per-token method: :class:`TokenAgreement`)."""
    if preset is None or preset.logged is None or preset.logged not in run.source.schema.names:
        return None
    if not hasattr(run.plan, "advantage"):
        return None
    logged = logged_per_row(run.source, run.roles, preset.logged)
    return compare(run.plan.advantage, logged, run.plan.kept, preset.framework)


class TokenAgreement:
    """A per-token method's advantages against the logged per-token ones, batch by batch as
    the final pass streams them, over the action tokens where a value was logged; each row's
    largest difference is kept, to count those beyond the :func:`tolerance` of all the logged
    values at the end."""

    def __init__(self, framework: str, column: str):
        self.framework, self.column = framework, column
        self.worst: list[np.ndarray] = []  # per row compared: its largest difference
        self.rows: list[np.ndarray] = []  # and its row of the log
        self.rounded = True  # every logged value so far has 4 decimals

    def add(self, row0: int, table: pa.Table, mask: np.ndarray, ours: np.ndarray) -> None:
        values, offsets = flat_list(table.column(self.column))
        logged = _floats(values)
        if len(logged) != len(ours):  # a row without logged values (null): none to compare
            return
        have = mask & np.isfinite(logged)
        self.rounded = self.rounded and (on_grid(logged[have]) or not have.any())
        diff = np.where(have, np.abs(ours.astype(np.float64) - np.where(have, logged, 0.0)), 0.0)
        diff = np.where(np.isnan(diff), np.inf, diff)
        n = len(offsets) - 1
        rows = np.repeat(np.arange(n), np.diff(offsets))
        compared = np.bincount(rows[have], minlength=n) > 0
        worst = np.zeros(n)
        np.maximum.at(worst, rows, diff)
        self.worst.append(worst[compared])
        self.rows.append(row0 + np.flatnonzero(compared))

    def result(self) -> Agreement | None:
        worst = np.concatenate(self.worst) if self.worst else np.zeros(0)
        if not len(worst):
            return None
        tol = tolerance(self.rounded, worst)
        at = int(np.argmax(worst))
        return Agreement(self.framework, len(worst), int((worst > tol).sum()),
                         float(worst[at]), int(np.concatenate(self.rows)[at]), tol)  # fmt: skip


def params_of(setting: Setting, convention: str) -> Params | None:
    """The parameters of a run of ``setting`` under ``convention`` (None: it cannot run)."""
    try:
        return methods.resolve(setting.method, setting.convention or convention,
                               **dict(setting.given))  # fmt: skip
    except UsageError:
        return None


def _spelled(name: str, value: Any) -> str | None:
    """A parameter's value as the option that gives it (None: no option can: a None)."""
    flag = methods.PARAMETERS[name].flag
    if value is None:
        return None
    if isinstance(value, bool):
        return flag if value else "--no-" + flag.removeprefix("--")
    if isinstance(value, float):
        return f"{flag} {value:g}"
    return f"{flag} {value}"


def hint(setting: Setting, convention: str, user: Params, user_reward: str | None) -> str | None:
    """The options that turn the user's run (``user``, the reward read from ``user_reward``)
    into ``setting`` under the framework's ``convention``: the method and convention where
    they change, then every parameter whose value differs (from the user's, or from the new
    method's defaults), then the reward column; None where a value has no option."""
    target = params_of(setting, convention)
    if target is None:
        return None
    parts = []
    base = user
    if target.method != user.method or user.convention != target.convention:
        if user.convention != target.convention:
            parts.append(f"--convention {target.convention}")
        if target.method != user.method:
            parts.append(f"--method {target.method}")
        base = methods.resolve(target.method, target.convention)
    had = base.as_dict()
    for name, value in target.as_dict().items():
        if name in ("method", "convention") or had.get(name) == value:
            continue
        spelled = _spelled(name, value)
        if spelled is None:
            return None
        parts.append(spelled)
    if not _same_reward(setting, user_reward):
        parts.append(f"--col reward={setting.reward or 'reward'}")
    return " ".join(parts)


def _same_reward(setting: Setting, user_reward: str | None) -> bool:
    """Whether ``setting`` reads the reward from the column the user's run reads it from."""
    return (setting.reward or "reward") == (user_reward or "reward")


def asked_for_own(preset: presets.Preset, log: Any, user: Params, user_reward: str | None) -> bool:
    """Whether the user's run is one of the framework's own estimators at its defaults (the
    method named alone): then advantages that differ from the logged ones are a surprise."""
    if user.convention != preset.convention:
        return False
    for setting in preset.settings(log.source.schema.names, log.options):
        own = params_of(setting, preset.convention) == user and _same_reward(setting, user_reward)
        if setting.own and own:
            return True
    return False


EngineFits = Callable[[Any, Setting, Params], "Agreement | None"]
"""How a setting that needs the engine is tried on a log: the engine runs it and compares its
advantages with the logged ones."""


@dataclass(frozen=True)
class Found:
    """A setting of the framework's that gives its logged advantages, and the options that
    turn the user's run into it."""

    setting: Setting
    flags: str

    def sentence(self) -> str:
        note = f" ({self.setting.note})" if self.setting.note else ""
        return f"{self.flags}{note}"


def carried(user: Params, settings: list[Setting]) -> dict[str, Any]:
    """The parameters the user set away from their method's defaults that no setting of the
    framework's varies (a KL coefficient, a discount): facts of their run, which every setting
    tried keeps."""
    varied = {name for setting in settings for name, _ in setting.given}
    base = methods.resolve(user.method, user.convention).as_dict()
    return {
        name: value
        for name, value in user.as_dict().items()
        if name not in ("method", "convention", *varied) and base.get(name) != value
    }


def keeping(setting: Setting, facts: dict[str, Any]) -> Setting:
    """``setting`` with the user's ``facts`` (:func:`carried`) its method takes."""
    takes = {param.name for param in methods.get(setting.method).takes}
    kept = {name: value for name, value in facts.items() if name in takes}
    return replace(setting, given=tuple({**kept, **dict(setting.given)}.items()))


def clamped(settings: list[Setting], logged: np.ndarray, names: str) -> list[Setting]:
    """The settings again, with the clamp (the framework's ``names`` for it) the logged
    advantages show: a lowest or highest value that two rows or more share, past which the
    settings' own advantages would go; none where neither shows."""
    values = logged[np.isfinite(logged)]
    if not len(values):
        return []
    low, high = float(values.min()), float(values.max())
    bounds = {
        name: bound
        for name, bound in (("advantage_clip_low", low), ("advantage_clip_high", high))
        if (values == bound).sum() >= 2
    }
    if not bounds:
        return []
    said = ", ".join(f"{name} {bound:g}" for name, bound in bounds.items())
    return [
        replace(setting, given=(*setting.given, *bounds.items()),
                note=f"{setting.note}; {said}" if setting.note else said, own=False)
        for setting in settings
    ]  # fmt: skip


def reproducing(
    log: Any, user: Params, user_reward: str | None, engine_fits: EngineFits
) -> Found | None:
    """The first of the framework's settings, other than the user's run, that gives its
    logged advantages on this log (each keeping what the user set that no setting varies);
    None when none does."""
    preset = log.preset
    if not logs_advantages(log):
        return None
    convention = preset.convention
    settings = preset.settings(log.source.schema.names, log.options)
    facts = carried(user, settings)
    settings = [keeping(setting, facts) for setting in settings]
    if preset.clips is not None:
        settings += clamped(settings, logged_per_row(log.source, log.roles, preset.logged),
                            preset.clips)  # fmt: skip
    rows = None
    for setting in settings:
        p = params_of(setting, convention)
        if p is None or (p == user and _same_reward(setting, user_reward)):
            continue
        flags = hint(setting, convention, user, user_reward)
        if not flags:
            continue
        if _needs_engine(p):
            found = engine_fits(log, setting, p)
        else:
            if rows is None:
                rows = _rows(log, settings)
            found = _row_agreement(rows, setting, p, preset)
        if found is not None and found.reproduces:
            return Found(setting, flags)
    return None


def _needs_engine(p: Params) -> bool:
    """Whether a run of ``p`` needs the engine: it gives advantages per token (no one
    advantage per rollout), or plans on sums of the tokens (a KL penalty)."""
    method = methods.get(p.method)
    return "advantage" not in method.outputs or bool(method.row_sums(p))


@dataclass
class _Read:
    rows: Rows
    logged: np.ndarray


def _rows(log: Any, settings: list[Setting], more: list[str] | None = None) -> _Read:
    """The log's rows, with every column a setting reads by name (its reward column, GDPO's
    reward columns) and the columns ``more`` names, and the logged advantage of each row."""
    convention = log.preset.convention
    named: list[str] = list(more or [])
    for setting in settings:
        p = params_of(setting, convention)
        if p is not None:
            named += _named(p)
        if setting.reward is not None:
            named.append(setting.reward)
    wanted = tuple(n for n in dict.fromkeys(named) if n in log.source.schema.names)
    table = log.source.columns(list(dict.fromkeys([*row_columns(log.roles), *wanted])))
    rows = extract_rows(table, log.roles, log.source.sources, named=wanted)
    return _Read(rows, logged_per_row(log.source, log.roles, log.preset.logged))


def _named(p: Params) -> tuple[str, ...]:
    """The columns a setting's method reads by name (none where its options are wrong)."""
    try:
        return methods.get(p.method).named_columns(p)
    except UsageError:
        return ()


def _row_agreement(
    read: _Read, setting: Setting, p: Params, preset: presets.Preset
) -> Agreement | None:
    rows = read.rows
    if setting.reward is not None:
        if setting.reward not in rows.named:
            return None
        rows = replace(rows, reward=np.where(np.isnan(rows.named[setting.reward]), 0.0,
                                             rows.named[setting.reward]))  # fmt: skip
    got = _advantages(rows, p)
    if got is None:
        return None
    return compare(got[0], read.logged, got[1], preset.framework)


def _advantages(rows: Rows, p: Params) -> tuple[np.ndarray, np.ndarray | None] | None:
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


def disagreement(log: Any, run: Any, found: Found | None) -> str:
    """The warning for advantages that are not the framework's logged ones. Loud where the
    user asked for one of the framework's own estimators (a surprise), calm where they chose
    another on purpose; each names the setting that gives the logged ones, if one does, else
    the settings only the user knows that the dump leaves out."""
    preset, p, agreement = log.preset, run.params, run.agreement
    assert preset is not None and agreement is not None
    where = ""
    if agreement.worst_row is not None:
        where = f", the most at {log.sources.at(agreement.worst_row, preset.logged)}"
    user_reward = log.roles["reward"]
    if asked_for_own(preset, log, p, user_reward):
        fix = (
            f"{found.sentence()} reproduces them"
            if found is not None
            else f"none of {preset.framework}'s settings advcli knows reproduces them"
            + _unknowns(preset, log, p)
        )
        return (
            f"THESE ARE NOT {preset.framework.upper()}'S ADVANTAGES: {p.method} under the "
            f"{p.convention} convention {agreement.sentence()}{where}; {fix}"
        )
    ours = f"these are {p.method}'s under the {p.convention} convention, as asked"
    if found is None:
        return f"{ours}, and {agreement.sentence()}"
    label = found.setting.note or found.setting.method
    return (
        f"{preset.framework}'s logged advantages are its {label}, which {found.flags} gives; "
        f"{ours}: they differ in {agreement.counts()}"
    )


def _unknowns(preset: presets.Preset, log: Any, user: Params) -> str:
    """The settings of the framework that its dump leaves out and the user has not given, as
    options (bare: only the user knows their values)."""
    facts = carried(user, preset.settings(log.source.schema.names, log.options))
    missing = [
        f"{name} ({flag})"
        for name, flag in preset.unknowns()
        if (key := flag.removeprefix("--").replace("-", "_")) not in facts
        and not getattr(log.options, key, None)
    ]
    return f" (its dump does not hold {', '.join(missing)})" if missing else ""


Opener = Callable[[presets.PresetOptions], Any]
"""Opens the log with these preset options (a :class:`advcli.logs.Log`)."""


def _fits(preset: presets.Preset, log: Any) -> bool:
    """Whether one of the preset's per-row settings gives the logged advantages on ``log``."""
    try:
        settings = preset.settings(log.source.schema.names, log.options)
        read = _rows(log, settings)
    except DataError:
        return False
    for setting in settings:
        p = params_of(setting, preset.convention)
        if p is None or _needs_engine(p):
            continue
        got = _row_agreement(read, setting, p, preset)
        if got is not None and got.reproduces:
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


def _column_sets(names: list[str], options: presets.PresetOptions) -> Iterator[list[str]]:
    """The reward columns to try: those given, else each run of the float columns from the
    first (reward functions come first, ``log_extra`` columns after), holding every column
    the weights name."""
    if options.reward_columns is not None:
        yield list(options.reward_columns)
        return
    for k in range(1, len(names) + 1):
        if set(options.reward_weights) <= set(names[:k]):
            yield names[:k]


def _search(
    preset: presets.Preset, trial: Any, options: presets.PresetOptions
) -> set[tuple[str, ...]]:
    """On ``trial`` (the log opened with one group size), the reward column sets under which
    one of the framework's settings gives its logged advantages."""
    names = preset.reward_components(trial.source.schema, trial.options)
    fitting: set[tuple[str, ...]] = set()
    for columns in _column_sets(names, options):
        tried = replace(options, reward_columns=columns)
        settings = preset.settings(trial.source.schema.names, tried)
        read = _rows(trial, settings, columns)
        made = preset.reward_of({c: read.rows.named[c] for c in columns}, tried)
        for setting in settings:
            p = params_of(setting, preset.convention)
            if p is None or _needs_engine(p):
                continue
            rows = read.rows
            if made is not None and not _named(p):  # (a setting naming columns reads them)
                rows = replace(rows, reward=made[0], unscored=made[1])
            got = _row_agreement(_Read(rows, read.logged), setting, p, preset)
            if got is not None and got.reproduces:
                fitting.add(tuple(columns))
    return fitting


def settle(preset: presets.Preset, options: presets.PresetOptions, open_with: Opener) -> Any:
    """The log opened with what the preset's dump leaves out filled in from its logged
    advantages (TRL: ``--group-size`` and ``--reward-columns``); the log as ``options`` open it
    when nothing is left out. Refuses, naming the options only the user knows, while the
    advantages do not tell and one of them is missing; refuses a group size the user gave
    that they contradict, naming the one they fit."""
    log = open_with(options)
    log.reopen = open_with
    if not preset.needs_group_size():
        if not preset.leaves_out(options):
            return log
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
    given = options.group_size
    ungrouped = log if given is None else open_with(replace(options, group_size=None))
    sizes = preset.group_sizes(ungrouped)
    if given is not None and given not in sizes:
        sizes.append(given)
    found: dict[int, set[tuple[str, ...]]] = {}
    trials: dict[int, Any] = {}
    for size in sizes:
        trials[size] = trial = (
            log if size == given else open_with(replace(options, group_size=size))
        )
        if column_sets := _search(preset, trial, options):
            found[size] = column_sets
    if given is not None:
        _refuse_contradicted(preset, log, given, found, trials)
    fits = sorted(found) if given is None else [given] if given in found else []
    if len(fits) != 1:
        weighed = bool(options.reward_weights or options.reward_columns)
        if given is not None and weighed:
            return log  # all the user knows is given: the run's warning names the rest
        _refuse_unsettled(preset, log, fits, given, weighed)
    size = fits[0]
    fitting = sorted(found[size], key=len)
    if len(fitting) > 1:
        listed = " or ".join(",".join(c) for c in fitting)
        msg = (
            f"{log.files}: the logged advantages fit more than one set of reward columns "
            f"({listed}; the others are log_extra columns). Hint: name the reward functions' "
            "columns with --reward-columns"
        )
        raise UsageError(msg)
    settled = replace(options, group_size=size, reward_columns=list(fitting[0]))
    if settled == options:
        return log
    log = open_with(settled)
    log.reopen = open_with
    told = [f"--group-size {size}"] if given is None else []
    if options.reward_columns is None:
        told.append(f"--reward-columns {','.join(fitting[0])}")
    log.settled = f"{' '.join(told)} (found from {preset.framework}'s logged advantages)"
    return log


def _refuse_unsettled(
    preset: presets.Preset, log: Any, fits: list[int], given: int | None, weighed: bool
) -> None:
    """Refuse a log whose logged advantages fit several group sizes, or none with the reward
    columns weighted alike, naming the options the user has not given (bare: only they know
    TRL's num_generations and reward_weights)."""
    if fits:
        told = f"fit --group-size {' and '.join(map(str, fits))}"
        missing = ["--group-size"]
    else:
        alike = "" if weighed else " with its reward columns weighted alike"
        told = (
            f"fit no group size{alike}" if given is None else f"do not fit groups of {given}{alike}"
        )
        known = {"--group-size": given is not None, "--reward-weights": weighed}
        missing = [flag for flag, have in known.items() if not have]
    msg = (
        f"{log.files}: {preset.framework}'s dump holds neither num_generations nor "
        f"reward_weights, and its logged advantages {told}. Hint: give {' and '.join(missing)}"
    )
    raise UsageError(msg)


def _refuse_contradicted(
    preset: presets.Preset,
    log: Any,
    given: int,
    found: dict[int, set[tuple[str, ...]]],
    trials: dict[int, Any],
) -> None:
    """A group size the user gave that the logged advantages contradict: they fit another
    size and not it, or fit both but it reads more rows as something else (evaluation rows,
    a cut group) than the other does."""
    fitting = sorted(found, key=lambda s: (trials[s].source.set_aside, s != given))
    if not fitting or fitting[0] == given:
        return
    best = fitting[0]
    aside = log.source.set_aside
    if given in found and aside <= trials[best].source.set_aside:
        return
    why = (
        f"{aside} of its rows are not whole groups of {given} (read as evaluation rows or a "
        "cut group)"
        if given in found
        else f"its logged advantages do not fit groups of {given}"
    )
    msg = (
        f"--group-size {given}: {log.files}: {why}, and {preset.framework}'s logged "
        f"advantages fit --group-size {best}. Hint: --group-size {best}"
    )
    raise ContradictsLog(msg)
