"""advcli in Python: one function per command, and the same on a table in memory.

The command line (:mod:`advcli.cli`) is a thin layer over these functions; each takes what the
command takes, as keyword arguments, and returns a typed result (:mod:`advcli.results`) whose
``as_dict()`` is what the command prints with ``--json``::

    import advcli

    summary = advcli.annotate("logs/", "gae.parquet", method="gae", gamma=0.99, lam=0.95)
    summary.rows_written, summary.advantage_mean
    table = advcli.annotate_table(arrow_table, method="grpo", convention="verl")
    report = advcli.audit("logs/").report

A method's parameters (``gamma``, ``scale``, ``singleton``, ...) are the ``annotate`` options
with ``-`` written ``_``; ``None`` (or leaving one out) takes the method's and the convention's
default, and one the method does not take is refused. Errors are
:class:`~advcli.errors.AdvcliError` s, with the message the CLI prints.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

from advcli import jobs, methods, progress
from advcli._version import __version__
from advcli.accounting import Audit, audit_log
from advcli.commands.check import check
from advcli.commands.describe import describe
from advcli.commands.methods import describe_method, list_methods
from advcli.core.group import ZERO_VARIANCE_TOL
from advcli.critic.options import CriticOptions
from advcli.critic.scorer import CriticScorer, scored_batches
from advcli.engine import Run, Scorer, Summary
from advcli.errors import UsageError
from advcli.io import manifests
from advcli.io.folders import Folder
from advcli.io.outputs import check_output, check_output_folder, output_format
from advcli.io.schema import Roles, parse_col_mapping, resolve_roles
from advcli.io.sources import Sources, TableSource
from advcli.io.split_tokens import SplitTokens, in_users_layout, joined
from advcli.io.writers import METADATA_KEY, NONFINITE, write_batches, write_bytes
from advcli.lazy_imports import pa, pl
from advcli.logs import (
    BATCH_ROWS,
    Inputs,
    Log,
    input_paths,
)
from advcli.params import check_option_file
from advcli.presets import PresetOptions
from advcli.progress import Reporter, reporting
from advcli.reports import ReportOptions, compare
from advcli.reports.collect import Gathered, gather
from advcli.results import (
    AnnotateResult,
    CheckResult,
    Description,
    MethodDescription,
    MethodLine,
    MethodList,
    MethodParameter,
    ReportResult,
    ScoreResult,
    ShardResult,
    Verification,
)
from advcli.shards import ShardOptions
from advcli.shards.build import shard
from advcli.shards.manifest import verify as verify_shards

__all__ = [
    "AnnotateResult",
    "Audit",
    "CheckResult",
    "CriticOptions",
    "Description",
    "MethodDescription",
    "MethodLine",
    "MethodList",
    "MethodParameter",
    "ReportOptions",
    "ReportResult",
    "Reporter",
    "ScoreResult",
    "ShardOptions",
    "ShardResult",
    "Verification",
    "annotate",
    "annotate_table",
    "audit",
    "check",
    "describe",
    "describe_method",
    "list_methods",
    "report",
    "reporting",
    "score",
    "shard",
    "verify",
]


def _passed_through(log: Log) -> list[str]:
    """The log's columns that no role reads: written as they came."""
    read = set(log.roles.columns.values())
    return [name for name in log.source.schema.names if name not in read]


def check_nonfinite(nonfinite: str) -> None:
    if nonfinite not in NONFINITE:
        msg = f"--nonfinite {nonfinite}: expected one of {', '.join(NONFINITE)}"
        raise UsageError(msg)


