"""From logs to annotated tables: read, validate, run the chosen estimator, write.

This layer joins the I/O layer (``advcli.io``) and the numerical core (``advcli.core``); it
knows about rows, files and segments, the core only about arrays.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from advcli import __version__
from advcli.core import group as G
from advcli.core import temporal as T
from advcli.core.audit import AuditReport, audit
from advcli.core.conventions import WHITEN_EPS
from advcli.core.ragged import lengths, ranges, row_of
from advcli.errors import DataError, UsageError
from advcli.io.readers import Sources, read_inputs
from advcli.io.rollouts import Rollouts, extract, flat_list
from advcli.io.schema import Roles, describe_type, parse_col_mapping, resolve_roles
from advcli.io.writers import check_output, output_format, write_table
from advcli.params import GROUP_METHODS, VALUE_METHODS, Params, resolve

Stage = Callable[[str], contextlib.AbstractContextManager]


def _no_stage(_name: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


@dataclass
class Log:
    """A read log: the table, where its rows came from, and its column roles."""

    table: pa.Table
    sources: Sources
    roles: Roles


def load(inputs: list[str], col: list[str] | None = None) -> Log:
    mapping = parse_col_mapping(col)
    table, sources = read_inputs(inputs, mapping)
    roles = resolve_roles(table.schema, mapping, ", ".join(sources.files))
    return Log(table, sources, roles)


def required_roles(method: str, has_critic: bool = False) -> set[str]:
    needs = {"reward"}
    if method in ("grpo", "rloo", "reinforce-pp-baseline"):
        needs.add("prompt_id")
    if method in VALUE_METHODS and not has_critic:
        needs.add("values")
    return needs


# --------------------------------------------------------------------------- rollout level


def rollout_rewards(ro: Rollouts) -> np.ndarray:
    """One reward per rollout: its last segment's."""
    return ro.reward[ro.last_segment_row()]


def rollout_groups(ro: Rollouts) -> np.ndarray:
    """The group code of each rollout."""
    return ro.group_codes[ro.last_segment_row()]


def completion_order(ro: Rollouts) -> np.ndarray:
    """Rollouts by completion: ``completion_time``, then rollout id; row order if no time."""
    last = ro.last_segment_row()
    first_row = np.full(ro.n_rollouts, ro.n_rows, dtype=np.int64)
    np.minimum.at(first_row, ro.rollout_codes, np.arange(ro.n_rows))
    if ro.completion_time is None:
        return np.argsort(first_row, kind="stable")
    key_rank = np.zeros(ro.n_rollouts, dtype=np.int64)
    if ro.rollout_keys is not None:
        key_rank[pc.sort_indices(ro.rollout_keys).to_numpy()] = np.arange(ro.n_rollouts)
    return np.lexsort((first_row, key_rank, ro.completion_time[last]))


