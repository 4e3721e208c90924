"""``advcli prompts``: every prompt's history across a run, one record per prompt (matched across
steps and files by its text, else its tokens, else its id), filtered into a curriculum that
``annotate`` and ``shard`` take back (``--keep-prompts`` / ``--drop-prompts``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from advcli import progress
from advcli.commands import fields
from advcli.core.prompts import PromptStats, default_success, prompt_stats, selected
from advcli.errors import DataError, UsageError
from advcli.io.outputs import atomic_path, check_output, output_format
from advcli.io.writers import write_bytes
from advcli.lazy_imports import np, pa, pq
from advcli.params import Range, check_fields, command_options, option, takes_options
from advcli.presets import PresetOptions
from advcli.results import PromptsResult
from advcli.run import jobs
from advcli.run.accounting import audit_rows
from advcli.run.logs import BATCH_ROWS, Log, LogPaths, input_paths
from advcli.run.prompts import (
    BASES,
    first_rows,
    group_identity,
    group_prompt_tokens,
    log_bases,
    prompt_text_column,
    row_steps,
    rows_of_column,
)

SORTS = ("pass_rate", "mean_reward", "reward_variance", "trend", "rollouts", "steps_seen")
"""What ``--sort`` orders the prompts by, the highest first."""


@dataclass(frozen=True)
class PromptsCommand:
    """The options of ``advcli prompts``: its flags, and the keywords of :func:`prompts`; how
    many rows the terminal shows (``--top``) is the CLI's."""

    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    success: float | None = field(
        default=None,
        metadata=option(
            "A rollout passes when its reward >= this (default: the higher reward, where the "
            "rewards take two values)."
        ),
    )
    band: str | None = field(
        default=None,
        metadata=option("LO,HI: only the prompts whose pass rate is within (inclusive)."),
    )
    never_solved: bool = field(
        default=False, metadata=option("Only the prompts no rollout passed.")
    )
    always_solved: bool = field(
        default=False, metadata=option("Only the prompts solved at every step they were seen.")
    )
    forgotten: bool = field(
        default=False,
        metadata=option("Only the prompts solved at a step and failed at a later one."),
    )
    min_steps: int = field(
        default=0, metadata=option("Only the prompts seen at K steps or more.", range=Range(0))
    )
    sort: str | None = field(
        default=None,
        metadata=option(
            f"Order the prompts by {', '.join(SORTS)}, the highest first (default: as first seen)."
        ),
    )
    out: str | os.PathLike[str] | None = field(
        default=None,
        metadata=option(
            "Write the prompts selected to this .parquet or .jsonl file (--keep-prompts and "
            "--drop-prompts of annotate and shard read it).",
            flag="--out",
            short="-o",
        ),
    )
    force: bool = fields.force()
    tol: float = fields.zero_variance_tol()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the result

    def __post_init__(self) -> None:
        check_fields(self)
        if self.sort is not None and self.sort not in SORTS:
            raise UsageError(f"`sort` {self.sort!r}: expected one of {', '.join(SORTS)}")
        pass_band(self.band)


def pass_band(band: str | None) -> tuple[float, float] | None:
    """``band='0.2,0.8'`` as two pass rates, LO ≤ HI within [0, 1]."""
    if band is None:
        return None
    try:
        lo, hi = (float(x) for x in band.split(","))
    except ValueError:
        raise UsageError(f"`band={band!r}`: give two pass rates, as `band='0.2,0.8'`") from None
    if not (0 <= lo <= 1 and 0 <= hi <= 1):
        raise UsageError(f"`band={band!r}`: pass rates are within [0, 1]")
    if lo > hi:
        raise UsageError(f"`band={band!r}`: LO is above HI")
    return lo, hi