def annotate(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    format: str | None = None,
    force: bool = False,
    nonfinite: str = "error",
    critic: CriticOptions | str | os.PathLike[str] | None = None,
    from_: str | None = None,
    preset_options: PresetOptions | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
    **params: Any,
) -> AnnotateResult:
    """``advcli annotate``: stream the log through ``method`` into ``out``; returns the summary.

    ``critic`` (its options, or the ONNX file's path) scores the values (those of the log, if
    it has any, are then not read: a
    warning says so and the metadata records it); ``from_`` reads the log as that framework
    wrote it (``--from``). ``nonfinite="null"`` writes a NaN or infinity of a JSONL output as
    null (counted: ``nonfinite_nulls``) instead of refusing it. ``engine="ray"`` runs the
    passes on a Ray cluster, one task per input file (``ray_address``, else ``RAY_ADDRESS``,
    else a local Ray); ``out`` is then a folder of one Parquet part per input file and a
    manifest.
    """
    started = time.perf_counter()
    out = os.fspath(out)
    if critic is not None and not isinstance(critic, CriticOptions):
        critic = CriticOptions(os.fspath(critic))  # the ONNX file's path
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   method=method, convention=convention, params=params, engine=engine,
                   ray_address=ray_address, batch_rows=batch_rows)  # fmt: skip
    assert job.method is not None
    if critic is not None and not job.method.reads_values:
        reading = ", ".join(name for name, m in methods.REGISTRY.items() if m.reads_values)
        msg = f"--critic: {method} reads no values. Hint: drop --critic, or use one of {reading}"
        raise UsageError(msg)
    if job.ray is not None:
        return _annotate_on_ray(job, out, fmt=format, force=force, critic=critic, started=started)
    fmt = output_format(out, format)
    check_nonfinite(nonfinite)
    check_output(out, job.files, force=force)
    log = job.open()
    run = job.plan(log, _critic_scorer(log, critic, CriticScorer))
    _warn_rescored(run)
    summary = Summary()
    with run.final_pass("annotating"):
        batches = summary.counted(run.annotated())
        if isinstance(log.source, SplitTokens):  # written in the user's layout
            batches = in_users_layout(log.source, batches)
        written = write_batches(
            out, fmt, run.metadata(), batches, force=force, nonfinite=nonfinite,
            passed_through=_passed_through(log),
        )  # fmt: skip
    return summary.result(
        run, written.rows, written.tokens, nonfinite_nulls=written.nulled or None, output=out,
        seconds=round(time.perf_counter() - started, 3),
    )  # fmt: skip


def _critic_scorer(
    log: Log, critic: CriticOptions | None, make: Callable[[CriticOptions, Sources, Roles], Scorer]
) -> Scorer | None:
    """``annotate --critic``'s scorer (``make``: here or on the cluster); None without it."""
    if critic is None:
        return None
    log.require({"input_ids"}, what="--critic")
    return make(critic, log.sources, log.roles)


def _warn_rescored(run: Run) -> None:
    if run.scorer is not None and (column := run.roles["values"]) is not None:
        run.warnings.append(
            f"the log's '{column}' column is not read: --critic scores the values "
            "(recorded in the output's metadata)"
        )


def _annotate_on_ray(
    job: jobs.Job,
    out: str,
    *,
    fmt: str | None,
    force: bool,
    critic: CriticOptions | None,
    started: float,
) -> AnnotateResult:
    """``annotate --engine ray``: ``out`` is a folder of parts (see :mod:`advcli.on_ray`)."""
    from advcli.on_ray import tasks as on_ray

    assert job.ray is not None
    _check_parts_output(out, fmt, job.files, force=force)
    log = job.reading.open(job.paths)
    if isinstance(log.source, SplitTokens):  # its parts would not be in the user's layout
        msg = f"{log.files}: prompt_ids + response_ids on Ray: not yet"
        raise UsageError(f"{msg}. Hint: annotate it without --engine ray")
    log.source = job.ray.place(log.source)
    ray = job.ray.ray
    run = job.plan(log, _critic_scorer(log, critic, lambda *args: on_ray.WorkerCritic(ray, *args)))
    _warn_rescored(run)
    with progress.stage("annotating on Ray"):
        parts, rows, tokens, summary = on_ray.write_parts(ray, run, out, force=force)
    return summary.result(
        run, rows, tokens, output=out, engine="ray", parts=parts,
        seconds=round(time.perf_counter() - started, 3),
    )  # fmt: skip


def _check_parts_output(out: str, fmt: str | None, files: list[str], *, force: bool) -> None:
    """``--out`` of ``--engine ray``: a folder of Parquet parts, refused as output folders are."""
    if fmt not in (None, "parquet") or out == "-":
        shown = f"--format {fmt}" if fmt not in (None, "parquet") else "--out -"
        raise UsageError(f"{shown}: --engine ray writes Parquet parts into a folder")
    from advcli.on_ray import tasks as on_ray  # Ray's side is imported only when used

    check_output_folder(out, files, force=force, listed=on_ray.listed_parts)


def annotate_table(
    table: Any,
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    **params: Any,
) -> Any:
    """``annotate`` on a table in memory (a pyarrow Table, or a polars or pandas DataFrame):
    the table with the method's columns, its rows in order (less any the method drops), of
    the kind given. The run's metadata is the Arrow schema's ``advcli`` key (pandas: the
    frame's ``attrs["advcli"]``; polars keeps none). Errors name rows of ``<table>``."""
    given = table
    table = _arrow_table(table)
    annotated = _annotate_arrow(table, method=method, convention=convention, col=col, **params)
    if isinstance(given, pa.Table):
        return annotated
    metadata = json.loads(annotated.schema.metadata[METADATA_KEY])
    if type(given).__module__.startswith("polars"):
        return pl.from_arrow(annotated)
    frame = annotated.to_pandas()
    frame.attrs["advcli"] = metadata
    return frame