def batches(ro: Rollouts, batch_size: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per rollout: batch id and partial flag; and the number of batches."""
    batch_id, partial = G.completion_batches(completion_order(ro), batch_size)
    return batch_id, partial, int(batch_id.max()) + 1 if len(batch_id) else 0


@dataclass
class Result:
    """What an estimator produced: new columns, rows to keep, and counts for the summary."""

    columns: dict[str, pa.Array]
    keep: np.ndarray  # bool per row
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    advantages: np.ndarray | None = None  # float64 per token, for the summary


def _first_row_of(ro: Rollouts, rollout_flags: np.ndarray) -> int:
    return int(np.flatnonzero(rollout_flags[ro.rollout_codes])[0])


def group_method(log: Log, ro: Rollouts, p: Params) -> Result:
    """GRPO, RLOO and batch-mean: one advantage per rollout, broadcast to its action tokens."""
    rewards = rollout_rewards(ro)
    rollout_cols: dict[str, np.ndarray] = {}
    drop_rollout = np.zeros(ro.n_rollouts, dtype=bool)
    dropped: dict[str, int] = {}
    batch_id, partial, n_batches = batches(ro, p.batch_size)
    if p.method == "batch-mean":
        adv, stats = G.batch_mean(rewards, batch_id, n_batches, tol=p.zero_variance_tol)
        zero_var = stats.zero_variance[batch_id]
        rollout_cols.update(
            batch_id=batch_id,
            batch_size=stats.size[batch_id],
            batch_mean=stats.mean[batch_id],
            partial_batch=partial,
            zero_variance=zero_var,
        )
        if p.partial == "drop" and partial.any():
            drop_rollout |= partial
            dropped["partial_batch"] = int(partial[ro.rollout_codes].sum())
        adv = np.where(partial & (p.partial == "drop"), 0.0, adv)
    else:
        codes = rollout_groups(ro)
        n_groups = len(ro.group_keys)
        stats = G.group_stats(rewards, codes, n_groups, ddof=p.std_ddof, tol=p.zero_variance_tol)
        single = stats.singleton[codes]
        if p.singleton == "error" and single.any():
            row = _first_row_of(ro, single)
            key = ro.group_keys[ro.group_codes[row]].as_py()
            msg = (
                f"{log.sources.at(row, log.roles['prompt_id'])}: prompt {key!r} has a single "
                f"rollout; --singleton error (convention {p.convention}) forbids singleton "
                "groups. Hint: pass --singleton zero, raw or drop"
            )
            raise DataError(msg)
        singleton_rule = "raw" if p.singleton == "raw" else "zero"
        if p.method == "grpo":
            bstd = None
            if p.scale == "batch":
                bstd = G.batch_std(rewards, batch_id, n_batches, ddof=p.std_ddof)
            adv = G.grpo(
                rewards,
                codes,
                stats,
                eps=p.eps,
                eps_placement=p.eps_placement,
                scale=p.scale,
                batch_std=bstd,
                singleton=singleton_rule,
            )
        else:
            adv = G.rloo(rewards, codes, stats, singleton=singleton_rule)
        zero_var = stats.zero_variance[codes]
        rollout_cols.update(
            group_size=stats.size[codes],
            group_mean=stats.mean[codes],
            group_std=stats.std[codes],
            zero_variance=zero_var,
            singleton=single,
        )
        if p.singleton == "drop" and single.any():
            drop_rollout |= single
            dropped["singleton"] = int(single[ro.rollout_codes].sum())
    if p.zero_variance == "drop" and zero_var.any():
        drop_rollout |= zero_var
        dropped["zero_variance"] = int(zero_var[ro.rollout_codes].sum())

    per_row = adv[ro.rollout_codes]
    token_adv = np.where(ro.mask, np.repeat(per_row, lengths(ro.offsets)), 0.0)
    columns = {
        "advantages": list_column(token_adv, ro.offsets),
        "advantage": pa.array(per_row.astype(np.float32)),
    }
    for name, values in rollout_cols.items():
        columns[name] = pa.array(values[ro.rollout_codes], from_pandas=True)
    keep = ~drop_rollout[ro.rollout_codes]
    stats_out = {"zero_variance_rollouts": zero_var}
    if p.method != "batch-mean":
        stats_out.update(
            zero_variance_groups=int(stats.zero_variance.sum()),
            singleton_groups=int(stats.singleton.sum()),
        )
    return Result(columns, keep, dropped, stats_out, token_adv)


# --------------------------------------------------------------------------- token level


@dataclass
class Steps:
    """Time steps laid out per unit (a row, or a whole rollout when segments are chained)."""

    positions: np.ndarray  # flat token position of each step
    offsets: np.ndarray  # per unit
    unit_of_row: np.ndarray  # the unit of each table row
    is_action: np.ndarray  # bool per step


def layout_steps(ro: Rollouts, p: Params) -> Steps:
    positions, step_offsets = T.step_positions(ro.mask, ro.offsets, p.observations)
    if not (ro.segmented and p.segments == "chain"):
        unit_of_row = np.arange(ro.n_rows, dtype=np.int64)
    else:
        # One unit per rollout: its segments' steps, concatenated in segment order.
        perm = np.lexsort((ro.segment_rank, ro.rollout_codes))
        step_lens = lengths(step_offsets)
        positions = positions[ranges(step_offsets[:-1][perm], step_lens[perm])]
        per_rollout = np.bincount(ro.rollout_codes, weights=step_lens, minlength=ro.n_rollouts)
        step_offsets = np.zeros(ro.n_rollouts + 1, dtype=np.int64)
        np.cumsum(per_rollout.astype(np.int64), out=step_offsets[1:])
        unit_of_row = ro.rollout_codes
    return Steps(positions, step_offsets, unit_of_row, ro.mask[positions])


def _check_rewards(log: Log, ro: Rollouts, p: Params, moved, orphaned) -> None:
    col = log.roles["token_rewards"] or log.roles["reward"]
    if orphaned.any():
        row = int(np.flatnonzero(orphaned)[0])
        msg = (
            f"{log.sources.at(row, col)}: a reward comes before the row's first action token, "
            "so no action can take it. Hint: check the action mask, or move the reward"
        )
        raise DataError(msg)
    if p.strict and moved.any():
        row = int(np.flatnonzero(moved)[0])
        msg = (
            f"{log.sources.at(row, col)}: a reward sits on a non-action token "
            "(--strict forbids moving it to the preceding action). Hint: drop --strict"
        )
        raise DataError(msg)


def temporal_method(log: Log, ro: Rollouts, p: Params) -> Result:
    """MC, TD, GAE and REINFORCE++: per-token advantages over action steps."""
    last_seg = ro.is_last_segment()
    chain = ro.segmented and p.segments == "chain"
    outcome = ro.reward[ro.last_segment_row()][ro.rollout_codes]  # the rollout's reward
    if p.method == "reinforce-pp-baseline":
        codes = rollout_groups(ro)
        stats = G.group_stats(rollout_rewards(ro), codes, len(ro.group_keys), ddof=0, tol=0.0)
        outcome = outcome - stats.mean[codes][ro.rollout_codes]
    if chain:
        outcome = np.where(last_seg, outcome, 0.0)
    rewards, moved, orphaned = T.place_rewards(ro.mask, ro.offsets, outcome, ro.token_rewards)
    _check_rewards(log, ro, p, moved, orphaned)

    steps = layout_steps(ro, p)
    n_units = len(steps.offsets) - 1
    action_counts = np.bincount(
        ro.rollout_codes, weights=_row_action_counts(ro), minlength=ro.n_rollouts
    )
    rollout_of_unit = np.zeros(n_units, dtype=np.int64)
    rollout_of_unit[steps.unit_of_row] = ro.rollout_codes
    if p.lam == "adaptive":
        lam_rollout = T.adaptive_lambda(action_counts, p.alpha)
        lam = lam_rollout[rollout_of_unit]
    else:
        lam_rollout = np.full(ro.n_rollouts, p.lam)
        lam = p.lam

    # V_next after a unit's last step: the bootstrap value of a truncated rollout's last row.
    next_value = np.zeros(n_units)
    boot = np.where(last_seg, ro.bootstrap, 0.0)
    np.add.at(next_value, steps.unit_of_row, boot)

    r = rewards[steps.positions]
    if ro.values is not None:
        v = np.where(steps.is_action, ro.values[steps.positions], 0.0)
    else:
        v = np.zeros(len(steps.positions))
    kw = {"gamma": p.gamma, "next_value": next_value}
    returns = None
    if p.method == "td":
        adv, lam_eff = T.td_errors(v, r, steps.offsets, **kw), 0.0
    elif p.method == "mc":
        adv, lam_eff = T.monte_carlo(v, r, steps.offsets, **kw), 1.0
    elif p.method == "gae":
        adv, lam_eff = T.gae(v, r, steps.offsets, lam=lam, **kw), lam_rollout
    else:
        adv, lam_eff = T.discounted_returns(r, steps.offsets, **kw), 1.0
        returns = adv.copy()
    if p.method in VALUE_METHODS:
        returns = T.gae(v, r, steps.offsets, lam=p.lam_critic, **kw)

    if ro.segmented and not chain:
        # Compaction: segment s is its own sample, discounted by the actions after it.
        after = T.actions_after(_row_action_counts(ro), ro.rollout_codes, ro.segment_rank)
        step_row = np.repeat(np.arange(n_units), lengths(steps.offsets))
        lam_row = np.broadcast_to(lam_eff, (ro.n_rollouts,))[ro.rollout_codes]
        adv = adv * np.power(p.gamma * lam_row, after)[step_row]
        if p.method in VALUE_METHODS:
            returns = returns * np.power(p.gamma * p.lam_critic, after)[step_row]
    if p.method in VALUE_METHODS:
        returns = returns + v

    if p.whiten == "batch":
        batch_id, _, n_batches = batches(ro, p.batch_size)
        unit_batch = batch_id[rollout_of_unit]
        step_batch = np.repeat(unit_batch, lengths(steps.offsets))
        act = steps.is_action
        adv = adv.copy()
        adv[act] = T.whiten(
            adv[act], step_batch[act], n_batches, ddof=p.whiten_ddof, eps=WHITEN_EPS
        )

    token_adv = _scatter(adv, steps, len(ro.mask))
    columns = {"advantages": list_column(token_adv, ro.offsets)}
    if returns is not None:
        columns["returns"] = list_column(_scatter(returns, steps, len(ro.mask)), ro.offsets)
    if p.lam == "adaptive":
        columns["lam"] = pa.array(lam_rollout[ro.rollout_codes])
    return Result(columns, np.ones(ro.n_rows, dtype=bool), {}, {}, token_adv)


def _row_action_counts(ro: Rollouts) -> np.ndarray:
    return np.bincount(row_of(ro.offsets)[ro.mask], minlength=ro.n_rows).astype(np.int64)


def _scatter(step_values: np.ndarray, steps: Steps, n_tokens: int) -> np.ndarray:
    """Per-token array: step values at action positions, exactly 0 elsewhere."""
    out = np.zeros(n_tokens)
    out[steps.positions[steps.is_action]] = step_values[steps.is_action]
    return out


def list_column(flat: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A list<float32> column from flat values and offsets."""
    values = pa.array(np.asarray(flat, dtype=np.float32))
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


# --------------------------------------------------------------------------- commands


def compute(log: Log, p: Params, values: np.ndarray | None = None) -> tuple[Rollouts, Result]:
    """Validate the log for method ``p.method`` and run it. ``values`` replaces the log's."""
    ro = extract(
        log.table, log.roles, log.sources, needs=required_roles(p.method, values is not None)
    )
    if values is not None:
        bad = ro.mask & ~np.isfinite(values)
        if bad.any():
            row = int(row_of(ro.offsets)[np.flatnonzero(bad)[0]])
            msg = (
                f"{log.sources.at(row, log.roles['input_ids'])}: the critic gave no value for an "
                "action token (a row's first token has no earlier output to shift from). "
                "Hint: pass --no-shift if the model outputs V(s_t) itself"
            )
            raise DataError(msg)
        ro.values = values
    if p.method in GROUP_METHODS:
        return ro, group_method(log, ro, p)
    return ro, temporal_method(log, ro, p)


def annotated_table(log: Log, result: Result) -> pa.Table:
    table = log.table
    for name, column in result.columns.items():
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, column)
    if not result.keep.all():
        table = table.filter(pa.array(result.keep))
    return table


