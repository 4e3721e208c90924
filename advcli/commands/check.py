"""``advcli check``: a framework's logged advantages recomputed with advcli's and compared,
row by row (TRL's per-row ``advantage``) or token by token (NeMo-RL's and prime-rl's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advcli import methods
from advcli.commands import fields
from advcli.errors import AdvantagesDiffer, ContradictsLog, DataError, UsageError
from advcli.io.arrow import flat_list
from advcli.lazy_imports import np
from advcli.params import Range, check_fields, command_options, option, takes_options
from advcli.presets import PresetOptions
from advcli.presets.base import non_finite
from advcli.results import CheckResult
from advcli.run import jobs, reproduce
from advcli.run.logs import (
    BATCH_ROWS,
    LogPaths,
    input_paths,
)


@dataclass(frozen=True)
class CheckCommand:
    """The options of ``advcli check``: its flags, and the keywords of :func:`check`."""

    from_: str | None = fields.from_()
    method: str | None = fields.method("Default: the framework's own (grpo).")
    convention: str | None = fields.convention(
        "Default: the framework's own (--from trl: trl, nemo-rl, prime-rl)."
    )
    tol: float | None = field(
        default=None,
        metadata=option(
            "Largest absolute difference that counts as the same. Default: 1e-5, or 5e-5 where "
            "the logged advantages have 4 decimals.",
            range=Range(0),
        ),
    )
    col: list[str] | None = fields.col()
    preset_options: PresetOptions | None = fields.preset_options()
    worst: int = 5  # the rows that differ most, listed
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the result

    def __post_init__(self) -> None:
        check_fields(self)


@takes_options(CheckCommand, params=True)
def check(inputs: LogPaths, **keywords: Any) -> CheckResult:
    """``advcli check``: recompute the advantages a framework logged with its own (TRL's
    ``advantage``, NeMo-RL's and prime-rl's per-token ``advantages``) and compare them.

    ``method`` and ``convention`` default to the framework's own (``grpo`` under its
    convention). ``ok`` is False when a row differs by more than ``tol`` (absolute; default
    1e-5, or 5e-5 where the logged advantages have 4 decimals: a dump that rounds them), or
    when an option the user gave contradicts the logged advantages. A row without a logged
    value (null: prime-rl's trace not shipped yet) is not compared, and counted; one that logs
    a NaN or an infinity differs, said with its rollout. The keywords are
    :class:`CheckCommand`'s (``from_`` needed), then the method's parameters.
    """
    options, params = command_options(CheckCommand, "check", keywords, methods.PARAMETERS)
    from_, preset_options, method = options.from_, options.preset_options, options.method
    convention, tol, col, worst = options.convention, options.tol, options.col, options.worst
    batch_rows = options.batch_rows
    if from_ is None:
        msg = (
            "check compares with a framework's own advantages: add `from_='trl'` "
            "(or nemo-rl, prime-rl)"
        )
        raise UsageError(msg)
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   method=method or "grpo", convention=convention, params=params,
                   batch_rows=batch_rows)  # fmt: skip
    chosen = job.reading.preset
    assert chosen is not None
    try:
        log = job.open()
    except ContradictsLog as exc:  # an option that contradicts the logged advantages
        raise AdvantagesDiffer(str(exc)) from None
    names = log.source.schema.names
    per_token = "source_advantages" in names
    if not per_token and "source_advantage" not in names:
        msg = (
            f"{log.files}: no advantages of {chosen.framework}'s own to check. Hint: TRL, "
            "NeMo-RL and prime-rl dumps carry them (`from_='trl'`, nemo-rl, prime-rl)"
        )
        raise DataError(msg)
    run = job.plan(log)
    p = run.params
    if per_token and not run.has_tokens:
        raise DataError(f"{log.files}: per-token advantages but no token ids to compare them on")
    diffs, logged, ours, prompts, rollouts, have = [], [], [], [], [], []
    no_number, no_number_at = [], []  # per row: whether it logs a NaN or an infinity; which
    rounded = True  # every logged value has 4 decimals
    with run.final_pass("comparing"):
        for batch in run.annotated():
            t = batch.table
            if per_token:
                theirs, offsets = flat_list(t.column("source_advantages"))
                mine = flat_list(t.column("advantages"))[0]
                b = mine.to_numpy(zero_copy_only=False).astype(np.float64)
            else:
                theirs = t.column("source_advantage")
                b = t.column("advantage").to_numpy().astype(np.float64)
                offsets = np.arange(len(b) + 1)
            a = theirs.to_numpy(zero_copy_only=False).astype(np.float64)
            unlogged = theirs.is_null().to_numpy(zero_copy_only=False)  # not compared
            strange = ~unlogged & ~np.isfinite(a)  # a NaN or an infinity logged: no number
            finite = ~unlogged & ~strange
            if finite.any():
                rounded = rounded and reproduce.on_grid(a[finite])
            d = np.abs(a - b)
            d[~finite] = 0.0
            d[np.isnan(d)] = np.inf
            rows_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            have.append(np.bincount(rows_of[~unlogged], minlength=len(offsets) - 1) > 0)
            flagged, flagged_value = _first_per_row(strange, offsets, a)
            no_number.append(flagged)
            no_number_at.append(flagged_value)
            at = _row_argmax(d, offsets)  # each row's worst token (or the row itself)
            diffs.append(np.where(at >= 0, d[np.maximum(at, 0)], 0.0))
            logged.append(np.where(at >= 0, a[np.maximum(at, 0)], np.nan))
            ours.append(np.where(at >= 0, b[np.maximum(at, 0)], np.nan))
            prompts.append(t.column(log.roles.column("prompt_id")).to_pylist())
            rollouts.append(t.column(log.roles.column("rollout_id")).to_pylist())
    compared = np.concatenate(have)
    diff = np.concatenate(diffs)[compared]
    prompt_ids = _compared(prompts, compared)
    warnings = list(run.warnings)
    if tol is None:  # looser only where rounding to 4 decimals makes the difference
        tol = reproduce.tolerance(rounded and bool(len(diff)), diff)
        if tol != reproduce.TOL:
            warnings.append(f"the logged advantages have 4 decimals: compared to {tol:g}")
    if not compared.all():
        warnings.append(
            f"{int((~compared).sum())} row(s) have no logged advantage ({chosen.framework} had "
            "not shipped them, or left them out): not compared"
        )
    unread = np.concatenate(no_number)[compared]
    beyond = (diff > tol) | unread
    order = np.argsort(-diff, kind="stable")[: min(worst, int((diff > tol).sum()))]
    rollout_ids = _compared(rollouts, compared)
    if unread.any():
        first = int(np.argmax(unread))
        value = float(np.concatenate(no_number_at)[compared][first])
        warnings.append(
            f"{int(unread.sum())} row(s) log an advantage that is no number, counted as "
            f"differing: the first, rollout {rollout_ids[first]} of prompt {prompt_ids[first]}, "
            f"logs {non_finite(value)}"
        )
    logged_at, ours_at = np.concatenate(logged)[compared], np.concatenate(ours)[compared]
    return CheckResult(
        method=p.method,
        convention=p.convention,
        compared="per token" if per_token else "per row",
        rows=len(diff),
        tol=tol,
        max_abs_difference=float(diff.max()) if len(diff) else 0.0,
        rows_beyond_tol=int(beyond.sum()),
        groups_beyond_tol=len({prompt_ids[i] for i in np.flatnonzero(beyond)}),
        worst=[
            {
                "prompt_id": prompt_ids[i],
                "rollout_id": rollout_ids[i],
                "logged": float(logged_at[i]),
                "recomputed": float(ours_at[i]),
                "difference": float(diff[i]),
            }
            for i in order
        ],
        ok=not beyond.any(),
        reproduced_by=run.reproduced_by,
        found=run.settled or None,
        warnings=warnings,
    )


def _compared(parts: list[list[Any]], compared: np.ndarray) -> list[Any]:
    """The values of the compared rows, from the batches' lists."""
    return [value for value, kept in zip((v for part in parts for v in part), compared,
                                         strict=True) if kept]  # fmt: skip


def _first_per_row(
    flags: np.ndarray, offsets: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row (``offsets``): whether one of its ``flags`` is set, and the value at the first
    (0 where none is)."""
    flagged = np.zeros(len(offsets) - 1, dtype=bool)
    first = np.zeros(len(offsets) - 1)
    hits = np.flatnonzero(flags)
    rows, at = np.unique(np.searchsorted(offsets, hits, side="right") - 1, return_index=True)
    flagged[rows], first[rows] = True, values[hits[at]]
    return flagged, first


def _row_argmax(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row (``offsets``), the flat index of its largest value; -1 for an empty row."""
    n_rows = len(offsets) - 1
    out = np.full(n_rows, -1, dtype=np.int64)
    if not len(values):
        return out
    rows = np.repeat(np.arange(n_rows), np.diff(offsets))
    order = np.lexsort((-values, rows))  # per row, largest first
    first = np.r_[True, rows[order][1:] != rows[order][:-1]]
    out[rows[order][first]] = order[first]
    return out
