"""What ``advcli report`` shows, gathered in the passes ``audit`` and ``annotate`` make.

Aggregates (overview, trends, distributions) cover every row: they are built from per-rollout
and per-group arrays, and the per-token advantages go through an unnamed temporary file (4 bytes
an action token) so that their histogram is exact in bounded memory. Per-rollout and per-token
detail is kept for a seeded sample of groups only, which always holds the worst ones: the
zero-variance and near-tie groups that spend the most action tokens.

The result is a plain dict of lists and numbers (what the page embeds as JSON); token arrays are
base64 of little-endian typed arrays, which the page reads with ``Float32Array`` and the like.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from advcli import progress
from advcli.core import group as G
from advcli.core.audit import KINDS, NEAR_TIE, SIGNAL, SINGLETON
from advcli.core.audit import group_kinds as kinds_of_groups
from advcli.core.correction import Correction
from advcli.core.prompts import (
    REWARD_QUANTILES,
    default_success,
    largest_moves,
    prompt_stats,
    step_quantiles,
)
from advcli.errors import UsageError
from advcli.io.retokenize import library_failures, load_tokenizer, native_stderr_muted
from advcli.lazy_imports import np, pa
from advcli.reports.options import ReportOptions
from advcli.reports.rollout_pass import RolloutPass, floats_of, histogram_of, shortened
from advcli.run import health
from advcli.run.accounting import Audit, audit_log
from advcli.run.correcting import described
from advcli.run.engine import Run
from advcli.run.logs import BATCH_ROWS, Log
from advcli.run.prompts import (
    BASES,
    group_identity,
    log_bases,
    prompt_text_column,
    row_steps,
    rows_of_column,
)
from advcli.run.prompts import first_rows as first_rows_of


@dataclass(frozen=True)
class Gathered:
    """A log's collection: the page's payload, and what a comparison reads besides."""

    payload: dict[str, Any]
    log: Log
    found: Audit
    kinds: np.ndarray  # per group: an index into KINDS
    rollout_advantages: np.ndarray | None  # per rollout: mean over its action tokens (its
    # advantage, without token ids); NaN where it has none; None: no advantages
    prompt_hashes: np.ndarray | None  # per row: its prompt tokens' hash (with hash_prompts)


def gather(
    log: Log,
    options: ReportOptions,
    *,
    run: Run | None = None,
    reward_components: list[str] | None = None,
    batch_rows: int = BATCH_ROWS,
    hash_prompts: bool = False,
    correction: Correction | None = None,
    plan: Callable[[], Run] | None = None,
) -> Gathered:
    """Everything the page shows (``payload``) and what a comparison needs besides. ``run``: a
    method planned over ``log`` (its advantages are shown); without one, a log already annotated
    (an ``advantages`` or ``advantage`` column) shows those. ``hash_prompts``: each row's prompt
    tokens hashed, which match a prompt across logs without a prompt text column.
    ``correction``: each detail token's weight and mask shown beside its δ (with both log-prob
    streams). ``plan``: the method the audit's health sections read (the staleness by lag);
    with it, a log with steps gets the health by step (:func:`health_by_step`)."""
    with progress.stage("auditing the groups"):
        found = audit_log(log, tol=options.tol, near_tie=options.near_tie, batch_rows=batch_rows)
    rows = found.rows
    rewards = rows.rollout_rewards()
    codes = rows.rollout_groups()
    stats = found.stats
    hi, lo = (float(rewards.max()), float(rewards.min())) if len(rewards) else (0.0, 0.0)
    kinds = kinds_of_groups(stats, hi, lo, found.report.near_tie_std_below)
    lengths_ = found.action_tokens
    group_tokens = (
        np.bincount(codes, weights=lengths_, minlength=len(kinds)).astype(np.int64)
        if lengths_ is not None
        else None
    )
    listed, detail = choose_groups(kinds, group_tokens, stats.size, options)
    in_detail = np.zeros(len(kinds), dtype=bool)
    in_detail[detail] = True

    # the run view matches prompts across steps: by their tokens, hashed in this pass, where
    # the log has no prompt text
    hash_prompts = hash_prompts or (plan is not None and prompt_text_column(log) is None)
    title = "reading advantages and the sampled rollouts"
    with run.final_pass(title) if run is not None else progress.stage(title):
        seen = RolloutPass(log, found, run, in_detail[codes], options, batch_rows,
                           hash_prompts=hash_prompts, correction=correction).walk()  # fmt: skip
    advantage_source = (
        f"{run.params.method} ({run.params.convention})" if run is not None else seen.logged_column
    )
    overview = found.as_dict()
    for key in ("reward_histogram", "files", "warnings"):
        overview.pop(key)
    warnings = [*found.warnings, *(run.warnings if run is not None else [])]
    payload: dict[str, Any] = {
        "files": found.files,
        "warnings": list(dict.fromkeys(warnings)),
        "overview": overview,
        "advantages_from": advantage_source,
        "kinds": list(KINDS),
        "trends": trends(log, found, kinds, lengths_),
        "health_by_step": health_by_step(log, found, seen, plan, batch_rows)
        if plan is not None
        else None,
        "distributions": {
            "rewards": histogram(rewards, options.bins),
            "advantages": seen.histogram(options.bins),
            "lengths": histogram(lengths_, options.bins, integers=True)
            if lengths_ is not None
            else None,
            "group_sizes": {str(k): v for k, v in found.report.group_sizes.items()},
            "components": components(log, found, reward_components or [], options.bins),
        },
        "groups": group_table(
            found,
            kinds,
            group_tokens,
            listed,
            listed_extras(log, found, seen, listed, in_detail, lengths_, batch_rows),
        ),
        "details": seen.details(found, codes, rewards, lengths_),
        "overlay": {
            "streams": seen.streams,
            "correction": described(seen.correction) if seen.correction is not None else None,
        },
        "vocab": token_texts(options.tokenizer, seen, log) if options.tokenizer else None,
    }
    return Gathered(payload, log, found, kinds, seen.rollout_advantages(lengths_),
                    seen.prompt_hash)  # fmt: skip


def token_texts(path: str, seen: RolloutPass, log: Log) -> dict[str, str]:
    """The text of every token id the page shows, by id, from a local ``tokenizer.json`` (or
    the model folder holding one); a token the library fails to decode is refused in one line
    naming the file, the token and its row."""
    tokenizer = load_tokenizer(path).tokenizer
    shown = [part.ids for part in seen.tokens.values()]
    ids = np.unique(np.concatenate(shown)) if shown else np.zeros(0, np.int64)
    ids = ids[(ids >= 0) & (ids < tokenizer.get_vocab_size(with_added_tokens=True))]
    with native_stderr_muted():
        try:
            texts = tokenizer.decode_batch([[int(i)] for i in ids], skip_special_tokens=False)
        except library_failures():
            _refuse_undecodable(path, tokenizer, ids, seen, log)
    return {str(int(i)): text for i, text in zip(ids, texts, strict=True)}


def _refuse_undecodable(
    path: str, tokenizer: Any, ids: np.ndarray, seen: RolloutPass, log: Log
) -> NoReturn:
    """The first id the tokenizer fails to decode, named with the first row it is on."""
    for token in ids.tolist():
        try:
            tokenizer.decode([token], skip_special_tokens=False)
        except library_failures() as exc:
            row = min(r for r, part in seen.tokens.items() if (part.ids == token).any())
            at = log.sources.at(row, log.roles.column("input_ids"))
            problem = (str(exc).splitlines() or [type(exc).__name__])[0]
            msg = (
                f"`tokenizer={path!r}`: {at}: token {token}: the tokenizers library fails to "
                f"decode it ({problem}). Hint: give another tokenizer.json, or leave "
                "`tokenizer` out"
            )
            raise UsageError(msg) from None
    raise UsageError(f"`tokenizer={path!r}`: the tokenizers library fails to decode the tokens")


def choose_groups(
    kinds: np.ndarray, tokens: np.ndarray | None, sizes: np.ndarray, options: ReportOptions
) -> tuple[np.ndarray, np.ndarray]:
    """The groups the table lists and the groups whose rollouts the page holds, both sorted.
    Detail: up to half of ``detail_groups`` are the worst (zero-variance or near-tie, most
    action tokens first; most rollouts without token ids), the rest a seeded sample of the
    others. Listed: every group up to ``sample_groups``, else the detail groups and a seeded
    sample of the others."""
    n = len(kinds)
    rng = np.random.default_rng(options.seed)
    weight = tokens if tokens is not None else sizes
    worst_pool = np.flatnonzero((kinds != SIGNAL) & (kinds != SINGLETON))
    worst = worst_pool[np.argsort(-weight[worst_pool], kind="stable")][: options.detail_groups // 2]
    rest = np.setdiff1d(np.arange(n), worst)
    take = min(options.detail_groups - len(worst), len(rest))
    detail = np.sort(np.concatenate([worst, rng.choice(rest, take, replace=False)]))
    if n <= options.sample_groups:
        return np.arange(n), detail
    others = np.setdiff1d(np.arange(n), detail)
    take = max(0, min(options.sample_groups - len(detail), len(others)))
    listed = np.sort(np.concatenate([detail, rng.choice(others, take, replace=False)]))
    return listed, detail


def histogram(
    x: np.ndarray | None, bins: int, *, integers: bool = False
) -> dict[str, list[float]] | None:
    """Counts over equal bins from the lowest value to the highest (NaN left out); integers
    get bins of whole numbers."""
    if x is None:
        return None
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not len(x):
        return None
    lo, hi = float(x.min()), float(x.max())
    return histogram_of(iter([x]), lo, hi, bins, integers=integers)


def trends(
    log: Log, found: Audit, kinds: np.ndarray, lengths_: np.ndarray | None
) -> dict[str, list[float]] | None:
    """Per step (a ``step`` column: the presets write the step each dump file belongs to): its
    rollouts, zero-variance share, mean reward and mean length in action tokens."""
    step_of_row = row_steps(log)
    if step_of_row is None:
        return None
    rows = found.rows
    step = step_of_row[rows.last_segment_row()]
    have = ~np.isnan(step)
    if not have.any():
        return None
    steps, at = np.unique(step[have], return_inverse=True)
    n = np.bincount(at, minlength=len(steps))
    codes = rows.rollout_groups()[have]
    zero_variance = found.stats.zero_variance[codes]
    out = {
        "step": steps.tolist(),
        "rollouts": n.tolist(),
        "zero_variance_share": (np.bincount(at, weights=zero_variance) / n).tolist(),
        "near_tie_share": (np.bincount(at, weights=kinds[codes] == NEAR_TIE) / n).tolist(),
        "mean_reward": (np.bincount(at, weights=rows.rollout_rewards()[have]) / n).tolist(),
    }
    if lengths_ is not None:
        out["mean_length"] = (np.bincount(at, weights=lengths_[have]) / n).tolist()
    return out


HEALTH_SERIES = {  # by step: the audit's section, the figure
    "zero_variance_rollout_share": ("groups_by_step", "zero_variance_rollout_share"),
    "truncated_share": ("lengths", "truncated_share"),
    "mean_length": ("lengths", "length"),
    "mean_lag": ("staleness", "mean_lag"),
    "entropy_token_mean": ("entropy", None),
}


def health_by_step(
    log: Log, found: Audit, seen: RolloutPass, plan: Callable[[], Run], batch_rows: int
) -> dict[str, Any] | None:
    """The run view, per step (the ``step`` role; None without one): the audit's figures of
    ``audit --by step`` (:func:`advcli.run.health.sections`: the zero-variance share, the
    truncated share, the mean length, the mean lag, the token entropy), the rewards'
    (:func:`rewards_by_step`: the pass rate, else the mean reward, and quantiles), with both
    log-prob streams the mean |δ| and k3 over the step's action tokens and, with a
    correction, the share masked; and the prompts moving most between steps."""
    with progress.stage("the health by step"):
        advantage = health.rollout_advantages(plan, found.rows)
        found_sections = health.sections(found, log, advantage=advantage, by_step=True,
                                         batch_rows=batch_rows)  # fmt: skip
    steps = sorted(found_sections["groups_by_step"], key=float)
    if not steps:
        return None
    series: dict[str, list[float | None]] = {}
    for name, (section, figure) in HEALTH_SERIES.items():
        found_section = found_sections.get(section)
        if not isinstance(found_section, dict):  # omitted: the log lacks its column
            continue
        by = found_section if section == "groups_by_step" else found_section["by_step"]
        values = [by.get(k) if figure is None else by.get(k, {}).get(figure) for k in steps]
        values = [v["mean"] if isinstance(v, dict) else v for v in values]  # a summary's mean
        if any(v is not None for v in values):
            series[name] = values
    on_steps = StepPlaces.of(found, log, [float(k) for k in steps])
    rewards = rewards_by_step(log, found, on_steps, batch_rows, seen.prompt_hash)
    series.update(rewards.pop("series"))
    if seen.mismatch is not None:
        series.update(_mismatch_by_step(found, on_steps, seen.mismatch, seen.correction))
    return {"step": on_steps.values.tolist(), "series": series, **rewards}


@dataclass(frozen=True)
class StepPlaces:
    """The rollouts placed on the run view's steps as the audit places them
    (:func:`advcli.run.health.rollout_steps`): a rollout on no step counts on none."""

    values: np.ndarray  # the steps, ascending
    at: np.ndarray  # per rollout: the index of its step (meaningful where ``on``)
    on: np.ndarray  # per rollout: on one of ``values``

    @classmethod
    def of(cls, found: Audit, log: Log, steps: list[float]) -> StepPlaces:
        values = np.array(steps, dtype=np.float64)
        step = health.rollout_steps(found.rows, log)
        at = np.minimum(np.searchsorted(values, step), len(values) - 1)
        return cls(values, at, np.isfinite(step) & (values[at] == step))


MOVERS = 200  # the prompts moving most between steps that the page lists


def rewards_by_step(
    log: Log, found: Audit, on: StepPlaces, batch_rows: int, prompt_hashes: np.ndarray | None
) -> dict[str, Any]:
    """Per step, over its rollouts with a reward: the pass rate (as ``prompts``: a rollout
    passes when its reward ≥ the higher of two reward values,
    :func:`advcli.core.prompts.default_success`), else, where the rewards take another number
    of values, the mean reward; the rewards' :data:`~advcli.core.prompts.REWARD_QUANTILES`
    (``reward_q10`` …). ``movers``: the prompts moving most (:data:`MOVERS`), each by the
    largest change of that figure between two consecutive steps it was seen at
    (:func:`advcli.core.prompts.largest_moves`), matched as ``prompts`` matches them."""
    rows = found.rows
    unscored = rows.unscored_rollouts()
    scored = np.ones(rows.n_rollouts, dtype=bool) if unscored is None else ~unscored
    reward = rows.rollout_rewards()
    success = default_success(reward[scored])
    kept = scored & on.on
    at, kept_reward = on.at[kept], reward[kept]
    n = np.bincount(at, minlength=len(on.values))
    per_step = kept_reward >= success if success is not None else kept_reward
    with np.errstate(invalid="ignore", divide="ignore"):
        figure = np.bincount(at, weights=per_step, minlength=len(on.values)) / n
    quantiles = step_quantiles(at, kept_reward, len(on.values), REWARD_QUANTILES)
    series = {"pass_rate" if success is not None else "mean_reward": _nullable(figure)}
    for j, q in enumerate(REWARD_QUANTILES):
        series[f"reward_q{round(100 * q)}"] = _nullable(quantiles[:, j])
    return {
        "series": series,
        "success": success,
        "movers": _movers(log, found, on, kept, success, batch_rows, prompt_hashes),
    }


def _nullable(x: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else float(v) for v in x]


def _movers(
    log: Log,
    found: Audit,
    on: StepPlaces,
    kept: np.ndarray,
    success: float | None,
    batch_rows: int,
    prompt_hashes: np.ndarray | None,
) -> dict[str, Any]:
    """The prompts moving most between steps (see :func:`rewards_by_step`)."""
    rows = found.rows
    basis = next(b for b in BASES if b in log_bases(log))
    identity = group_identity(log, rows, basis, batch_rows, prompt_hashes)
    keys, prompt_of_group = np.unique(identity, return_inverse=True)
    prompt_of_group = prompt_of_group.reshape(-1)
    group_of_prompt = np.full(len(keys), len(prompt_of_group), dtype=np.int64)
    np.minimum.at(group_of_prompt, prompt_of_group, np.arange(len(prompt_of_group)))
    codes = rows.rollout_groups()[kept]
    stats = prompt_stats(prompt_of_group[codes], on.values[on.at[kept]],
                         rows.rollout_rewards()[kept],
                         success if success is not None else np.inf, len(keys))  # fmt: skip
    cells = stats.cells
    value = cells.pass_rate if success is not None else cells.mean_reward
    moves = largest_moves(cells, value)
    listed = slice(0, MOVERS)
    groups = group_of_prompt[moves.prompt[listed]]
    return {
        "figure": "pass rate" if success is not None else "mean reward",
        "matched_by": BASES[basis],
        "total": len(moves.prompt),
        "prompt": prompt_labels(log, found, groups, batch_rows),
        "from_step": cells.step[moves.before[listed]].tolist(),
        "to_step": cells.step[moves.after[listed]].tolist(),
        "before": value[moves.before[listed]].tolist(),
        "after": value[moves.after[listed]].tolist(),
        "change": moves.change[listed].tolist(),
    }


def _mismatch_by_step(
    found: Audit, on: StepPlaces, per_row: np.ndarray, correction: Correction | None
) -> dict[str, list[float | None]]:
    """Per step: Σ|δ|, Σk3 and the masked tokens over Σ action tokens."""
    rows = found.rows
    actions = found.action_tokens
    assert actions is not None  # both streams: token ids
    at, n_steps = on.at[on.on], len(on.values)
    n = np.bincount(at, weights=actions[on.on], minlength=n_steps)
    names = ["abs_delta_mean", "k3_mean"] + (["masked_token_share"] if correction else [])
    out: dict[str, list[float | None]] = {}
    for j, name in enumerate(names):
        summed = np.bincount(rows.rollout_codes, weights=per_row[:, j], minlength=rows.n_rollouts)
        by_step = np.bincount(at, weights=summed[on.on], minlength=n_steps)
        out[name] = [float(x) / m if m else None for x, m in zip(by_step, n, strict=True)]
    return out


PROMPT_CHARS = 80  # of each listed group's prompt, in the page (what the search box searches)


def first_rows(found: Audit) -> np.ndarray:
    """Each group's first row (-1 for a group without rows)."""
    assert found.rows.group_codes is not None
    return first_rows_of(found.rows.group_codes, len(found.stats.size))