def metadata(p: Params, log: Log, extra: dict | None = None) -> dict:
    meta = {
        "advcli_version": __version__,
        "method": p.method,
        "params": p.as_dict(),
        "inputs": log.sources.files,
        "roles": {k: v for k, v in log.roles.columns.items() if v},
    }
    meta.update(extra or {})
    return meta


def summarize(log: Log, ro: Rollouts, result: Result, p: Params, table: pa.Table) -> dict:
    adv = result.advantages
    act = adv[ro.mask] if adv is not None else np.zeros(0)
    summary = {
        "method": p.method,
        "convention": p.convention,
        "rows": ro.n_rows,
        "rows_written": table.num_rows,
        "rollouts": ro.n_rollouts,
        "tokens": int(ro.offsets[-1]),
        "action_tokens": int(ro.mask.sum()),
        "dropped": result.dropped,
        "advantage_min": float(act.min()) if len(act) else 0.0,
        "advantage_max": float(act.max()) if len(act) else 0.0,
        "advantage_mean": float(act.mean()) if len(act) else 0.0,
    }
    if ro.group_codes is not None:
        summary["groups"] = len(ro.group_keys)
    zv = result.stats.get("zero_variance_rollouts")
    if zv is not None:
        summary["zero_variance_rollout_share"] = float(zv.mean()) if len(zv) else 0.0
    for key in ("zero_variance_groups", "singleton_groups"):
        if key in result.stats:
            summary[key] = result.stats[key]
    return summary


