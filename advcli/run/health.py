"""The audit's health sections (staleness, lengths, entropy, mismatch, advisories), from the
audited log's per-row columns and one streamed pass over the per-token columns the sections
read (the entropies, the two log-prob streams), with a method's advantages where a section
splits by them (the staleness by lag, the mismatch's masked tokens by sign)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, cast

from advcli import progress
from advcli.core import health as H
from advcli.core.correction import Correction
from advcli.core.mismatch import Convention, MismatchBatch, MismatchStats
from advcli.core.ragged import lengths
from advcli.io.rollouts import Rows
from advcli.io.sources import prefetch
from advcli.io.tokens import Tokens, extract_tokens, token_columns
from advcli.lazy_imports import np, pa, pc
from advcli.run.accounting import Audit, CountTokens, TokenCounts, audit_log, audit_rows
from advcli.run.correcting import STREAMS
from advcli.run.engine import Run
from advcli.run.logs import Log

ENTROPY_THRESHOLD = 0.672  # nats: the 80th percentile of token entropy in Wang et al. (2025)
TRUNCATED_STATUS = (("status", "truncated"), ("finish_reason", "length"))  # column, its value


@dataclass(frozen=True)
class PerRollout:
    """What the sections read, one entry per rollout: its step and versions (NaN: none
    logged), whether it was truncated (None: the log records no truncation, else which column
    says so), its action tokens (None: no token ids)."""

    step: np.ndarray
    version: np.ndarray
    last_version: np.ndarray | None
    truncated: np.ndarray | None
    truncated_from: str | None
    length: np.ndarray | None


def row_numbers(log: Log, role: str) -> np.ndarray | None:
    """The role's column as float64 per row (NaN where null), None where the log has none."""
    col = log.roles[role]
    if col is None:
        return None
    column = log.source.columns([col]).column(col).cast(pa.float64())
    out: np.ndarray = column.to_numpy().astype(np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def per_rollout(x: np.ndarray | None, codes: np.ndarray, n: int, ufunc: Any) -> np.ndarray:
    """``ufunc`` (np.fmax or np.fmin) of each rollout's rows' ``x`` (NaN where all are NaN)."""
    out = np.full(n, np.nan)
    if x is not None:
        ufunc.at(out, codes, x)
    return out


def truncation(log: Log) -> tuple[np.ndarray | None, str | None]:
    """Per row: whether it was truncated, from the ``truncated`` role, else a framework's
    status column (slime's ``status`` = ``truncated``, a ``finish_reason`` of ``length``);
    and the column that says so."""
    if (col := log.roles["truncated"]) is not None:
        flags = log.source.columns([col]).column(col).combine_chunks()
        return pc.fill_null(flags, False).to_numpy(zero_copy_only=False).astype(bool), col
    names = log.source.schema
    for col, value in TRUNCATED_STATUS:
        if col in names.names and pa.types.is_string(names.field(col).type):
            text = log.source.columns([col]).column(col)
            flags = pc.fill_null(pc.equal(text, value), False).combine_chunks()
            return flags.to_numpy(zero_copy_only=False).astype(bool), f"{col} = {value!r}"
    return None, None


def rollout_steps(rows: Rows, log: Log) -> np.ndarray:
    """Each rollout's step (its rows' latest; NaN: none logged)."""
    return per_rollout(row_numbers(log, "step"), rows.rollout_codes, rows.n_rollouts, np.fmax)


def gathered(found: Audit, log: Log) -> PerRollout:
    """The per-rollout columns of the sections, read from the log's per-row columns."""
    rows = found.rows
    codes, n = rows.rollout_codes, rows.n_rollouts
    version = row_numbers(log, "version")
    last = row_numbers(log, "last_version")
    flags, truncated_from = truncation(log)
    truncated = None
    if flags is not None:
        truncated = np.bincount(codes, weights=flags, minlength=n) > 0
    return PerRollout(
        step=rollout_steps(rows, log),
        version=per_rollout(version, codes, n, np.fmin),
        last_version=per_rollout(last if last is not None else version, codes, n, np.fmax)
        if last is not None or rows.segmented
        else None,
        truncated=truncated,
        truncated_from=truncated_from,
        length=found.action_tokens,
    )


@dataclass(frozen=True)
class Entropies:
    """Per rollout: the sum of its action tokens' entropies, their count, and how many are
    above the threshold."""

    total: np.ndarray
    tokens: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class MismatchPlan:
    """What the mismatch pass needs per row: its group code, its rollout's advantage sign
    (None: no correction to split) and correctness (None: the rewards do not take two
    values), and its step's index among ``steps`` (−1: none; None: not ``--by step``); the
    correction (with its framework's arithmetic) and the framework whose own metrics are
    reported."""

    group: np.ndarray
    sign: np.ndarray | None
    correct: np.ndarray | None
    step: np.ndarray | None
    steps: int
    correction: Correction | None
    convention: str | None

    def stats(self) -> MismatchStats:
        """Empty sums, gathering the convention's own (none without one)."""
        frameworks = (self.convention,) if self.convention else ()
        return MismatchStats(correction=self.correction, frameworks=frameworks)


@dataclass(frozen=True)
class TokenSums:
    """What the pass over the tokens gathered: each row's token counts, the entropies (None:
    not read), the mismatch of the whole log and of each step (None: not read)."""

    counts: TokenCounts
    entropies: Entropies | None
    mismatch: MismatchStats | None
    mismatch_by_step: list[MismatchStats]


def token_pass(
    rows: Rows, log: Log, *, threshold: float, mismatch: MismatchPlan | None, batch_rows: int
) -> TokenSums:
    """One streamed pass over the per-token columns: each row's token counts (validated as
    :func:`~advcli.run.accounting.token_counts` does, so the audit needs no pass of its own),
    its entropy sums (gathered per rollout), and the two log-prob streams folded into the
    mismatch's sums batch by batch."""
    roles, source = log.roles, log.source
    read_entropies = roles["entropies"] is not None
    extra = (("entropies",) if read_entropies else ()) + (STREAMS if mismatch else ())
    n_rows = rows.n_rows
    total, high = np.zeros(n_rows), np.zeros(n_rows)
    n_tokens, n_actions = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64)
    whole = mismatch.stats() if mismatch else None
    by_step = [mismatch.stats() for _ in range(mismatch.steps)] if (
        mismatch and mismatch.step is not None) else []  # fmt: skip
    columns = token_columns(roles, values=False, extra=extra, ids=True)
    for row0, table in prefetch(source.batches(columns, batch_rows)):
        tok = extract_tokens(table, roles, source.sources, row0, values=False, extra=extra)
        at = slice(row0, row0 + len(tok.offsets) - 1)
        n_tokens[at] = np.diff(tok.offsets)
        n_actions[at] = tok.action_counts()
        if read_entropies:
            e = np.where(tok.mask, tok.extra["entropies"].astype(np.float64), 0.0)
            for out, flat in ((total, e), (high, tok.mask & (e > threshold))):
                before = np.r_[0.0, np.cumsum(flat, dtype=np.float64)]
                out[at] = before[tok.offsets[1:]] - before[tok.offsets[:-1]]
        if mismatch and whole is not None:
            batch = mismatch_batch(tok, mismatch, at)
            whole.add(batch)
            if mismatch.step is not None:
                for i in np.unique(mismatch.step[at]).tolist():
                    if i >= 0:
                        by_step[i].add(rows_of(batch, mismatch.step[at] == i))
        progress.advance(at.stop, int(tok.offsets[-1]))
    ent = None
    if read_entropies:
        codes, n = rows.rollout_codes, rows.n_rollouts
        sums = (total, n_actions.astype(np.float64), high)
        ent = Entropies(*(np.bincount(codes, weights=x, minlength=n) for x in sums))
    return TokenSums(TokenCounts(n_tokens, n_actions, n_actions), ent, whole, by_step)