def _arrow_table(table: Any) -> pa.Table:
    """A pyarrow Table of what ``annotate_table`` was given."""
    if isinstance(table, pa.Table):
        return table
    kind = f"{type(table).__module__}.{type(table).__name__}"
    if kind.startswith("polars.") and hasattr(table, "to_arrow"):
        return table.to_arrow()
    if kind.startswith("pandas.") and type(table).__name__ == "DataFrame":
        return pa.Table.from_pandas(table, preserve_index=False)
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    msg = f"annotate_table takes a pyarrow Table or a polars or pandas DataFrame, not {kind}"
    raise UsageError(msg)


def _annotate_arrow(
    table: pa.Table,
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    **params: Any,
) -> pa.Table:
    job = jobs.job([], method=method, convention=convention, params=params)
    mapping = parse_col_mapping(col)
    sources = Sources(files=["<table>"], row_counts=[table.num_rows])
    source = joined(TableSource(table, sources), mapping)
    run = job.plan(Log(source, resolve_roles(source.schema, mapping, "<table>")))
    tables = [batch.table for batch in run.annotated()]
    if isinstance(source, SplitTokens):  # in the user's layout
        tables = [source.in_users_layout(t) for t in tables]
    annotated = pa.concat_tables(tables) if tables else table.slice(0, 0)
    metadata = {METADATA_KEY: json.dumps(run.metadata(), sort_keys=True)}
    return annotated.replace_schema_metadata(metadata)


def audit(
    inputs: Inputs,
    *,
    col: list[str] | None = None,
    tol: float = ZERO_VARIANCE_TOL,
    near_tie: float | None = None,
    from_: str | None = None,
    preset_options: PresetOptions | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Audit:
    """``advcli audit``: zero-variance, near-tie and singleton accounting of one log
    (streamed). ``near_tie``: the group std below which a group is a near-tie (default 5% of
    the log's reward range); ``engine="ray"`` counts each file's tokens on a Ray cluster."""
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   engine=engine, ray_address=ray_address, batch_rows=batch_rows)  # fmt: skip
    return audit_log(job.open(), tol=tol, near_tie=near_tie, batch_rows=batch_rows,
                     count=job.ray.count if job.ray is not None else None)  # fmt: skip


def report(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    method: str | None = None,
    convention: str | None = None,
    col: list[str] | None = None,
    force: bool = False,
    options: ReportOptions | None = None,
    from_: str | None = None,
    preset_options: PresetOptions | None = None,
    batch_rows: int = BATCH_ROWS,
    **params: Any,
) -> ReportResult:
    """``advcli report``: one self-contained HTML page (``out``) of the log's groups, rewards
    and advantages (``method``'s, or those an annotated log holds). Needs ``advcli[report]``."""
    from advcli.reports import page

    started = time.perf_counter()
    out = os.fspath(out)
    options = options or ReportOptions()
    page.bokeh()  # the extra is missing: say so before reading anything
    if options.compare is not None or options.steps is not None or options.label is not None:
        compare.check_options(options.compare, options.steps, options.label)
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   method=method, convention=convention, params=params,
                   batch_rows=batch_rows)  # fmt: skip
    check_output(out, job.files, force=force)
    log = job.open()
    run = job.plan(log) if job.method is not None else None
    p = job.params
    if p is not None and "reward_columns" in p and p.reward_columns:
        components = [c.strip() for c in p.reward_columns.split(",")]
    elif job.reading.preset is not None:
        components = job.reading.preset.reward_components(log.source.schema, job.reading.options)
    else:
        components = []
    comparing = options.compare is not None or options.steps is not None
    gathered = gather(log, options, run=run, reward_components=components,
                      batch_rows=batch_rows, hash_prompts=comparing)  # fmt: skip
    payload = gathered.payload
    if comparing:
        payload["compare"] = _comparison(gathered, job, options, batch_rows, force=force, out=out)
    with progress.stage("writing the page"):
        html = page.render(payload, f"advcli report: {', '.join(payload['files'])}").encode()
        write_bytes(out, html, force=force)
    groups = payload["groups"]
    return ReportResult(
        output=out,
        bytes=len(html),
        rollouts=payload["overview"]["rollouts"],
        groups=groups["total"],
        groups_listed=groups["listed"],
        detail_groups=len(payload["details"]),
        advantages_from=payload["advantages_from"],
        seconds=round(time.perf_counter() - started, 3),
        warnings=payload["warnings"],
    )


