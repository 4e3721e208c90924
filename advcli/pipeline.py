"""From logs to annotated tables: read, validate, run the chosen method, write.

This layer joins the I/O layer (``advcli.io``) and the numerical core (``advcli.core``) through
:mod:`advcli.methods`. It streams: a first pass reads only the per-row scalar columns of the
whole log; a method that needs token statistics reads the token columns it needs in further
passes; the last pass reads every column batch by batch, annotates and writes. Parquet inputs
are re-read from disk at each pass, so memory is bounded by a few batches, not by the log;
reading, computing and writing run on separate threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from advcli import __version__
from advcli import methods as M
from advcli.core import group as G
from advcli.core import temporal as T
from advcli.core.audit import AuditReport, audit
from advcli.core.conventions import WHITEN_EPS
from advcli.core.ragged import lengths, row_of
from advcli.critic.scorer import CriticOptions, CriticScorer
from advcli.errors import DataError, UsageError
from advcli.io.rollouts import (
    Rows,
    Tokens,
    extract_rows,
    extract_tokens,
    require,
    row_columns,
    token_columns,
)
from advcli.io.schema import Roles, describe_type, parse_col_mapping, resolve_roles
from advcli.io.sources import LogSource, Sources, TableSource, open_source, prefetch, read_inputs
from advcli.io.writers import TableWriter, check_output, output_format
from advcli.params import GROUP_METHODS, VALUE_METHODS, Params, resolve

Stage = Callable[[str], contextlib.AbstractContextManager]
Progress = Callable[[int, int], None]  # (rows done, tokens done)
Scorer = Callable[[int, pa.Table, Tokens], tuple[np.ndarray, dict]]

BATCH_ROWS = 512  # rows per record batch: ~1M tokens of typical rollouts


def _no_stage(_name: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


@dataclass
class Log:
    """A log read into memory: the table, where its rows came from, and its column roles."""

    table: pa.Table
    sources: Sources
    roles: Roles


def load(inputs: list[str], col: list[str] | None = None) -> Log:
    mapping = parse_col_mapping(col)
    table, sources = read_inputs(inputs, mapping)
    roles = resolve_roles(table.schema, mapping, ", ".join(sources.files))
    return Log(table, sources, roles)


def open_log(inputs: list[str], col: list[str] | None = None) -> tuple[LogSource, Roles]:
    """A log to stream (Parquet) or read once (JSONL), and its column roles."""
    mapping = parse_col_mapping(col)
    source = open_source(inputs, mapping)
    return source, resolve_roles(source.schema, mapping, ", ".join(source.sources.files))


def required_roles(method: str, has_critic: bool = False) -> set[str]:
    needs = {"reward"}
    if method in ("grpo", "rloo", "reinforce-pp-baseline"):
        needs.add("prompt_id")
    if method in VALUE_METHODS and not has_critic:
        needs.add("values")
    return needs


def list_column(flat: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A list<float32> column from flat values and offsets."""
    values = pa.array(np.asarray(flat, dtype=np.float32))
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


# --------------------------------------------------------------------------- the engine


