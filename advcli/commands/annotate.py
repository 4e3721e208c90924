"""``advcli annotate``: a log streamed through a method into an output file (or, with
``--engine ray``, a folder of parts); and the same on a table in memory (``annotate_table``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from advcli import methods, progress
from advcli.commands import fields
from advcli.commands.outputs import check_nonfinite, check_parts_output, passed_through
from advcli.critic.options import CriticOptions
from advcli.critic.scorer import CriticScorer
from advcli.errors import UsageError
from advcli.io.outputs import check_output, output_format
from advcli.io.schema import Roles, parse_col_mapping, resolve_roles
from advcli.io.sources import Sources, TableSource
from advcli.io.split_tokens import SplitTokens, in_users_layout, joined
from advcli.io.writers import METADATA_KEY, write_batches
from advcli.lazy_imports import pa, pl
from advcli.params import command_options, options_of, takes_options
from advcli.presets import PresetOptions
from advcli.results import AnnotateResult
from advcli.run import jobs
from advcli.run.engine import Run, Scorer
from advcli.run.logs import BATCH_ROWS, Log, LogPaths, input_paths
from advcli.run.summary import Summary


@dataclass(frozen=True)
class AnnotateCommand:
    """The options of ``advcli annotate``: its flags, and the keywords of :func:`annotate`."""

    out: str | os.PathLike[str] = field(metadata=fields.out_option(fields.FILE_OUT))
    method: str = field(metadata=fields.method_option("The estimator."))
    convention: str | None = fields.convention()
    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    tokenizer: str | os.PathLike[str] | None = fields.tokenizer()
    max_retokenize_mismatch: float = fields.max_retokenize_mismatch()
    keep_prompts: str | os.PathLike[str] | None = fields.keep_prompts()
    drop_prompts: str | os.PathLike[str] | None = fields.drop_prompts()
    format: str | None = fields.output_format()
    force: bool = fields.force()
    nonfinite: str = fields.nonfinite()
    correction: str | None = fields.correction()
    correction_bounds: str | None = fields.correction_bounds()
    critic: CriticOptions | str | os.PathLike[str] | None = field(
        default=None, metadata=options_of(CriticOptions, absent_without="path")
    )
    engine: str = fields.engine()
    ray_address: str | None = fields.ray_address()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the output


@takes_options(AnnotateCommand, params=True)
def annotate(inputs: LogPaths, out: str | os.PathLike[str], **keywords: Any) -> AnnotateResult:
    """``advcli annotate``: stream the log through ``method`` into ``out``; returns the summary.

    The keywords are :class:`AnnotateCommand`'s, then the method's parameters.
    ``critic`` (its options, or the ONNX file's path) scores the values (those of the log, if
    it has any, are then not read: a
    warning says so and the metadata records it); ``from_`` reads the log as that framework
    wrote it (``--from``). ``nonfinite="null"`` writes a NaN or infinity of a JSONL output as
    null (counted: ``nonfinite_nulls``) instead of refusing it. ``engine="ray"`` runs the
    passes on a Ray cluster, one task per input file (``ray_address``, else ``RAY_ADDRESS``,
    else a local Ray); ``out`` is then a folder of one Parquet part per input file and a
    manifest. ``correction`` (a mode, with ``correction_bounds``) adds each token's
    rollout-correction weight and mask (``is_weights``, ``is_mask``) from the log's two
    log-prob streams.
    """
    options, params = command_options(
        AnnotateCommand, "annotate", {"out": out, **keywords}, methods.PARAMETERS
    )
    method, critic, batch_rows = options.method, options.critic, options.batch_rows
    force, format, nonfinite = options.force, options.format, options.nonfinite
    started = time.perf_counter()
    out = os.fspath(out)
    if critic is not None and not isinstance(critic, CriticOptions):
        critic = CriticOptions(os.fspath(critic))  # the ONNX file's path
    job = jobs.job(input_paths(inputs), col=options.col, preset=options.from_,
                   preset_options=options.preset_options, method=method,
                   convention=options.convention, params=params, engine=options.engine,
                   ray_address=options.ray_address, batch_rows=batch_rows,
                   correction=options.correction,
                   correction_bounds=options.correction_bounds, tokenizer=options.tokenizer,
                   max_retokenize_mismatch=options.max_retokenize_mismatch,
                   keep_prompts=options.keep_prompts,
                   drop_prompts=options.drop_prompts)  # fmt: skip
    assert job.method is not None
    if critic is not None and not job.method.reads_values:
        reading = ", ".join(name for name, m in methods.REGISTRY.items() if m.reads_values)
        msg = f"`critic`: {method} reads no values. Hint: drop `critic`, or use one of {reading}"
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
            passed_through=passed_through(log),
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
    log.require({"input_ids"}, what="`critic`")
    return make(critic, log.sources, log.roles)


def _warn_rescored(run: Run) -> None:
    if run.scorer is not None and (column := run.roles["values"]) is not None:
        run.warnings.append(
            f"the log's '{column}' column is not read: `critic` scores the values "
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
    check_parts_output(out, fmt, job.files, force=force)
    log = job.reading.open(job.paths)
    if isinstance(log.source, SplitTokens):  # its parts would not be in the user's layout
        msg = f"{log.files}: prompt_ids + response_ids on Ray: not yet"
        raise UsageError(f"{msg}. Hint: annotate it without `engine='ray'`")
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


def annotate_table(
    table: Any,
    *,
    method: str,
    convention: str | None = None,
    col: list[str] | None = None,
    correction: str | None = None,
    correction_bounds: str | None = None,
    **params: Any,
) -> Any:
    """``annotate`` on a table in memory (a pyarrow Table, or a polars or pandas DataFrame):
    the table with the method's columns (and ``correction``'s), its rows in order (less any
    the method drops), of the kind given. The run's metadata is the Arrow schema's ``advcli``
    key (pandas: the frame's ``attrs["advcli"]``; polars keeps none). Errors name rows of
    ``<table>``."""
    given = table
    table = _arrow_table(table)
    annotated = _annotate_arrow(table, method=method, convention=convention, col=col,
                                correction=correction, correction_bounds=correction_bounds,
                                **params)  # fmt: skip
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
    correction: str | None = None,
    correction_bounds: str | None = None,
    **params: Any,
) -> pa.Table:
    job = jobs.job([], method=method, convention=convention, params=params,
                   correction=correction, correction_bounds=correction_bounds)  # fmt: skip
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
