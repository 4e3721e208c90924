"""The audit's health sections (staleness, lengths, entropy, advisories, and the place of the
mismatch's), from the audited log's per-row columns and, where a section needs its tokens, one
streamed pass (the entropies; a method's advantages for the staleness by lag)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advcli import progress
from advcli.core import health as H
from advcli.io.rollouts import needs_ids
from advcli.io.sources import prefetch
from advcli.io.tokens import extract_tokens, token_columns
from advcli.lazy_imports import np, pa, pc
from advcli.run.accounting import Audit
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
        step=per_rollout(row_numbers(log, "step"), codes, n, np.fmax),
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


def entropies(found: Audit, log: Log, threshold: float, batch_rows: int) -> Entropies:
    """One streamed pass over the entropies: each row's sums, gathered per rollout."""
    roles, source = log.roles, log.source
    n_rows = found.rows.n_rows
    total, tokens, high = (np.zeros(n_rows) for _ in range(3))
    ids = needs_ids(roles)
    columns = token_columns(roles, values=False, extra=("entropies",), ids=ids)
    for row0, table in prefetch(source.batches(columns, batch_rows)):
        tok = extract_tokens(
            table, roles, source.sources, row0, values=False, extra=("entropies",), ids=ids
        )
        e = np.where(tok.mask, tok.extra["entropies"].astype(np.float64), 0.0)
        at = slice(row0, row0 + len(tok.offsets) - 1)
        for out, flat in ((total, e), (tokens, tok.mask), (high, tok.mask & (e > threshold))):
            before = np.r_[0.0, np.cumsum(flat, dtype=np.float64)]
            out[at] = before[tok.offsets[1:]] - before[tok.offsets[:-1]]
        progress.advance(at.stop, int(tok.offsets[-1]))
    codes, n = found.rows.rollout_codes, found.rows.n_rollouts
    return Entropies(*(np.bincount(codes, weights=x, minlength=n) for x in (total, tokens, high)))


def advantages(run: Run, found: Audit) -> np.ndarray:
    """Each rollout's advantage as the method gives it: the mean over its action tokens (a
    log without token ids: the mean of its rows'), NaN where it has none."""
    codes, n = found.rows.rollout_codes, found.rows.n_rollouts
    if not run.has_tokens:
        per_row = run.plan.columns["advantage"].astype(np.float64)
        weights = np.ones(len(per_row))
    else:
        per_row, weights = np.zeros(found.rows.n_rows), np.zeros(found.rows.n_rows)
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


MISSING_TRAINER = "omitted: the log has no trainer log-probs (role `trainer_logprobs`)"


def sections(
    found: Audit,
    log: Log,
    *,
    plan: Callable[[], Run],
    entropy_threshold: float = ENTROPY_THRESHOLD,
    by_step: bool = False,
    batch_rows: int,
) -> dict[str, Any]:
    """The health sections of an audited log, as ``audit --json`` prints them: each a dict,
    or a line saying which column it lacks; ``plan`` runs the method whose advantages the
    staleness splits by lag (planned only where the log has versions)."""
    each = gathered(found, log)
    rows = found.rows
    reward, codes = rows.rollout_rewards(), rows.rollout_groups()
    n_groups = len(found.stats.size)
    out: dict[str, Any] = {}
    stepped = np.isfinite(each.step)
    steps = np.unique(each.step[stepped]) if by_step else np.zeros(0)
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
        with progress.stage("the method's advantages, for the staleness by lag"):
            advantage = advantages(plan(), found)
        lag = each.step - each.version
        mixed = each.last_version > each.version if each.last_version is not None else None

        def stale(at: np.ndarray) -> dict[str, Any]:
            return H.staleness(lag[at].astype(np.int64), mixed[at] if mixed is not None else None,
                               reward[at], each.length[at] if each.length is not None else None,
                               advantage[at], codes[at], n_groups)  # fmt: skip

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

    entropy_means: list[float] | None = None
    if log.roles["entropies"] is None:
        out["entropy"] = "omitted: the log has no entropies (role `entropies`)"
    else:
        with progress.stage("reading the entropies"):
            ent = entropies(found, log, entropy_threshold, batch_rows)

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

    if log.roles["trainer_logprobs"] is None:  # with it, the mismatch section (a later part)
        out["mismatch"] = MISSING_TRAINER

    lengths_ = out["lengths"]
    staleness_ = out["staleness"]
    out["advisories"] = H.advisories(
        found.report.zero_variance_rollout_share,
        lengths_.get("truncated_share") if isinstance(lengths_, dict) else None,
        staleness_["mean_lag"] if isinstance(staleness_, dict) else None,
        entropy_means,
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