@dataclass
class Engine:
    """One method over one log: the plan, then batches of annotated rows."""

    source: LogSource
    roles: Roles
    params: Params
    rows: Rows
    plan: M.RowPlan
    scorer: Scorer | None = None
    batch_rows: int = BATCH_ROWS
    score_meta: dict = dataclasses.field(default_factory=dict)

    @property
    def sources(self) -> Sources:
        return self.source.sources

    def tokens(
        self, names: list[str] | None, *, values: bool
    ) -> Iterator[tuple[int, pa.Table, Tokens]]:
        """Batches of validated tokens (values from the log, or scored by the critic)."""
        from_log = values and self.scorer is None
        for row0, table in prefetch(self.source.batches(names, self.batch_rows)):
            tok = extract_tokens(table, self.roles, self.sources, row0, values=from_log)
            if values and self.scorer is not None:
                tok.values = self.scorer(row0, table, tok)
                self.score_meta = self.scorer.metadata
                self._check_scored(tok, row0)
            yield row0, table, tok

    def _check_scored(self, tok: Tokens, row0: int) -> None:
        bad = tok.mask & ~np.isfinite(tok.values)
        if bad.any():
            row = row0 + int(row_of(tok.offsets)[np.flatnonzero(bad)[0]])
            msg = (
                f"{self.sources.at(row, self.roles['input_ids'])}: the critic gave no value for "
                "an action token (a row's first token has no earlier output to shift from). "
                "Hint: pass --no-shift if the model outputs V(s_t) itself"
            )
            raise DataError(msg)

    def _check_rewards(self, result: M.StepResult, row0: int) -> None:
        col = self.roles["token_rewards"] or self.roles["reward"]
        if result.orphaned.any():
            row = row0 + int(np.flatnonzero(result.orphaned)[0])
            msg = (
                f"{self.sources.at(row, col)}: a reward comes before the row's first action "
                "token, so no action can take it. Hint: check the action mask, or move the reward"
            )
            raise DataError(msg)
        if self.params.strict and result.moved.any():
            row = row0 + int(np.flatnonzero(result.moved)[0])
            msg = (
                f"{self.sources.at(row, col)}: a reward sits on a non-action token "
                "(--strict forbids moving it to the preceding action). Hint: drop --strict"
            )
            raise DataError(msg)

    def steps(self, plan: M.RowPlan) -> Iterator[tuple[int, pa.Table, Tokens, M.StepResult]]:
        """A temporal method's step results, batch by batch."""
        names = token_columns(self.roles)
        for row0, table, tok in self.tokens(names, values=self.params.method in VALUE_METHODS):
            result = M.temporal_steps(plan, tok, row0, self.params)
            self._check_rewards(result, row0)
            yield row0, table, tok, result

    def prepare(self, stage: Stage) -> None:
        """The token passes a temporal method needs before the final one."""
        p, rows = self.params, self.rows
        passes = M.token_passes(rows, p)
        counts = None
        if "counts" in passes:
            with stage("counting action tokens"):
                _, counts = token_counts(
                    self.source, self.roles, rows.n_rows, values=False, progress=None
                )
        self.plan = M.plan_temporal(rows, p, counts)
        if "chain" in passes:
            with stage("carrying values across segments"):
                local = dataclasses.replace(
                    self.plan, tail=np.zeros(rows.n_rows), tail_critic=np.zeros(rows.n_rows)
                )
                firsts: dict[str, np.ndarray] = {}
                for row0, _, _, result in self.steps(local):
                    for key, values in M.first_steps(result, p).items():
                        firsts.setdefault(key, np.zeros(rows.n_rows))
                        firsts[key][row0 : row0 + len(values)] = values
                M.chain_tails(rows, p, self.plan, firsts)
        if "whiten" in passes:
            with stage("whitening statistics"):
                batch_of_row, n_batches = M.whiten_batches(rows, p)
                stats = T.BatchMoments(n_batches)
                for row0, _, _, result in self.steps(self.plan):
                    act = result.is_action
                    step_batch = batch_of_row[M.step_rows(result, row0)]
                    stats.add(result.advantages[act], step_batch[act])
                std = np.sqrt(stats.var(p.whiten_ddof) + WHITEN_EPS)
                self.plan.whiten_mean = stats.mean[batch_of_row]
                self.plan.whiten_std = std[batch_of_row]

    def annotated(self) -> Iterator[tuple[pa.Table, np.ndarray, np.ndarray]]:
        """The final pass: ``(annotated table, token advantages, action mask)`` per batch."""
        p, plan = self.params, self.plan
        temporal = p.method not in GROUP_METHODS
        values = temporal and p.method in VALUE_METHODS
        for row0, table, tok in self.tokens(None, values=values):
            n = len(tok.offsets) - 1
            if temporal:
                result = M.temporal_steps(plan, tok, row0, p)
                self._check_rewards(result, row0)
                columns = M.finish_temporal(plan, result, tok.mask, row0, p)
            else:
                columns = M.apply_group(plan, tok, row0)
            out = table
            new = {name: list_column(flat, tok.offsets) for name, flat in columns.items()}
            for name, per_row in plan.columns.items():
                new[name] = pa.array(per_row[row0 : row0 + n], from_pandas=True)
            for name, column in new.items():
                if name in out.column_names:
                    out = out.drop_columns([name])
                out = out.append_column(name, column)
            adv = columns["advantages"]
            if plan.keep is not None and not plan.keep[row0 : row0 + n].all():
                keep = plan.keep[row0 : row0 + n]
                out = out.filter(pa.array(keep))
                token_keep = np.repeat(keep, lengths(tok.offsets))
                yield out, adv[token_keep], tok.mask[token_keep]
            else:
                yield out, adv, tok.mask