@takes_options(PromptsCommand, params=False)
def prompts(inputs: LogPaths, **keywords: Any) -> PromptsResult:
    """``advcli prompts``: one record per prompt of the log (see
    :mod:`advcli.core.prompts` for each figure), those the filters select (``band``,
    ``never_solved``, ``always_solved``, ``forgotten``, ``min_steps``: all of those given),
    ordered by ``sort``; ``out`` writes them to a Parquet or JSONL file. The keywords are
    :class:`PromptsCommand`'s."""
    options, _ = command_options(PromptsCommand, "prompts", keywords)
    job = jobs.job(input_paths(inputs), col=options.col, preset=options.from_,
                   preset_options=options.preset_options,
                   batch_rows=options.batch_rows)  # fmt: skip
    out = None if options.out is None else os.fspath(options.out)
    if out is not None:
        if not out.lower().endswith((".parquet", ".pq", ".jsonl", ".ndjson")):
            raise UsageError(f"`out={out!r}`: give a .parquet or .jsonl file")
        check_output(out, job.files, force=options.force)
    log = job.open()
    with progress.stage("reading the prompts"):
        table, stats, found = _prompt_table(log, options)
    chosen = selected(stats, band=pass_band(options.band), never_solved=options.never_solved,
                      always_solved=options.always_solved, forgotten=options.forgotten,
                      min_steps=options.min_steps)  # fmt: skip
    at = np.flatnonzero(chosen)
    if options.sort is not None:
        value = np.nan_to_num(getattr(stats, options.sort)[at].astype(np.float64), nan=-np.inf)
        at = at[np.argsort(-value, kind="stable")]
    table = table.take(pa.array(at))
    if out is not None:
        _write(table, out, output_format(out, None), force=options.force)
    return PromptsResult(
        files=log.sources.files,
        matched_by=BASES[found["basis"]],
        success=found["success"],
        steps=found["steps"],
        prompts=len(chosen),
        selected=len(at),
        records=_records(table),
        out=out,
        warnings=log.warnings,
    )