def group_texts(log: Log, found: Audit, listed: np.ndarray, batch_rows: int) -> list[str] | None:
    """The first :data:`PROMPT_CHARS` characters of each listed group's prompt (its first
    row's) from :func:`prompt_text_column`; None without one."""
    column = prompt_text_column(log)
    if column is None:
        return None
    wanted = first_rows(found)[listed]
    order = np.argsort(wanted, kind="stable")
    texts = [""] * len(listed)
    for at, values in rows_of_column(log, column, wanted[order], batch_rows):
        for i, value in zip(order[at].tolist(), values.to_pylist(), strict=True):
            texts[i] = shortened(value or "", PROMPT_CHARS)
    return texts


def prompt_labels(log: Log, found: Audit, groups: np.ndarray, batch_rows: int) -> list[str]:
    """How the page names each of ``groups``' prompts: its first words
    (:func:`group_texts`), else its prompt id."""
    texts = group_texts(log, found, groups, batch_rows)
    if texts is not None:
        return texts
    assert found.rows.group_keys is not None
    return [shortened(k) for k in found.rows.group_keys.take(pa.array(groups)).to_pylist()]


def components(
    log: Log, found: Audit, names: list[str], bins: int
) -> dict[str, dict[str, list[float]] | None]:
    """A reward histogram per reward component column (TRL's reward functions, GDPO's
    rewards), over the rollouts (their last segment's value)."""
    if not names:
        return {}
    table = log.source.columns(names)
    last = found.rows.last_segment_row()
    out = {}
    for name in names:
        where = f"{found.files}: column '{name}' (named as a reward column)"
        x = floats_of(table.column(name), where, "name the reward columns with `reward_columns`")
        out[name] = histogram(x[last], bins)
    return out