@dataclass
class Annotated:
    """An annotated log, ready to write: the table, its metadata and the run's summary."""

    table: pa.Table
    metadata: dict
    summary: dict
    rollouts: Rollouts
    log: Log


def annotate_log(
    log: Log,
    p: Params,
    *,
    stage: Stage = _no_stage,
    score: Callable[[Log, Rollouts], tuple[np.ndarray, dict]] | None = None,
) -> Annotated:
    """Run method ``p`` on a loaded log (scoring values first if ``score`` is given and needed)."""
    p = resolve(p)
    extra: dict = {}
    values = None
    if score is not None and log.roles["values"] is None:
        with stage("scoring with the critic"):
            base = extract(log.table, log.roles, log.sources, needs=set())
            values, extra = score(log, base)
    with stage("computing"):
        ro, result = compute(log, p, values)
        table = annotated_table(log, result)
    return Annotated(table, metadata(p, log, extra), summarize(log, ro, result, p, table), ro, log)


def annotate(
    inputs: list[str],
    out: str,
    p: Params,
    *,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    stage: Stage = _no_stage,
    score: Callable[[Log, Rollouts], tuple[np.ndarray, dict]] | None = None,
) -> dict:
    """``advcli annotate``: returns the summary; writes ``out`` atomically."""
    started = time.perf_counter()
    resolve(p)
    fmt = output_format(out, fmt)
    check_output(out, inputs, force=force)
    with stage("reading"):
        log = load(inputs, col)
    done = annotate_log(log, p, stage=stage, score=score)
    with stage("writing"):
        write_table(done.table, out, fmt, done.metadata)
    done.summary.update(output=out, seconds=round(time.perf_counter() - started, 3))
    return done.summary