def _prompt_table(
    log: Log, options: PromptsCommand
) -> tuple[pa.Table, PromptStats, dict[str, Any]]:
    """Every prompt of the log as a table (in order of first appearance), its statistics,
    and how they were found (the basis, the success threshold, the steps). A rollout without
    a reward (``unscored``) neither passes nor fails: it is left out."""
    rows = audit_rows(log)
    assert rows.group_codes is not None and rows.group_keys is not None
    basis = next(b for b in BASES if b in log_bases(log))
    tokens = group_prompt_tokens(log, rows, options.batch_rows) if basis == "tokens" else None
    identity = (
        tokens.hashes if tokens is not None
        else group_identity(log, rows, basis, options.batch_rows)
    )  # fmt: skip
    unscored = rows.unscored_rollouts()
    scored = np.ones(rows.n_rollouts, dtype=bool) if unscored is None else ~unscored
    rewards, groups = rows.rollout_rewards()[scored], rows.rollout_groups()[scored]
    success = options.success if options.success is not None else _default_success(log, rewards)
    step_of_row = row_steps(log)
    step = (
        np.zeros(len(rewards)) if step_of_row is None
        else step_of_row[rows.last_segment_row()][scored]
    )  # fmt: skip
    # prompts numbered in order of first appearance: the first row of any of their groups
    first = first_rows(rows.group_codes, len(rows.group_keys))
    keys, prompt_of_group = np.unique(identity, return_inverse=True)
    earliest = np.full(len(keys), np.iinfo(np.int64).max)
    np.minimum.at(earliest, prompt_of_group.reshape(-1), first)
    order = np.argsort(earliest, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    prompt_of_group = rank[prompt_of_group.reshape(-1)]
    group_of_prompt = rows.group_codes[earliest[order]]  # the group of its first row
    stats = prompt_stats(prompt_of_group[groups], step, rewards, success, len(keys), options.tol)
    texts = _texts(log, earliest[order], options.batch_rows)
    table = _table(texts, rows.group_keys.take(pa.array(group_of_prompt)), stats)
    if tokens is not None:
        table = table.add_column(2, "prompt_tokens", tokens.take(group_of_prompt).column())
    steps = np.unique(stats.cells.step)
    found = {"basis": basis, "success": success, "steps": [_step(s) for s in steps]}
    return table, stats, found


def _default_success(log: Log, rewards: np.ndarray) -> float:
    """The higher reward where the rewards take two values; refused otherwise."""
    success = default_success(rewards)
    if success is None:
        values = np.unique(rewards)
        shown = ", ".join(f"{x:g}" for x in values[:5]) + (" …" if len(values) > 5 else "")
        msg = (
            f"{log.files}: the rewards take {len(values)} value{'s' * (len(values) != 1)} "
            f"({shown}), so no rollout passes or fails by default. Hint: give the reward a "
            "rollout passes at, as `success=1`"
        )
        raise DataError(msg)
    return success


def _texts(log: Log, at_rows: np.ndarray, batch_rows: int) -> pa.Array:
    """The prompt text at each of the rows ``at_rows`` (null without a text column)."""
    column = prompt_text_column(log)
    if column is None:
        return pa.nulls(len(at_rows), pa.large_string())
    order = np.argsort(at_rows, kind="stable")
    parts, positions = [], []
    for at, values in rows_of_column(log, column, at_rows[order], batch_rows):
        parts.append(values.cast(pa.large_string()))
        positions.append(order[at])
    found = pa.concat_arrays(parts) if parts else pa.nulls(0, pa.large_string())
    where = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
    back = np.empty(len(at_rows), dtype=np.int64)
    back[where] = np.arange(len(where))
    return found.take(pa.array(back))


def _step(x: float) -> int | float | None:
    """A step as JSON shows it: a whole number as an int; None for no step (NaN)."""
    if isinstance(x, int):
        return x
    x = float(x)
    if x != x:  # NaN
        return None
    return int(x) if x.is_integer() else x


def _nan_as_null(x: np.ndarray) -> pa.Array:
    return pa.array(x, mask=np.isnan(x))


def _by_step(stats: PromptStats, values: np.ndarray) -> pa.Array:
    """A map per prompt: step -> ``values`` of its cells (integer steps as int64)."""
    cells = stats.cells
    offsets = np.zeros(len(stats.rollouts) + 1, dtype=np.int32)
    np.cumsum(stats.steps_seen, out=offsets[1:])
    finite = cells.step[np.isfinite(cells.step)]
    whole = bool(np.all(finite == np.round(finite)))
    keys = pa.array(cells.step.astype(np.int64) if whole else cells.step)
    return pa.MapArray.from_arrays(pa.array(offsets), keys, pa.array(values))


def _table(texts: pa.Array, ids: pa.Array, stats: PromptStats) -> pa.Table:
    """One row per prompt: its text and id, then its figures (null: none)."""
    cells = stats.cells
    return pa.table({
        "prompt": texts,
        "prompt_id": ids,
        "steps_seen": stats.steps_seen,
        "rollouts": stats.rollouts,
        "pass_rate": stats.pass_rate,
        "mean_reward": stats.mean_reward,
        "reward_variance": stats.reward_variance,
        "trend": _nan_as_null(stats.trend),
        "first_solved_step": _nan_as_null(stats.first_solved_step),
        "last_solved_step": _nan_as_null(stats.last_solved_step),
        "forgotten": stats.forgotten,
        "zero_variance_steps": stats.zero_variance_steps,
        "pass_rate_by_step": _by_step(stats, cells.pass_rate),
        "mean_reward_by_step": _by_step(stats, cells.mean_reward),
        "rollouts_by_step": _by_step(stats, cells.rollouts),
    })  # fmt: skip


MAPS = ("pass_rate_by_step", "mean_reward_by_step", "rollouts_by_step")
STEPS = ("first_solved_step", "last_solved_step")


def _records(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as JSON shows them: maps as objects, steps as whole numbers."""
    records: list[dict[str, Any]] = table.to_pylist()
    for record in records:
        for name in MAPS:
            record[name] = {_step(k): v for k, v in record[name]}
        for name in STEPS:
            if record[name] is not None:
                record[name] = _step(record[name])
    return records


def _write(table: pa.Table, out: str, fmt: str, *, force: bool) -> None:
    """The prompts as ``out``, written to a temporary name and renamed into place."""
    if fmt == "parquet":
        with atomic_path(out, force=force) as tmp:
            pq.write_table(table, tmp)
        return
    option = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
    write_bytes(out, b"".join(orjson.dumps(r, option=option) for r in _records(table)),
                force=force)  # fmt: skip
