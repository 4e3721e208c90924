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
from pathlib import Path
from typing import Any

import pyarrow as pa

from advcli import methods, presets
from advcli._version import __version__
from advcli.accounting import Audit, audit_log
from advcli.commands.check import check
from advcli.commands.describe import describe
from advcli.core.group import ZERO_VARIANCE_TOL
from advcli.critic.scorer import CriticOptions, CriticScorer, scored_batches
from advcli.engine import Run, Scorer, Summary, plan_run
from advcli.errors import UsageError
from advcli.io.file_sources import ParquetSource
from advcli.io.folders import Folder
from advcli.io.outputs import atomic_path, check_output, check_output_folder, output_format
from advcli.io.schema import Roles, parse_col_mapping, resolve_roles
from advcli.io.sources import Sources, TableSource, expand_inputs
from advcli.io.writers import METADATA_KEY, NONFINITE, write_batches
from advcli.logs import (
    BATCH_ROWS,
    Inputs,
    Log,
    Progress,
    Stage,
    check_engine,
    input_paths,
    no_stage,
    open_log,
)
from advcli.params import Params
from advcli.presets import PresetOptions
from advcli.reports import ReportOptions, collect
from advcli.results import (
    AnnotateResult,
    CheckResult,
    Description,
    ReportResult,
    ScoreResult,
    ShardResult,
    Verification,
)
from advcli.shards import ShardOptions, shard
from advcli.shards import verify as verify_shards

