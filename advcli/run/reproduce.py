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

A setting is tried per row where its method gives one advantage per rollout
(:func:`row_agreement`), else by the engine (:data:`EngineFits`). What a dump leaves out
(TRL's group size and reward columns) is settled from the logged advantages before the run,
by :mod:`advcli.run.settling`, with the same per-row trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from advcli import methods, presets
from advcli.errors import DataError, UsageError
from advcli.io.arrow import flat_list
from advcli.io.rollouts import Rows, extract_rows, row_columns
from advcli.io.schema import Roles
from advcli.io.sources import LogSource
from advcli.lazy_imports import np, pa, pc
from advcli.methods import Method, Plan
from advcli.params import Params
from advcli.presets import Setting
from advcli.run.logs import Log

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


def logged_per_row(source: LogSource, roles: Roles, column: str) -> np.ndarray:
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


def logs_advantages(log: Log) -> bool:
    """Whether the log was read with a preset whose dump carries the framework's advantages."""
    preset = log.preset
    return preset is not None and preset.logged is not None and (
        preset.logged in log.source.schema.names)  # fmt: skip


def agreement(log: Log, plan: Plan) -> Agreement | None:
    """The advantages ``plan`` made on ``log`` against the framework's logged ones, if the log
    has them and the method gives one advantage per rollout (a per-token method:
    :class:`TokenAgreement`)."""
    preset = log.preset
    if preset is None or preset.logged is None or not logs_advantages(log):
        return None
    advantage = getattr(plan, "advantage", None)
    if advantage is None:
        return None
    logged = logged_per_row(log.source, log.roles, preset.logged)
    return compare(advantage, logged, plan.kept, preset.framework)


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


@dataclass(frozen=True)
class Trial:
    """One of a framework's settings and the parameters of its run (which hold its method)."""

    setting: Setting
    params: Params


def trials(settings: list[Setting], convention: str) -> list[Trial]:
    """The settings that can run under the framework's ``convention``, each resolved: where a
    setting, which names its method, becomes a run (each name looked up once)."""
    named = {name: methods.get(name) for name in dict.fromkeys(s.method for s in settings)}
    resolved = (
        (setting, _resolved(named[setting.method], setting, convention)) for setting in settings
    )
    return [Trial(setting, p) for setting, p in resolved if p is not None]


def _resolved(method: Method[Any], setting: Setting, convention: str) -> Params | None:
    """The parameters of a run of ``setting`` by ``method`` (None: it cannot run)."""
    try:
        return methods.resolve(method, setting.convention or convention, **dict(setting.given))
    except UsageError:
        return None


def _again(trial: Trial, setting: Setting, convention: str) -> Trial | None:
    """``setting``, another of ``trial``'s (more values given), run by the same method."""
    p = _resolved(trial.params.estimator, setting, convention)
    return None if p is None else Trial(setting, p)


def _spelled(name: str, value: Any) -> str | None:
    """A parameter's value as the keyword that gives it (None: no option can: a None)."""
    if value is None:
        return None
    if isinstance(value, float):
        return f"`{name}={value:g}`"  # 1.0 as 1: as short as the command line writes it
    return f"`{name}={value!r}`"


def hint(trial: Trial, user: Params, user_reward: str | None) -> str | None:
    """The options that turn the user's run (``user``, the reward read from ``user_reward``)
    into ``trial``'s setting: the method and convention where they change, then every
    parameter whose value differs (from the user's, or from the new method's defaults), then
    the reward column; None where a value has no option."""
    target = trial.params
    parts = []
    base = user
    if target.method != user.method or user.convention != target.convention:
        if user.convention != target.convention:
            parts.append(f"`convention={target.convention!r}`")
        if target.method != user.method:
            parts.append(f"`method={target.method!r}`")
        base = methods.resolve(target.estimator, target.convention)
    had = base.as_dict()
    for name, value in target.as_dict().items():
        if name in ("method", "convention") or had.get(name) == value:
            continue
        spelled = _spelled(name, value)
        if spelled is None:
            return None
        parts.append(spelled)
    if not same_reward(trial.setting, user_reward):
        column = trial.setting.reward or "reward"
        parts.append(f"`col={[f'reward={column}']}`")
    return " ".join(parts)


def same_reward(setting: Setting, user_reward: str | None) -> bool:
    """Whether ``setting`` reads the reward from the column the user's run reads it from."""
    return (setting.reward or "reward") == (user_reward or "reward")


def asked_for_own(preset: presets.Preset, log: Log, user: Params, user_reward: str | None) -> bool:
    """Whether the user's run is one of the framework's own estimators at its defaults (the
    method named alone): then advantages that differ from the logged ones are a surprise."""
    if user.convention != preset.convention:
        return False
    settings = preset.settings(log.source.schema.names, log.options)
    return any(
        trial.setting.own and trial.params == user and same_reward(trial.setting, user_reward)
        for trial in trials(settings, preset.convention)
    )


EngineFits = Callable[[Log, Setting, Params], "Agreement | None"]
"""How a setting that needs the engine is tried on a log: the engine runs it and compares its
advantages with the logged ones."""


@dataclass(frozen=True)
class Found:
    """A setting of the framework's that gives its logged advantages, and the options that
    turn the user's run into it."""

    setting: Setting
    options: str

    def sentence(self) -> str:
        note = f" ({self.setting.note})" if self.setting.note else ""
        return f"{self.options}{note}"


def carried(user: Params, settings: list[Setting]) -> dict[str, Any]:
    """The parameters the user set away from their method's defaults that no setting of the
    framework's varies (a KL coefficient, a discount): facts of their run, which every setting
    tried keeps."""
    varied = {name for setting in settings for name, _ in setting.given}
    base = methods.resolve(user.estimator, user.convention).as_dict()
    return {
        name: value
        for name, value in user.as_dict().items()
        if name not in ("method", "convention", *varied) and base.get(name) != value
    }


def keeping(trial: Trial, facts: dict[str, Any], convention: str) -> Trial | None:
    """``trial`` with the user's ``facts`` (:func:`carried`) its method takes."""
    takes = {param.name for param in trial.params.estimator.takes}
    kept = {name: value for name, value in facts.items() if name in takes}
    setting = trial.setting
    return _again(trial, replace(setting, given=tuple({**kept, **dict(setting.given)}.items())),
                  convention)  # fmt: skip


def clamped(tried: list[Trial], logged: np.ndarray, names: str, convention: str) -> list[Trial]:
    """The trials again, with the clamp (the framework's ``names`` for it) the logged
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
    again = (
        _again(trial, replace(trial.setting, given=(*trial.setting.given, *bounds.items()),
                              note=f"{trial.setting.note}; {said}" if trial.setting.note else said,
                              own=False), convention)
        for trial in tried
    )  # fmt: skip
    return [trial for trial in again if trial is not None]


def reproducing(
    log: Log, user: Params, user_reward: str | None, engine_fits: EngineFits
) -> Found | None:
    """The first of the framework's settings, other than the user's run, that gives its
    logged advantages on this log (each keeping what the user set that no setting varies);
    None when none does."""
    preset = log.preset
    if preset is None or preset.logged is None or not logs_advantages(log):
        return None
    convention = preset.convention
    settings = preset.settings(log.source.schema.names, log.options)
    facts = carried(user, settings)
    tried = [
        kept
        for trial in trials(settings, convention)
        if (kept := keeping(trial, facts, convention)) is not None
    ]
    if preset.clips is not None:
        logged = logged_per_row(log.source, log.roles, preset.logged)
        tried += clamped(tried, logged, preset.clips, convention)
    read = None
    for trial in tried:
        p = trial.params
        if p == user and same_reward(trial.setting, user_reward):
            continue
        options = hint(trial, user, user_reward)
        if not options:
            continue
        if needs_engine(p):
            found = engine_fits(log, trial.setting, p)
        else:
            if read is None:
                read = read_rows(log, tried)
            found = row_agreement(read, trial, preset)
        if found is not None and found.reproduces:
            return Found(trial.setting, options)
    return None


def needs_engine(p: Params) -> bool:
    """Whether a run of ``p`` needs the engine: it gives advantages per token (no one
    advantage per rollout), or plans on sums of the tokens (a KL penalty)."""
    method = p.estimator
    return "advantage" not in method.outputs or bool(method.row_sums(p))


@dataclass
class RowsRead:
    """A log's rows, with the columns the trials read by name, and its logged advantages."""

    rows: Rows
    logged: np.ndarray


def read_rows(log: Log, tried: list[Trial], more: list[str] | None = None) -> RowsRead:
    """The log's rows, with every column a trial reads by name (its reward column, GDPO's
    reward columns) and the columns ``more`` names, and the logged advantage of each row."""
    assert log.preset is not None and log.preset.logged is not None
    named: list[str] = list(more or [])
    for trial in tried:
        named += named_columns(trial.params)
        if trial.setting.reward is not None:
            named.append(trial.setting.reward)
    wanted = tuple(n for n in dict.fromkeys(named) if n in log.source.schema.names)
    table = log.source.columns(list(dict.fromkeys([*row_columns(log.roles), *wanted])))
    rows = extract_rows(table, log.roles, log.source.sources, named=wanted)
    return RowsRead(rows, logged_per_row(log.source, log.roles, log.preset.logged))


def named_columns(p: Params) -> tuple[str, ...]:
    """The columns a trial's method reads by name (none where its options are wrong)."""
    try:
        return p.estimator.named_columns(p)
    except UsageError:
        return ()


def row_agreement(read: RowsRead, trial: Trial, preset: presets.Preset) -> Agreement | None:
    """``trial``'s advantages on the rows read against the logged ones (None: it cannot run
    on them)."""
    rows = read.rows
    reward = trial.setting.reward
    if reward is not None:
        if reward not in rows.named:
            return None
        rows = replace(rows, reward=np.where(np.isnan(rows.named[reward]), 0.0,
                                             rows.named[reward]))  # fmt: skip
    got = _advantages(rows, trial.params)
    if got is None:
        return None
    return compare(got[0], read.logged, got[1], preset.framework)


def _advantages(rows: Rows, p: Params) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Per row, the advantages of ``p`` on ``rows`` and the rows kept; None when the method
    cannot run on them (a missing column, a refused singleton)."""
    method = p.estimator
    try:
        if not set(method.named_columns(p)) <= set(rows.named):  # the log lacks one
            return None
        plan = method.plan(rows, p)
    except (DataError, UsageError, ValueError):
        return None
    advantage = getattr(plan, "advantage", None)
    return None if advantage is None else (advantage, plan.kept)


def disagreement(log: Log, p: Params, agreement: Agreement, found: Found | None) -> str:
    """The warning for advantages (``p``'s run on ``log``, ``agreement`` with the logged ones)
    that are not the framework's logged ones. Loud where the user asked for one of the
    framework's own estimators (a surprise), calm where they chose another on purpose; each
    names the setting that gives the logged ones, if one does, else the settings only the
    user knows that the dump leaves out."""
    preset = log.preset
    assert preset is not None
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
        f"{preset.framework}'s logged advantages are its {label}, which {found.options} gives; "
        f"{ours}: they differ in {agreement.counts()}"
    )


def _unknowns(preset: presets.Preset, log: Log, user: Params) -> str:
    """The settings of the framework that its dump leaves out and the user has not given, as
    options (bare: only the user knows their values)."""
    facts = carried(user, preset.settings(log.source.schema.names, log.options))
    missing = [
        f"{name} (`{name}`)"
        for name in preset.unknowns()
        if name not in facts and not getattr(log.options, name, None)
    ]
    return f" (its dump does not hold {', '.join(missing)})" if missing else ""