def group_table(
    found: Audit,
    kinds: np.ndarray,
    tokens: np.ndarray | None,
    listed: np.ndarray,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The listed groups, one row each: group code, prompt id, size, mean, std, action tokens,
    kind (an index into ``kinds``), and the ``extra`` columns (None where the log has none)."""
    stats = found.stats
    keys = found.rows.group_keys
    assert keys is not None
    shown = [shortened(k) for k in keys.take(pa.array(listed)).to_pylist()]
    std = np.where(np.isnan(stats.std[listed]), 0.0, stats.std[listed])
    table = {
        "code": listed.tolist(),
        "prompt": shown,
        "size": stats.size[listed].tolist(),
        "mean": stats.mean[listed].tolist(),
        "std": std.tolist(),
        "action_tokens": tokens[listed].tolist() if tokens is not None else None,
        "kind": kinds[listed].tolist(),
        **extra,
    }
    return {"total": len(kinds), "listed": len(listed), "columns": table}


def listed_extras(
    log: Log,
    found: Audit,
    seen: RolloutPass,
    listed: np.ndarray,
    in_detail: np.ndarray,
    lengths_: np.ndarray | None,
    batch_rows: int,
) -> dict[str, Any]:
    """The groups table's columns beyond the audit's: the prompt's first words, the step, the
    spread of the rollouts' advantages (max − min), whether the page holds its rollouts."""
    rows = found.rows
    codes, n = rows.rollout_groups(), len(found.stats.size)
    step_of_row = row_steps(log)
    step = None
    if step_of_row is not None:
        per_group = np.full(n, np.nan)
        per_group[codes[::-1]] = step_of_row[rows.last_segment_row()][::-1]  # the first's
        step = [None if np.isnan(x) else float(x) for x in per_group[listed]]
    spread = None
    if (mean := seen.rollout_advantages(lengths_)) is not None:
        width = G.spread(mean, codes, n)[listed]
        spread = np.where(np.isfinite(width), width, 0.0).tolist()
    return {
        "text": group_texts(log, found, listed, batch_rows),
        "step": step,
        "spread": spread,
        "detail": in_detail[listed].tolist(),
    }