def engine(
    source: LogSource,
    roles: Roles,
    p: Params,
    *,
    scorer: Scorer | None = None,
    stage: Stage = _no_stage,
    batch_rows: int = BATCH_ROWS,
) -> Engine:
    """Validate the log's scalar columns and plan method ``p`` (running the passes it needs)."""
    p = resolve(p)
    require(roles, source.schema.names, source.sources, required_roles(p.method, bool(scorer)))
    with stage("reading per-row columns"):
        rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
    if p.method in GROUP_METHODS:
        try:
            plan = M.plan_group(rows, p)
        except M.SingletonError as exc:
            key = rows.group_keys[rows.group_codes[exc.row]].as_py()
            msg = (
                f"{source.sources.at(exc.row, roles['prompt_id'])}: prompt {key!r} has a single "
                f"rollout; --singleton error (convention {p.convention}) forbids singleton "
                "groups. Hint: pass --singleton zero, raw or drop"
            )
            raise DataError(msg) from None
    else:
        plan = M.RowPlan()
    if scorer is not None and {"chain", "whiten"} & set(M.token_passes(rows, p)):
        scorer = ValueCache(scorer)  # several passes read the values: score them once
    run = Engine(source, roles, p, rows, plan, scorer, batch_rows)
    if p.method not in GROUP_METHODS:
        run.prepare(stage)
    return run


class Summary:
    """Counts gathered while batches stream past."""

    def __init__(self, run: Engine):
        self.run = run
        self.rows_written = 0
        self.tokens = 0
        self.action_tokens = 0
        self.adv_min = np.inf
        self.adv_max = -np.inf
        self.adv_sum = 0.0

    def add(self, table: pa.Table, adv: np.ndarray, mask: np.ndarray) -> None:
        """Count a batch; ``adv`` is exactly 0 off the action tokens (``mask``)."""
        self.rows_written += table.num_rows
        self.tokens += len(mask)
        n_actions = int(np.count_nonzero(mask))
        if not n_actions:
            return
        self.action_tokens += n_actions
        # Whole-array reductions, no gather: the zeros off actions add nothing to the sum, and
        # change the extremes only when every action is on one side of 0.
        lo, hi = float(adv.min()), float(adv.max())
        if lo >= 0.0 or hi <= 0.0:
            act = adv[mask]
            lo, hi = float(act.min()), float(act.max())
        self.adv_min = min(self.adv_min, lo)
        self.adv_max = max(self.adv_max, hi)
        self.adv_sum += float(adv.sum(dtype=np.float64))

    def as_dict(self) -> dict:
        run = self.run
        out = {
            "method": run.params.method,
            "convention": run.params.convention,
            "rows": run.rows.n_rows,
            "rows_written": self.rows_written,
            "rollouts": run.rows.n_rollouts,
            "tokens_written": self.tokens,
            "action_tokens_written": self.action_tokens,
            "dropped": run.plan.dropped,
            "advantage_min": self.adv_min if self.action_tokens else 0.0,
            "advantage_max": self.adv_max if self.action_tokens else 0.0,
            "advantage_mean": self.adv_sum / self.action_tokens if self.action_tokens else 0.0,
        }
        if run.rows.group_keys is not None:
            out["groups"] = len(run.rows.group_keys)
        out.update(run.plan.stats)
        return out


def metadata(run: Engine) -> dict:
    meta = {
        "advcli_version": __version__,
        "method": run.params.method,
        "params": run.params.as_dict(),
        "inputs": run.sources.files,
        "roles": {k: v for k, v in run.roles.columns.items() if v},
    }
    meta.update(run.score_meta)
    return meta


# --------------------------------------------------------------------------- commands