def _comparison(
    gathered: Gathered,
    job: jobs.Job,
    options: ReportOptions,
    batch_rows: int,
    *,
    force: bool,
    out: str,
) -> dict[str, Any]:
    """The Compare section of ``report``: the log beside ``--compare``'s (read as the job
    reads its log, its own page's detail left out), or two of its ``--steps``."""
    if options.steps is not None:
        a, b = compare.step_sides(gathered, options.steps, options.label)
        return compare.comparison(a, b, options.bins, batch_rows)
    assert options.compare is not None
    other = dataclasses.replace(job, paths=tuple(input_paths(options.compare)))
    check_output(out, other.files, force=force)
    log = other.open()
    run = other.plan(log) if other.method is not None else None
    lean = dataclasses.replace(options, detail_groups=0, sample_groups=1, token_budget=0)
    theirs = gather(log, lean, run=run, batch_rows=batch_rows, hash_prompts=True)
    a, b = compare.log_sides(gathered, theirs, options.label)
    return compare.comparison(a, b, options.bins, batch_rows)


def score(
    inputs: Inputs,
    out: str | os.PathLike[str],
    critic: CriticOptions | str | os.PathLike[str],
    *,
    col: list[str] | None = None,
    format: str | None = None,
    force: bool = False,
    nonfinite: str = "error",
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> ScoreResult:
    """``advcli score``: add (or replace) a ``values`` column computed by the critic
    (``critic``: its options, or the path of the ONNX file). ``engine="ray"`` scores each work
    unit on a Ray cluster, on a GPU each where it has GPUs; ``out`` is then a folder of parts."""
    started = time.perf_counter()
    out = os.fspath(out)
    opts = critic if isinstance(critic, CriticOptions) else CriticOptions(os.fspath(critic))
    job = jobs.job(input_paths(inputs), col=col, engine=engine, ray_address=ray_address,
                   batch_rows=batch_rows)  # fmt: skip
    if job.ray is not None:
        return _score_on_ray(job, out, opts, fmt=format, force=force, started=started)
    fmt = output_format(out, format)
    check_nonfinite(nonfinite)
    check_output(out, job.files, force=force)
    log = job.open()
    source, roles = log.source, log.roles
    log.require({"input_ids"}, what="score")
    scorer = CriticScorer(opts, source.sources, roles)
    batches = scored_batches(source, roles, scorer, roles["values"] or "values", batch_rows)
    metadata = _score_metadata(scorer.metadata, source.sources.files)
    written = write_batches(
        out, fmt, metadata, batches, force=force, nonfinite=nonfinite,
        passed_through=_passed_through(log),
    )  # fmt: skip
    return ScoreResult(
        nonfinite_nulls=written.nulled or None,
        rows=written.rows,
        tokens=written.tokens,
        provider=scorer.critic.provider,
        tokens_per_second=scorer.tokens_per_second,
        truncated_rows=scorer.truncated_rows,
        output=out,
        seconds=round(time.perf_counter() - started, 3),
    )


def _score_metadata(critic: dict[str, Any], files: list[str]) -> dict[str, Any]:
    return {**critic, "advcli_version": __version__, "command": "score", "inputs": files}


def _score_on_ray(
    job: jobs.Job,
    out: str,
    opts: CriticOptions,
    *,
    fmt: str | None,
    force: bool,
    started: float,
) -> ScoreResult:
    """``score --engine ray``: ``out`` is a folder of parts (see :mod:`advcli.on_ray`)."""
    from advcli.on_ray import tasks as on_ray

    assert job.ray is not None
    check_option_file("--critic", opts.path, "model.onnx")
    _check_parts_output(out, fmt, job.files, force=force)
    log = job.open()
    log.require({"input_ids"}, what="score")
    score_job = on_ray.ScoreJob(
        log=on_ray.cluster_log(log.source), roles=log.roles, critic=opts,
        column=log.roles["values"] or "values", batch_rows=job.batch_rows,
        metadata=_score_metadata({}, log.sources.files),
    )  # fmt: skip
    scored = on_ray.score_parts(job.ray.ray, score_job, out, force=force)
    seconds = round(time.perf_counter() - started, 3)
    return ScoreResult(**scored, output=out, engine="ray", seconds=seconds)


def verify(folder: str | os.PathLike[str]) -> Verification:
    """``advcli verify``: a folder of shards (``advcli shard``) or of parts (``annotate
    --engine ray``), re-read against its manifest; raises on the first problem."""
    from advcli.on_ray import tasks as on_ray  # imports no Ray

    read = manifests.read_json(Folder(os.fspath(folder)))
    if read is not None and on_ray.is_parts_manifest(read[1]):
        return on_ray.verify_parts(os.fspath(folder))
    return verify_shards(folder)