__all__ = [
    "AnnotateResult",
    "Audit",
    "CheckResult",
    "CriticOptions",
    "Description",
    "ReportOptions",
    "ReportResult",
    "ScoreResult",
    "ShardOptions",
    "ShardResult",
    "Verification",
    "annotate",
    "annotate_table",
    "audit",
    "check",
    "describe",
    "report",
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


def input_files(paths: list[str], preset: str | None) -> list[str]:
    """The files ``paths`` name (folders and globs expanded), as the log will read them."""
    return presets.get(preset).files(paths) if preset else expand_inputs(paths)


def annotate(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    nonfinite: str = "error",
    critic: CriticOptions | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    stage: Stage = no_stage,
    progress: Progress | None = None,
    batch_rows: int = BATCH_ROWS,
    **params: Any,
) -> AnnotateResult:
    """``advcli annotate``: stream the log through ``method`` into ``out``; returns the summary.

    ``critic`` scores the values (those of the log, if it has any, are then not read: a
    warning says so and the metadata records it); ``preset`` reads the log as that framework
    wrote it (``--from``). ``nonfinite="null"`` writes a NaN or infinity of a JSONL output as
    null (counted: ``nonfinite_nulls``) instead of refusing it. ``engine="ray"`` runs the
    passes on a Ray cluster, one task per input file (``ray_address``, else ``RAY_ADDRESS``,
    else a local Ray); ``out`` is then a folder of one Parquet part per input file and a
    manifest.
    """
    started = time.perf_counter()
    out = os.fspath(out)
    p = methods.resolve(method, presets.convention_for(convention, preset), **params)
    paths = input_paths(inputs)
    check_engine(engine)
    if critic is not None and not methods.get(method).reads_values:
        reading = ", ".join(name for name, m in methods.REGISTRY.items() if m.reads_values)
        msg = f"--critic: {method} reads no values. Hint: drop --critic, or use one of {reading}"
        raise UsageError(msg)
    if engine == "ray":
        read_as = _ReadAs(col, preset, preset_options)
        return _annotate_on_ray(paths, out, p, read_as, fmt=fmt, force=force, critic=critic,
                                address=ray_address, stage=stage, progress=progress,
                                batch_rows=batch_rows, started=started)  # fmt: skip
    fmt = output_format(out, fmt)
    check_nonfinite(nonfinite)
    check_output(out, input_files(paths, preset), force=force)
    log = open_log(paths, col, preset=preset, options=preset_options)
    scorer = _critic_scorer(log, critic, CriticScorer)
    run = plan_run(log, p, scorer=scorer, stage=stage, batch_rows=batch_rows)
    _warn_rescored(run)
    summary = Summary()
    with stage("annotating"):
        batches = summary.counted(run.annotated())
        written = write_batches(
            out, fmt, run.metadata(), batches, force=force, progress=progress,
            nonfinite=nonfinite, passed_through=_passed_through(log),
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


@dataclasses.dataclass(frozen=True)
class _ReadAs:
    """How to read a log: ``--col``, ``--from`` and its options."""

    col: list[str] | None = None
    preset: str | None = None
    options: PresetOptions | None = None

    def open(self, paths: list[str]) -> Log:
        return open_log(paths, self.col, preset=self.preset, options=self.options)


def _open_on_ray(
    paths: list[str], read_as: _ReadAs, address: str | None, stage: Stage, batch_rows: int
) -> tuple[Any, Log]:
    """The cluster, and the log as its tasks read it (a log that is not Parquet files is
    read into Ray's object store first)."""
    from advcli.on_ray import cluster as on_ray

    log = read_as.open(paths)
    ray = on_ray.connect(address)
    if not isinstance(log.source, ParquetSource):
        with stage("reading the log into Ray's object store"):
            log.source = on_ray.on_cluster(ray, log.source, batch_rows)
    return ray, log


def _annotate_on_ray(
    paths: list[str],
    out: str,
    p: Params,
    read_as: _ReadAs,
    *,
    fmt: str | None,
    force: bool,
    critic: CriticOptions | None,
    address: str | None,
    stage: Stage,
    progress: Progress | None,
    batch_rows: int,
    started: float,
) -> AnnotateResult:
    """``annotate --engine ray``: ``out`` is a folder of parts (see :mod:`advcli.on_ray`)."""
    from advcli.on_ray import tasks as on_ray

    _check_parts_output(out, fmt, input_files(paths, read_as.preset), force=force)
    ray, log = _open_on_ray(paths, read_as, address, stage, batch_rows)
    scorer = _critic_scorer(log, critic, lambda *args: on_ray.WorkerCritic(ray, *args))
    run = plan_run(log, p, scorer=scorer, stage=stage, batch_rows=batch_rows,
                   measure=on_ray.measured_on_ray(ray))  # fmt: skip
    _warn_rescored(run)
    with stage("annotating on Ray"):
        parts, rows, tokens, summary = on_ray.write_parts(
            ray, run, out, force=force, progress=progress
        )
    return summary.result(
        run, rows, tokens, output=out, engine="ray", parts=parts,
        seconds=round(time.perf_counter() - started, 3),
    )  # fmt: skip


def _check_parts_output(out: str, fmt: str | None, files: list[str], *, force: bool) -> None:
    """``--out`` of ``--engine ray``: a folder of Parquet parts, refused as output folders are."""
    if fmt not in (None, "parquet"):
        raise UsageError(f"--format {fmt}: --engine ray writes Parquet parts into a folder")
    from advcli.on_ray import tasks as on_ray  # Ray's side is imported only when used

    check_output_folder(out, files, force=force, listed=on_ray.listed_parts)


def annotate_table(
    table: pa.Table,
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    **params: Any,
) -> pa.Table:
    """``annotate`` on a table in memory: the table with the method's columns, its rows in
    order (less any the method drops); the run's metadata is the schema's ``advcli`` key.
    Errors name rows of ``<table>``."""
    p = methods.resolve(method, convention, **params)
    mapping = parse_col_mapping(col)
    roles = resolve_roles(table.schema, mapping, "<table>")
    source = TableSource(table, Sources(files=["<table>"], row_counts=[table.num_rows]))
    run = plan_run(Log(source, roles), p)
    tables = [batch.table for batch in run.annotated()]
    annotated = pa.concat_tables(tables) if tables else table.slice(0, 0)
    metadata = {METADATA_KEY: json.dumps(run.metadata(), sort_keys=True)}
    return annotated.replace_schema_metadata(metadata)


def audit(
    inputs: Inputs,
    *,
    col: list[str] | None = None,
    tol: float = ZERO_VARIANCE_TOL,
    near_tie: float | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    progress: Progress | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Audit:
    """``advcli audit``: zero-variance, near-tie and singleton accounting of one log
    (streamed). ``near_tie``: the group std below which a group is a near-tie (default 5% of
    the log's reward range); ``engine="ray"`` counts each file's tokens on a Ray cluster."""
    check_engine(engine)
    read_as = _ReadAs(col, preset, preset_options)
    count = None
    if engine == "ray":
        from advcli.on_ray import tasks as on_ray

        ray, log = _open_on_ray(input_paths(inputs), read_as, ray_address, no_stage, batch_rows)
        count = on_ray.counted_on_ray(ray, batch_rows)
    else:
        log = read_as.open(input_paths(inputs))
    return audit_log(log, tol=tol, near_tie=near_tie, progress=progress, batch_rows=batch_rows,
                     count=count)  # fmt: skip


def report(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    method: str | None = None,
    convention: str | None = None,
    col: list[str] | None = None,
    force: bool = False,
    options: ReportOptions | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    stage: Stage = no_stage,
    progress: Progress | None = None,
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
    conv = presets.convention_for(convention, preset)
    if method is None and (given := [name for name, v in params.items() if v is not None]):
        flag = methods.PARAMETERS[given[0]].flag if given[0] in methods.PARAMETERS else given[0]
        raise UsageError(f"{flag} is a method's parameter: add --method (e.g. --method grpo)")
    p = methods.resolve(method, conv, **params) if method is not None else None
    paths = input_paths(inputs)
    check_output(out, input_files(paths, preset), force=force)
    log = open_log(paths, col, preset=preset, options=preset_options)
    run = plan_run(log, p, stage=stage, batch_rows=batch_rows) if p is not None else None
    if p is not None and "reward_columns" in p and p.reward_columns:
        components = [c.strip() for c in p.reward_columns.split(",")]
    elif preset is not None:
        components = presets.get(preset).reward_components(
            log.source.schema, preset_options or PresetOptions()
        )
    else:
        components = []
    payload = collect(
        log, options, run=run, reward_components=components, stage=stage,
        progress=progress, batch_rows=batch_rows,
    )  # fmt: skip
    with stage("writing the page"):
        html = page.render(payload, f"advcli report: {', '.join(payload['files'])}").encode()
        with atomic_path(out, force=force) as tmp:
            tmp.write_bytes(html)
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


def score(
    inputs: Inputs,
    out: str | os.PathLike[str],
    critic: CriticOptions | str | os.PathLike[str],
    *,
    col: list[str] | None = None,
    fmt: str | None = None,
    force: bool = False,
    nonfinite: str = "error",
    engine: str = "local",
    ray_address: str | None = None,
    progress: Progress | None = None,
    batch_rows: int = BATCH_ROWS,
) -> ScoreResult:
    """``advcli score``: add (or replace) a ``values`` column computed by the critic
    (``critic``: its options, or the path of the ONNX file). ``engine="ray"`` scores each work
    unit on a Ray cluster, on a GPU each where it has GPUs; ``out`` is then a folder of parts."""
    started = time.perf_counter()
    out = os.fspath(out)
    opts = critic if isinstance(critic, CriticOptions) else CriticOptions(os.fspath(critic))
    paths = input_paths(inputs)
    check_engine(engine)
    if engine == "ray":
        return _score_on_ray(paths, out, opts, col=col, fmt=fmt, force=force,
                             address=ray_address, progress=progress, batch_rows=batch_rows,
                             started=started)  # fmt: skip
    fmt = output_format(out, fmt)
    check_nonfinite(nonfinite)
    check_output(out, input_files(paths, None), force=force)
    log = open_log(paths, col)
    source, roles = log.source, log.roles
    log.require({"input_ids"}, what="score")
    scorer = CriticScorer(opts, source.sources, roles)
    batches = scored_batches(source, roles, scorer, roles["values"] or "values", batch_rows)
    metadata = _score_metadata(scorer.metadata, source.sources.files)
    written = write_batches(
        out, fmt, metadata, batches, force=force, progress=progress, nonfinite=nonfinite,
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
    paths: list[str],
    out: str,
    opts: CriticOptions,
    *,
    col: list[str] | None,
    fmt: str | None,
    force: bool,
    address: str | None,
    progress: Progress | None,
    batch_rows: int,
    started: float,
) -> ScoreResult:
    """``score --engine ray``: ``out`` is a folder of parts (see :mod:`advcli.on_ray`)."""
    from advcli.on_ray import tasks as on_ray

    if not Path(opts.path).is_file():
        raise UsageError(f"{opts.path}: no such critic file")
    _check_parts_output(out, fmt, expand_inputs(paths), force=force)
    ray, log = _open_on_ray(paths, _ReadAs(col), address, no_stage, batch_rows)
    log.require({"input_ids"}, what="score")
    job = on_ray.ScoreJob(
        log=on_ray.cluster_log(log.source), roles=log.roles, critic=opts,
        column=log.roles["values"] or "values", batch_rows=batch_rows,
        metadata=_score_metadata({}, log.sources.files),
    )  # fmt: skip
    scored = on_ray.score_parts(ray, job, out, force=force, progress=progress)
    seconds = round(time.perf_counter() - started, 3)
    return ScoreResult(**scored, output=out, engine="ray", seconds=seconds)


def verify(folder: str | os.PathLike[str]) -> Verification:
    """``advcli verify``: a folder of shards (``advcli shard``) or of parts (``annotate
    --engine ray``), re-read against its manifest; raises on the first problem."""
    from advcli.on_ray import tasks as on_ray  # imports no Ray

    if Folder(os.fspath(folder)).kind(on_ray.MANIFEST) == "file":
        return on_ray.verify_parts(os.fspath(folder))
    return verify_shards(folder)
