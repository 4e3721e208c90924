"""What a framework's dump leaves out, settled from its logged advantages before the run.

TRL's dump leaves out two of the settings that shape its numbers, the group size
(``num_generations``) and which float columns are reward functions; NeMo-RL's groups may be
blocks of rows rather than the rows of one prompt. :func:`settle` finds them by trying the
framework's per-row settings (:mod:`advcli.run.reproduce`) on the log opened each way, or refuses
naming the options only the user knows. A group size the user gives that the logged
advantages contradict is refused, naming the one they fit.

Opening a log (:mod:`advcli.run.logs`) runs no estimator: the job calls :func:`settle` when it
opens the log of a framework's dump.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from advcli import presets
from advcli.errors import ContradictsLog, DataError, UsageError
from advcli.run.logs import Log
from advcli.run.reproduce import (
    RowsRead,
    named_columns,
    needs_engine,
    read_rows,
    row_agreement,
    trials,
)

Opener = Callable[[presets.PresetOptions], Log]
"""Opens the log with these preset options."""


def _fits(preset: presets.Preset, log: Log) -> bool:
    """Whether one of the preset's per-row settings gives the logged advantages on ``log``."""
    try:
        tried = trials(preset.settings(log.source.schema.names, log.options), preset.convention)
        read = read_rows(log, tried)
    except DataError:
        return False
    for trial in tried:
        if needs_engine(trial.params):
            continue
        got = row_agreement(read, trial, preset)
        if got is not None and got.reproduces:
            return True
    return False


def _regrouped(
    preset: presets.Preset, options: presets.PresetOptions, open_with: Opener, log: Log
) -> Log:
    """``log`` grouped in blocks of ``--group-size`` rows where its logged advantages call
    for it (NeMo-RL's rollout-identity groups) and its own grouping misses them; ``log`` as it
    is otherwise."""
    sizes = preset.group_sizes(log)
    if not sizes or preset.logged not in log.source.schema.names or _fits(preset, log):
        return log
    for size in sizes:
        grouped = open_with(replace(options, group_size=size))
        if _fits(preset, grouped):
            grouped.settled = (
                f"`group_size={size}` (found from {preset.framework}'s logged advantages: "
                f"its groups are blocks of {size} rows, not the rows of one prompt)"
            )
            return grouped
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
    preset: presets.Preset, log: Log, options: presets.PresetOptions
) -> set[tuple[str, ...]]:
    """On ``log`` (opened with one group size), the reward column sets under which one of the
    framework's settings gives its logged advantages."""
    names = preset.reward_components(log.source.schema, log.options)
    fitting: set[tuple[str, ...]] = set()
    for columns in _column_sets(names, options):
        with_columns = replace(options, reward_columns=columns)
        settings = preset.settings(log.source.schema.names, with_columns)
        tried = trials(settings, preset.convention)
        read = read_rows(log, tried, columns)
        made = preset.reward_of({c: read.rows.named[c] for c in columns}, with_columns)
        for trial in tried:
            if needs_engine(trial.params):
                continue
            rows = read.rows
            # the reward made from the columns, unless the setting reads them itself (gdpo)
            if made is not None and not named_columns(trial.params):
                rows = replace(rows, reward=made[0], unscored=made[1])
            got = row_agreement(RowsRead(rows, read.logged), trial, preset)
            if got is not None and got.reproduces:
                fitting.add(tuple(columns))
    return fitting


def settle(preset: presets.Preset, options: presets.PresetOptions, open_with: Opener) -> Log:
    """The log opened with what the preset's dump leaves out filled in from its logged
    advantages (TRL: ``--group-size`` and ``--reward-columns``); the log as ``options`` open it
    when nothing is left out. Refuses, naming the options only the user knows, while the
    advantages do not tell and one of them is missing; refuses a group size the user gave
    that they contradict, naming the one they fit."""
    log = open_with(options)
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
            "with `group_size`"
        )
        raise UsageError(msg)
    given = options.group_size
    ungrouped = log if given is None else open_with(replace(options, group_size=None))
    sizes = preset.group_sizes(ungrouped)
    if given is not None and given not in sizes:
        sizes.append(given)
    found: dict[int, set[tuple[str, ...]]] = {}
    opened: dict[int, Log] = {}
    for size in sizes:
        opened[size] = grouped = (
            log if size == given else open_with(replace(options, group_size=size))
        )
        if column_sets := _search(preset, grouped, options):
            found[size] = column_sets
    if given is not None:
        _refuse_contradicted(preset, log, given, found, opened)
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
            "columns with `reward_columns`"
        )
        raise UsageError(msg)
    settled = replace(options, group_size=size, reward_columns=list(fitting[0]))
    if settled == options:
        return log
    log = open_with(settled)
    told = [f"`group_size={size}`"] if given is None else []
    if options.reward_columns is None:
        told.append(f"`reward_columns` {','.join(fitting[0])}")
    log.settled = f"{' '.join(told)} (found from {preset.framework}'s logged advantages)"
    return log


def _refuse_unsettled(
    preset: presets.Preset, log: Log, fits: list[int], given: int | None, weighed: bool
) -> None:
    """Refuse a log whose logged advantages fit several group sizes, or none with the reward
    columns weighted alike, naming the options the user has not given (bare: only they know
    TRL's num_generations and reward_weights)."""
    if fits:
        told = f"fit `group_size` {' and '.join(map(str, fits))}"
        missing = ["`group_size`"]
    else:
        alike = "" if weighed else " with its reward columns weighted alike"
        told = (
            f"fit no group size{alike}" if given is None else f"do not fit groups of {given}{alike}"
        )
        known = {"`group_size`": given is not None, "`reward_weights`": weighed}
        missing = [option for option, have in known.items() if not have]
    msg = (
        f"{log.files}: {preset.framework}'s dump holds neither num_generations nor "
        f"reward_weights, and its logged advantages {told}. Hint: give {' and '.join(missing)}"
    )
    raise UsageError(msg)


def _refuse_contradicted(
    preset: presets.Preset,
    log: Log,
    given: int,
    found: dict[int, set[tuple[str, ...]]],
    opened: dict[int, Log],
) -> None:
    """A group size the user gave that the logged advantages contradict: they fit another
    size and not it, or fit both but it reads more rows as something else (evaluation rows,
    a cut group) than the other does."""
    fitting = sorted(found, key=lambda s: (opened[s].set_aside, s != given))
    if not fitting or fitting[0] == given:
        return
    best = fitting[0]
    aside = log.set_aside
    if given in found and aside <= opened[best].set_aside:
        return
    why = (
        f"{aside} of its rows are not whole groups of {given} (read as evaluation rows or a "
        "cut group)"
        if given in found
        else f"its logged advantages do not fit groups of {given}"
    )
    msg = (
        f"`group_size={given}`: {log.files}: {why}, and {preset.framework}'s logged "
        f"advantages fit `group_size={best}`. Hint: `group_size={best}`"
    )
    raise ContradictsLog(msg)