def mismatch_batch(tok: Tokens, plan: MismatchPlan, at: slice) -> MismatchBatch:
    """A batch of the pass as the mismatch's sums take it (rows ``at`` of the log)."""
    return MismatchBatch(
        trainer=tok.extra["trainer_logprobs"],
        sampler=tok.extra["logprobs"],
        action=tok.mask,
        offsets=tok.offsets,
        group=plan.group[at],
        advantage_sign=plan.sign[at] if plan.sign is not None else None,
        correct=plan.correct[at] if plan.correct is not None else None,
    )


def rows_of(batch: MismatchBatch, keep: np.ndarray) -> MismatchBatch:
    """The rows ``keep`` of a batch (no correction of its own: the stats compute it)."""
    n = lengths(batch.offsets)
    tokens = np.repeat(keep, n)
    pick = lambda x: x[keep] if x is not None else None  # noqa: E731
    return MismatchBatch(
        trainer=batch.trainer[tokens],
        sampler=batch.sampler[tokens],
        action=batch.action[tokens],
        offsets=np.concatenate(([0], np.cumsum(n[keep]))).astype(np.int64),
        group=pick(batch.group),
        advantage_sign=pick(batch.advantage_sign),
        correct=pick(batch.correct),
    )


def advantages(run: Run, rows: Rows) -> np.ndarray:
    """Each rollout's advantage as the method gives it: the mean over its action tokens (a
    log without token ids: the mean of its rows'), NaN where it has none."""
    codes, n = rows.rollout_codes, rows.n_rollouts
    if not run.has_tokens:
        per_row = run.plan.columns["advantage"].astype(np.float64)
        weights = np.ones(len(per_row))
    else:
        per_row, weights = np.zeros(rows.n_rows), np.zeros(rows.n_rows)
        for row0, _, tok, columns in run.computed():
            on_actions = np.where(tok.mask, columns["advantages"].astype(np.float64), 0.0)
            before = np.r_[0.0, np.cumsum(on_actions)]
            at = slice(row0, row0 + len(tok.offsets) - 1)
            per_row[at] = before[tok.offsets[1:]] - before[tok.offsets[:-1]]
            weights[at] = tok.action_counts()
        per_row = per_row / np.where(weights > 0, weights, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = np.bincount(codes, weights=per_row * weights, minlength=n) / (
            np.bincount(codes, weights=weights, minlength=n)
        )
    return out


def step_key(step: float) -> str:
    """A step as a JSON key: an integer's digits, else the number."""
    return str(int(step)) if float(step).is_integer() else repr(float(step))


def missing_stream(role: str) -> str:
    """The mismatch section's line where the log lacks one of its columns."""
    what = {"trainer_logprobs": "trainer log-probs", "logprobs": "sampler log-probs"}
    return f"omitted: the log has no {what.get(role, 'token ids')} (role `{role}`)"


def correctness(reward: np.ndarray, rollout_codes: np.ndarray) -> np.ndarray | None:
    """Per row: whether its rollout was correct (its reward is the log's highest) where the
    rewards take exactly two values; None otherwise (correctness undefined)."""
    values = np.unique(reward[np.isfinite(reward)])
    if len(values) != 2:
        return None
    out: np.ndarray = (reward == values[-1])[rollout_codes]
    return out


def mismatch_section(
    summed: TokenSums,
    convention: str | None,
    per_step: list[tuple[str, np.ndarray]],
    *,
    correct_known: bool,
) -> dict[str, Any]:
    """The mismatch section: advcli's figures, the convention's own metrics under its names,
    and per step the same."""

    def of(stats: MismatchStats) -> dict[str, Any]:
        figures = stats.figures()
        if "correction" in figures and not correct_known:
            figures["correction"]["masked_correct_share"] = None
        if convention is not None:
            figures["convention"] = convention
            figures["framework_metrics"] = stats.framework_metrics(cast(Convention, convention))
        return figures

    assert summed.mismatch is not None
    section = of(summed.mismatch)
    if summed.mismatch_by_step:
        keys = [key for key, _ in per_step]
        section["by_step"] = {k: of(s) for k, s in zip(keys, summed.mismatch_by_step, strict=True)}
    return section


def rollout_advantages(plan: Callable[[], Run], rows: Rows) -> Callable[[], np.ndarray]:
    """Each rollout's advantage (:func:`advantages`), planned and computed on first use only."""

    def compute() -> np.ndarray:
        with progress.stage("the method's advantages"):
            return advantages(plan(), rows)

    return cache(compute)


def step_values(step: np.ndarray, by_step: bool) -> np.ndarray:
    """The steps the sections split by (``by_step``; none otherwise), in order."""
    return np.unique(step[np.isfinite(step)]) if by_step else np.zeros(0)


def mismatch_plan(
    rows: Rows,
    log: Log,
    *,
    advantage: Callable[[], np.ndarray],
    by_step: bool,
    correction: Correction | None,
    convention: str | None,
) -> MismatchPlan | None:
    """What the mismatch pass needs per row (None: the log lacks a log-prob stream or token
    ids, :func:`missing_stream` says which)."""
    if missing_role(log) is not None:
        return None
    step = rollout_steps(rows, log)
    steps = step_values(step, by_step)
    row_step = None
    if by_step:
        row_step = np.searchsorted(steps, step)
        row_step = np.where(np.isin(step, steps), row_step, -1)[rows.rollout_codes]
    sign = np.sign(advantage())[rows.rollout_codes] if correction is not None else None
    reward, codes = rows.rollout_rewards(), rows.rollout_groups()
    return MismatchPlan(codes[rows.rollout_codes], sign, correctness(reward, rows.rollout_codes),
                        row_step, len(steps), correction, convention)  # fmt: skip


def missing_role(log: Log) -> str | None:
    """The role the mismatch section lacks (a log-prob stream, else the token ids), if any."""
    roles = log.roles
    return next((r for r in (*reversed(STREAMS), "input_ids") if roles[r] is None), None)


def audit_health(
    log: Log,
    *,
    tol: float,
    near_tie: float | None,
    plan: Callable[[], Run],
    entropy_threshold: float = ENTROPY_THRESHOLD,
    by_step: bool = False,
    correction: Correction | None = None,
    convention: str | None = None,
    batch_rows: int,
    count: CountTokens | None = None,
) -> Audit:
    """``audit``: the groups' accounting and the health sections (:func:`sections`), from the
    per-row columns and one pass over the per-token ones, which counts the tokens too
    (``count``: where no section reads a per-token column, how the tokens are counted)."""
    rows = audit_rows(log)
    advantage = rollout_advantages(plan, rows)
    mismatch = mismatch_plan(rows, log, advantage=advantage, by_step=by_step,
                             correction=correction, convention=convention)  # fmt: skip
    summed = None
    if log.roles["entropies"] is not None or mismatch is not None:
        with progress.stage("reading the per-token columns"):
            summed = token_pass(rows, log, threshold=entropy_threshold, mismatch=mismatch,
                                batch_rows=batch_rows)  # fmt: skip
    found = audit_log(log, tol=tol, near_tie=near_tie, batch_rows=batch_rows, count=count,
                      rows=rows, counts=summed.counts if summed else None)  # fmt: skip
    found_sections = sections(found, log, advantage=advantage, entropy_threshold=entropy_threshold,
                              by_step=by_step, correction=correction, convention=convention,
                              batch_rows=batch_rows, summed=summed)  # fmt: skip
    return replace(found, sections=found_sections)


def sections(
    found: Audit,
    log: Log,
    *,
    advantage: Callable[[], np.ndarray],
    entropy_threshold: float = ENTROPY_THRESHOLD,
    by_step: bool = False,
    correction: Correction | None = None,
    convention: str | None = None,
    batch_rows: int,
    summed: TokenSums | None = None,
) -> dict[str, Any]:
    """The health sections of an audited log, as ``audit --json`` prints them: each a dict,
    or a line saying which column it lacks; ``advantage``: each rollout's advantage, which the
    staleness splits by lag and the mismatch's ``correction`` by sign (computed only where one
    needs them, :func:`rollout_advantages`); ``convention``: the framework whose own mismatch
    metrics the section holds (verl, trl, nemo-rl or miles; None: none); ``summed``: the pass
    over the per-token columns where made already (:func:`audit_health`), else made here."""
    each = gathered(found, log)
    rows = found.rows
    reward, codes = rows.rollout_rewards(), rows.rollout_groups()
    n_groups = len(found.stats.size)
    out: dict[str, Any] = {}
    stepped = np.isfinite(each.step)
    steps = step_values(each.step, by_step)
    per_step = [(step_key(s), each.step == s) for s in steps.tolist()]

    def split(make: Callable[[np.ndarray], dict[str, Any]], every: np.ndarray) -> dict[str, Any]:
        section = make(every)
        if by_step:
            section["by_step"] = {key: make(every & at) for key, at in per_step}
        return section

    known = stepped & np.isfinite(each.version)
    if not known.any():
        lacks = "step" if np.isfinite(each.version).any() else "version"
        out["staleness"] = f"omitted: the log has no {lacks} column (role `{lacks}`)"
    else:
        lag = each.step - each.version
        mixed = each.last_version > each.version if each.last_version is not None else None

        def stale(at: np.ndarray) -> dict[str, Any]:
            return H.staleness(lag[at].astype(np.int64), mixed[at] if mixed is not None else None,
                               reward[at], each.length[at] if each.length is not None else None,
                               advantage()[at], codes[at], n_groups)  # fmt: skip

        out["staleness"] = split(stale, known)

    if each.length is None:
        out["lengths"] = "omitted: the log has no token ids (role `input_ids`)"
    else:
        length = each.length

        def lengths(at: np.ndarray) -> dict[str, Any]:
            cut = each.truncated[at] if each.truncated is not None else None
            return H.lengths(length[at], cut, reward[at], codes[at], n_groups)

        out["lengths"] = split(lengths, np.ones(len(length), dtype=bool))
        out["lengths"]["truncated_from"] = each.truncated_from or "no truncation column"

    missing = missing_role(log)
    if summed is None:
        planned = mismatch_plan(rows, log, advantage=advantage, by_step=by_step,
                                correction=correction, convention=convention)  # fmt: skip
        if log.roles["entropies"] is not None or planned is not None:
            with progress.stage("reading the per-token columns"):
                summed = token_pass(rows, log, threshold=entropy_threshold, mismatch=planned,
                                    batch_rows=batch_rows)  # fmt: skip
    correct_known = rows.n_rows > 0 and correctness(reward, rows.rollout_codes) is not None

    entropy_means: list[float] | None = None
    if summed is None or summed.entropies is None:
        out["entropy"] = "omitted: the log has no entropies (role `entropies`)"
    else:
        ent = summed.entropies

        def entropy(at: np.ndarray) -> dict[str, Any]:
            return H.entropy(ent.total[at], ent.tokens[at], int(ent.high[at].sum()),
                             entropy_threshold)  # fmt: skip

        whole = entropy(np.ones(rows.n_rollouts, dtype=bool))
        by = [entropy(at)["token_mean"] for _, at in per_step] if by_step else []
        if by_step:
            whole["by_step"] = dict(zip((k for k, _ in per_step), by, strict=True))
        out["entropy"] = whole
        if whole["token_mean"] is not None:
            entropy_means = [whole["token_mean"], *(m for m in by if m is not None)]

    if summed is None or summed.mismatch is None:
        out["mismatch"] = missing_stream(missing or "input_ids")
    else:
        out["mismatch"] = mismatch_section(summed, convention, per_step,
                                           correct_known=correct_known)  # fmt: skip
    mismatch_ = out["mismatch"]

    lengths_ = out["lengths"]
    staleness_ = out["staleness"]
    out["advisories"] = H.advisories(
        found.report.zero_variance_rollout_share,
        lengths_.get("truncated_share") if isinstance(lengths_, dict) else None,
        staleness_["mean_lag"] if isinstance(staleness_, dict) else None,
        entropy_means,
        mismatch_["k3"]["token_mean"] if isinstance(mismatch_, dict) else None,
        mismatch_["correction"]["masked_token_share"]
        if isinstance(mismatch_, dict) and "correction" in mismatch_
        else None,
    )
    if by_step:
        out["groups_by_step"] = groups_by_step(found, codes, per_step)
    return out


def groups_by_step(
    found: Audit, codes: np.ndarray, per_step: list[tuple[str, np.ndarray]]
) -> dict[str, dict[str, Any]]:
    """Per step, the group figures of its rollouts (a group's statistics are the log's)."""
    stats = found.stats
    out: dict[str, dict[str, Any]] = {}
    for key, at in per_step:
        c = codes[at]
        zv, single = stats.zero_variance[c], stats.singleton[c]
        out[key] = {
            "groups": len(np.unique(c)),
            "rollouts": int(at.sum()),
            "zero_variance_rollout_share": float(zv.mean()) if len(c) else 0.0,
            "no_signal_rollout_share": float((zv | single).mean()) if len(c) else 0.0,
        }
    return out