def run_audit(
    inputs: list[str], *, col: list[str] | None = None, tol: float = 1e-9
) -> tuple[AuditReport, Log, Rollouts, G.GroupStats]:
    """``advcli audit``: zero-variance and singleton accounting of one log."""
    log = load(inputs, col)
    if log.roles["prompt_id"] is None:
        msg = (
            f"{', '.join(log.sources.files)}: no 'prompt_id' column, so no groups to audit. "
            f"Columns found: {', '.join(log.table.column_names)}. "
            "Hint: name the group key with --col prompt_id=COLUMN"
        )
        raise UsageError(msg)
    ro = extract(log.table, log.roles, log.sources, needs={"prompt_id", "reward"})
    rewards = rollout_rewards(ro)
    codes = rollout_groups(ro)
    stats = G.group_stats(rewards, codes, len(ro.group_keys), ddof=0, tol=tol)
    action_tokens = np.bincount(ro.rollout_codes, weights=_row_action_counts(ro))
    return audit(rewards, codes, stats, action_tokens), log, ro, stats


def describe(log: Log) -> dict:
    """``advcli schema``: column roles and types, rows and token statistics."""
    role_of = {col: role for role, col in log.roles.columns.items() if col}
    columns = {
        f.name: (describe_type(f.type), role_of.get(f.name, "passthrough"))
        for f in log.table.schema
    }
    ro = extract(log.table, log.roles, log.sources, needs=set())
    n_tokens = lengths(ro.offsets)
    mask_note = {
        "action_mask": f"column '{log.roles['action_mask']}'",
        "spans": f"spans in column '{log.roles['spans']}'",
        "all": "no mask and no spans: every token is treated as an action",
    }[log.roles.mask_source]
    return {
        "files": log.sources.files,
        "columns": columns,
        "rows": ro.n_rows,
        "rollouts": ro.n_rollouts,
        "segmented": ro.segmented,
        "groups": len(ro.group_keys) if ro.group_keys is not None else None,
        "tokens": int(ro.offsets[-1]),
        "action_tokens": int(ro.mask.sum()),
        "tokens_per_row_min": int(n_tokens.min()),
        "tokens_per_row_mean": float(n_tokens.mean()),
        "tokens_per_row_max": int(n_tokens.max()),
        "actions": mask_note,
    }


