"""The audit: zero-variance, near-tie and singleton accounting of one log, from its per-row
columns and one validating pass that counts each row's tokens and action tokens (which
``schema`` and the Ray engine use too).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from advcli import progress
from advcli.core import group as G
from advcli.core import steps as S
from advcli.core.audit import AuditReport, audit_steps
from advcli.core.audit import audit as audit_groups
from advcli.errors import (
    SchemaError,
    UsageError,
    columns_found,
)
from advcli.io.rollouts import (
    Rows,
    extract_rows,
    needs_ids,
    row_columns,
)
from advcli.io.schema import Roles
from advcli.io.sources import (
    LogSource,
    prefetch,
)
from advcli.io.tokens import extract_tokens, token_columns
from advcli.lazy_imports import np, pa
from advcli.methods import steps
from advcli.run.logs import BATCH_ROWS, Log, group_warnings


class CountTokens(Protocol):
    """How the tokens of a log are counted (:func:`token_counts` over it, or over its parts)."""

    def __call__(
        self, source: LogSource, roles: Roles, *, ids: bool = True, within: int | None = None
    ) -> TokenCounts: ...


@dataclass(frozen=True)
class TokenCounts:
    """Per row: its tokens, its action tokens, and its action tokens among its first
    ``within`` tokens (all of them without ``within``)."""

    tokens: np.ndarray
    actions: np.ndarray
    actions_within: np.ndarray


def token_counts(
    source: LogSource,
    roles: Roles,
    *,
    values: bool = False,
    ids: bool = True,
    within: int | None = None,
    batch_rows: int = BATCH_ROWS,
) -> TokenCounts:
    """Token and action counts of every row, from one validating pass over the token columns
    (``values``: the critic values too, if the log has them; ``ids=False``: not the token ids,
    where a later pass checks them and an action mask gives the lengths, see
    :func:`~advcli.io.rollouts.needs_ids`)."""
    n_rows = source.n_rows
    tokens, actions, actions_within = (np.zeros(n_rows, dtype=np.int64) for _ in range(3))
    values = values and roles["values"] is not None
    ids = ids or needs_ids(roles)
    done = 0
    columns = token_columns(roles, values=values, ids=ids)
    for row0, table in prefetch(source.batches(columns, batch_rows)):
        tok = extract_tokens(table, roles, source.sources, row0, values=values, ids=ids)
        starts, ends = tok.offsets[:-1], tok.offsets[1:]
        before = np.zeros(len(tok.mask) + 1, dtype=np.int64)  # action tokens before each token
        np.cumsum(tok.mask, out=before[1:])
        at = slice(row0, row0 + len(starts))
        tokens[at] = ends - starts
        actions[at] = before[ends] - before[starts]
        cut = ends if within is None else np.minimum(ends, starts + within)
        actions_within[at] = before[cut] - before[starts]
        done += int(tok.offsets[-1])
        progress.advance(at.stop, done)
    return TokenCounts(tokens, actions, actions_within)


@dataclass(frozen=True)
class Audit:
    """What ``advcli audit`` found: the report, and the groups behind its counts."""

    report: AuditReport
    files: list[str]
    rows: Rows
    stats: G.GroupStats
    warnings: list[str]
    action_tokens: np.ndarray | None = None  # per rollout (None: the log has no token ids)
    sections: dict[str, Any] = field(default_factory=dict)  # the health sections by name
    # (:mod:`advcli.run.health`): each a dict, or a line saying which column it lacks

    def prompt_ids(self, kind: str) -> list[Any]:
        """The prompt ids of the ``zero-variance`` or ``singleton`` groups, in order of first
        appearance."""
        flags = {"zero-variance": self.stats.zero_variance, "singleton": self.stats.singleton}
        if kind not in flags:
            msg = f"expected zero-variance or singleton, saw {kind!r}"
            raise UsageError(msg)
        assert self.rows.group_keys is not None
        keys: list[Any] = self.rows.group_keys.take(
            pa.array(np.flatnonzero(flags[kind]))
        ).to_pylist()
        return keys

    def as_dict(self) -> dict[str, Any]:
        """The report as ``audit --json`` prints it; without token ids the token shares are
        left out, and ``token_shares`` says why."""
        out = {k: v for k, v in self.report.__dict__.items() if v is not None}
        if self.report.action_tokens is None:
            out["token_shares"] = "omitted: the log has no token ids"
        return out | {"files": self.files, "warnings": self.warnings} | self.sections


def step_signal(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Each step's return (γ = 1) and anchor-state group, as ``gigpo``'s defaults make them
    (verl-agent: equal states within the episode group)."""
    assert rows.group_codes is not None
    rewards = steps.step_rewards(rows)
    returns = S.step_returns(rewards, rows.rollout_codes, rows.segment_rank, 1.0)
    return returns, S.anchor_groups(rows.group_codes, rows.labels["state"], within=True)


def audit_rows(log: Log) -> Rows:
    """The audited log's per-row columns, validated (its prompt ids and rewards required)."""
    log.trust_reward()
    source, roles = log.source, log.roles
    if roles["prompt_id"] is None and log.looks_like is None:
        msg = (
            f"{log.files}: no 'prompt_id' column, so no groups to audit. "
            f"{columns_found(source.schema.names)}. "
            "Hint: name the group key's column with `col`"
        )
        raise SchemaError(msg)
    log.require({"prompt_id", "reward"}, what="audit")
    return extract_rows(source.columns(row_columns(roles)), roles, source.sources)


def audit_log(
    log: Log,
    *,
    tol: float = G.ZERO_VARIANCE_TOL,
    near_tie: float | None = None,
    batch_rows: int = BATCH_ROWS,
    count: CountTokens | None = None,
    rows: Rows | None = None,
    counts: TokenCounts | None = None,
) -> Audit:
    """The audit of an opened log (what ``audit`` and ``report`` share). ``rows``: its
    per-row columns where read already (:func:`audit_rows`); ``counts``: its token counts where
    another pass made them; else ``count`` counts them (default: here, :func:`token_counts`)."""
    source, roles = log.source, log.roles
    rows = rows if rows is not None else audit_rows(log)
    assert rows.group_keys is not None
    action_tokens = None
    if roles["input_ids"] is not None:
        if counts is None:
            counts = (count or partial(token_counts, batch_rows=batch_rows))(source, roles)
        action_tokens = np.bincount(
            rows.rollout_codes, weights=counts.actions, minlength=rows.n_rollouts
        )
    rewards = rows.rollout_rewards()
    codes = rows.rollout_groups()
    stats = G.group_stats(rewards, codes, len(rows.group_keys), ddof=0, tol=tol)
    report = audit_groups(rewards, codes, stats, action_tokens, near_tie=near_tie)
    if "state" in rows.labels:
        report = replace(report, **audit_steps(*step_signal(rows), tol))
    warnings = [*log.warnings, *group_warnings(log, rows)]
    return Audit(report, source.sources.files, rows, stats, warnings, action_tokens)