def annotate(
    inputs: list[str],
    out: str,
    p: Params,
    *,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    stage: Stage = _no_stage,
    progress: Progress | None = None,
    critic: CriticOptions | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict:
    """``advcli annotate``: stream the log through the method into ``out``; returns the summary.

    ``critic`` scores values when the log has none.
    """
    started = time.perf_counter()
    resolve(dataclasses.replace(p))
    fmt = output_format(out, fmt)
    check_output(out, inputs, force=force)
    source, roles = open_log(inputs, col)
    scorer = None
    if critic is not None and roles["values"] is None:
        scorer = CriticScorer(critic, source.sources, roles)
    run = engine(source, roles, p, scorer=scorer, stage=stage, batch_rows=batch_rows)
    summary = Summary(run)
    schema = None
    with stage("annotating"):
        batches = run.annotated()
        first = next(batches, None)
        # The critic's metadata is known once the first batch is scored.
        with TableWriter(out, fmt, metadata(run)) as writer:
            for table, adv, mask in itertools.chain([first] if first else [], batches):
                schema = table.schema
                writer.write(table)
                summary.add(table, adv, mask)
                if progress:
                    progress(summary.rows_written, summary.tokens)
            writer.commit(schema)
    result = summary.as_dict()
    result.update(output=out, seconds=round(time.perf_counter() - started, 3))
    return result


@dataclass
class Annotated:
    """An annotated log in memory: the table, its metadata and the run's summary."""

    table: pa.Table
    metadata: dict
    summary: dict
    log: Log


def annotate_log(
    log: Log, p: Params, *, stage: Stage = _no_stage, scorer: Scorer | None = None
) -> Annotated:
    """Run method ``p`` on a log in memory (the same engine, one table out)."""
    run = engine(TableSource(log.table, log.sources), log.roles, p, scorer=scorer, stage=stage)
    summary = Summary(run)
    tables = []
    for table, adv, mask in run.annotated():
        tables.append(table)
        summary.add(table, adv, mask)
    table = pa.concat_tables(tables)
    return Annotated(table, metadata(run), summary.as_dict(), log)


def run_audit(
    inputs: list[str],
    *,
    col: list[str] | None = None,
    tol: float = 1e-9,
    progress: Progress | None = None,
) -> tuple[AuditReport, Sources, Rows, G.GroupStats]:
    """``advcli audit``: zero-variance and singleton accounting of one log (streamed)."""
    source, roles = open_log(inputs, col)
    files = ", ".join(source.sources.files)
    if roles["prompt_id"] is None:
        msg = (
            f"{files}: no 'prompt_id' column, so no groups to audit. "
            f"Columns found: {', '.join(source.schema.names)}. "
            "Hint: name the group key with --col prompt_id=COLUMN"
        )
        raise UsageError(msg)
    require(roles, source.schema.names, source.sources, {"prompt_id", "reward"})
    rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
    _, counts = token_counts(source, roles, rows.n_rows, values=False, progress=progress)
    rewards = M.rollout_rewards(rows)
    codes = M.rollout_groups(rows)
    stats = G.group_stats(rewards, codes, len(rows.group_keys), ddof=0, tol=tol)
    action_tokens = np.bincount(rows.rollout_codes, weights=counts, minlength=rows.n_rollouts)
    return audit(rewards, codes, stats, action_tokens), source.sources, rows, stats


def token_counts(
    source: LogSource, roles: Roles, n_rows: int, *, values: bool, progress: Progress | None
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and action tokens of every row, from one validating pass over the token columns
    (``values``: the critic values too, if the log has them)."""
    tokens = np.zeros(n_rows, dtype=np.int64)
    actions = np.zeros(n_rows, dtype=np.int64)
    values = values and roles["values"] is not None
    names = token_columns(roles, values=values)
    done = 0
    for row0, table in prefetch(source.batches(names, BATCH_ROWS)):
        tok = extract_tokens(table, roles, source.sources, row0, values=values)
        rows = slice(row0, row0 + len(tok.offsets) - 1)
        tokens[rows] = lengths(tok.offsets)
        actions[rows] = tok.action_counts()
        done += int(tok.offsets[-1])
        if progress:
            progress(rows.stop, done)
    return tokens, actions


def describe(
    inputs: list[str], col: list[str] | None = None, *, progress: Progress | None = None
) -> dict:
    """``advcli schema``: column roles and types, rows and token statistics (streamed)."""
    source, roles = open_log(inputs, col)
    role_of = {column: role for role, column in roles.columns.items() if column}
    columns = {
        f.name: (describe_type(f.type), role_of.get(f.name, "passthrough")) for f in source.schema
    }
    rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
    n_tokens, n_actions = token_counts(source, roles, rows.n_rows, values=True, progress=progress)
    mask_note = {
        "action_mask": f"column '{roles['action_mask']}'",
        "spans": f"spans in column '{roles['spans']}'",
        "all": "no mask and no spans: every token is treated as an action",
    }[roles.mask_source]
    return {
        "files": source.sources.files,
        "columns": columns,
        "rows": rows.n_rows,
        "rollouts": rows.n_rollouts,
        "segmented": rows.segmented,
        "groups": len(rows.group_keys) if rows.group_keys is not None else None,
        "tokens": int(n_tokens.sum()),
        "action_tokens": int(n_actions.sum()),
        "tokens_per_row_min": int(n_tokens.min()),
        "tokens_per_row_mean": float(n_tokens.mean()),
        "tokens_per_row_max": int(n_tokens.max()),
        "actions": mask_note,
    }


def group_keys(rows: Rows, group_flags: np.ndarray) -> list:
    """The prompt ids of the flagged groups, in order of first appearance."""
    return rows.group_keys.take(pa.array(np.flatnonzero(group_flags))).to_pylist()


# --------------------------------------------------------------------------- critic


class ValueCache:
    """A scorer that runs the critic on the first pass over a log only: its values (float32,
    as the critic gives them) go to an unnamed temporary file, and every later pass, which
    asks for the same batches from row 0 again, reads them back in order."""

    def __init__(self, scorer: Scorer):
        self.scorer = scorer
        # Unnamed: nothing is left on disk, however the process ends.
        self.file = tempfile.TemporaryFile(prefix="advcli-values-")  # noqa: SIM115
        self.scored_rows = 0  # rows scored so far: the first pass

    @property
    def metadata(self) -> dict:
        return self.scorer.metadata

    def __call__(self, row0: int, table: pa.Table, tok: Tokens) -> np.ndarray:
        if row0 == 0:
            self.file.seek(0)
        if row0 < self.scored_rows:  # a later pass
            n_tokens = int(tok.offsets[-1])
            return np.fromfile(self.file, dtype=np.float32, count=n_tokens)
        values = self.scorer(row0, table, tok)
        np.asarray(values, dtype=np.float32).tofile(self.file)
        self.scored_rows = row0 + len(tok.offsets) - 1
        return values


def score(
    inputs: list[str],
    out: str,
    opts: CriticOptions,
    *,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> dict:
    """``advcli score``: add (or replace) a ``values`` column computed by the critic."""
    started = time.perf_counter()
    fmt = output_format(out, fmt)
    check_output(out, inputs, force=force)
    source, roles = open_log(inputs, col)
    require(roles, source.schema.names, source.sources, set())
    scorer = CriticScorer(opts, source.sources, roles)
    column = roles["values"] or "values"
    meta: dict = {}
    tables = (
        (row0, table, extract_tokens(table, roles, source.sources, row0, values=False))
        for row0, table in prefetch(source.batches(None, BATCH_ROWS))
    )
    rows = tokens = 0
    writer = None
    with contextlib.ExitStack() as stack:
        for row0, table, tok in tables:
            values = scorer(row0, table, tok)
            meta = dict(scorer.metadata)
            if column in table.column_names:
                table = table.drop_columns([column])
            table = table.append_column(column, list_column(values, tok.offsets))
            if writer is None:
                meta.update(
                    advcli_version=__version__, command="score", inputs=source.sources.files
                )
                writer = stack.enter_context(TableWriter(out, fmt, meta))
            writer.write(table)
            rows += table.num_rows
            tokens += int(tok.offsets[-1])
            if progress:
                progress(rows, tokens)
        writer.commit()
    return {
        "rows": rows,
        "tokens": tokens,
        "provider": meta["critic"]["provider"],
        "tokens_per_second": scorer.tokens_per_second,
        "truncated_rows": scorer.truncated_rows,
        "output": out,
        "seconds": round(time.perf_counter() - started, 3),
    }