def group_keys(log: Log, group_flags: np.ndarray) -> list:
    """The prompt ids of the flagged groups, in order of first appearance."""
    codes = np.flatnonzero(group_flags)
    ro_keys = log.table.column(log.roles["prompt_id"]).combine_chunks().dictionary_encode()
    return ro_keys.dictionary.take(pa.array(codes)).to_pylist()


# --------------------------------------------------------------------------- critic


@dataclass
class CriticOptions:
    """How to run an ONNX critic (``advcli score`` and ``annotate --critic``)."""

    path: str
    device: str = "auto"
    batch_tokens: int | None = None
    shift: bool = True
    max_len: int | None = None
    truncate: str = "error"
    input_name: str | None = None
    mask_name: str | None = None
    output_name: str | None = None


def critic_scorer(
    opts: CriticOptions, progress: Callable[[int, int], None] | None = None
) -> Callable[[Log, Rollouts], tuple[np.ndarray, dict]]:
    """A function that scores a log's tokens with the critic: (values per token, metadata)."""
    from advcli.critic import DEFAULT_BATCH_TOKENS, load_critic

    def score(log: Log, ro: Rollouts) -> tuple[np.ndarray, dict]:
        critic = load_critic(
            opts.path,
            device=opts.device,
            input_name=opts.input_name,
            mask_name=opts.mask_name,
            output_name=opts.output_name,
        )
        ids, _ = flat_list(log.table.column(log.roles["input_ids"]))
        started = time.perf_counter()
        values = critic.score(
            ids.to_numpy(zero_copy_only=False),
            ro.offsets,
            batch_tokens=opts.batch_tokens or DEFAULT_BATCH_TOKENS,
            shift=opts.shift,
            max_len=opts.max_len,
            truncate=opts.truncate,
            describe_row=lambda row: log.sources.at(row, log.roles["input_ids"]),
            progress=progress,
        )
        seconds = time.perf_counter() - started
        meta = {
            "critic": {
                "file": str(opts.path),
                "sha256": critic.sha256,
                "provider": critic.provider,
                "alignment": "shifted: values[t] = output[t - 1]"
                if opts.shift
                else "unshifted: values[t] = output[t]",
                "batch_tokens": opts.batch_tokens or DEFAULT_BATCH_TOKENS,
                "truncated_rows": critic.last_truncated_rows,
                "tokens_per_second": round(int(ro.offsets[-1]) / seconds) if seconds else None,
            }
        }
        return values.astype(np.float64), meta

    return score


def score(
    inputs: list[str],
    out: str,
    opts: CriticOptions,
    *,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    stage: Stage = _no_stage,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """``advcli score``: add (or replace) a ``values`` column computed by the critic."""
    started = time.perf_counter()
    fmt = output_format(out, fmt)
    check_output(out, inputs, force=force)
    with stage("reading"):
        log = load(inputs, col)
    ro = extract(log.table, log.roles, log.sources, needs=set())
    values, meta = critic_scorer(opts, progress)(log, ro)
    column = log.roles["values"] or "values"
    table = log.table
    if column in table.column_names:
        table = table.drop_columns([column])
    table = table.append_column(column, list_column(values, ro.offsets))
    meta.update(advcli_version=__version__, command="score", inputs=log.sources.files)
    with stage("writing"):
        write_table(table, out, fmt, meta)
    return {
        "rows": ro.n_rows,
        "tokens": int(ro.offsets[-1]),
        "provider": meta["critic"]["provider"],
        "tokens_per_second": meta["critic"]["tokens_per_second"],
        "truncated_rows": meta["critic"]["truncated_rows"],
        "output": out,
        "seconds": round(time.perf_counter() - started, 3),
    }
