"""``advcli score``: a ``values`` column computed by an ONNX critic, added to the log (or, with
``--engine ray``, to a folder of parts)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from advcli._version import __version__
from advcli.commands import fields
from advcli.commands.outputs import check_nonfinite, check_parts_output, passed_through
from advcli.critic.options import CriticOptions
from advcli.critic.scorer import CriticScorer, scored_batches
from advcli.io.outputs import check_output, output_format
from advcli.io.writers import write_batches
from advcli.params import check_option_file, command_options, options_of, takes_options
from advcli.presets import PresetOptions
from advcli.results import ScoreResult
from advcli.run import jobs
from advcli.run.logs import BATCH_ROWS, LogPaths, input_paths


@dataclass(frozen=True)
class ScoreCommand:
    """The options of ``advcli score``: its flags, and the keywords of :func:`score`."""

    out: str | os.PathLike[str] = field(metadata=fields.out_option(fields.FILE_OUT))
    critic: CriticOptions | str | os.PathLike[str] = field(metadata=options_of(CriticOptions))
    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    tokenizer: str | os.PathLike[str] | None = fields.tokenizer()
    max_retokenize_mismatch: float = fields.max_retokenize_mismatch()
    format: str | None = fields.output_format()
    force: bool = fields.force()
    nonfinite: str = fields.nonfinite()
    engine: str = fields.engine()
    ray_address: str | None = fields.ray_address()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the output


@takes_options(ScoreCommand, params=False)
def score(
    inputs: LogPaths,
    out: str | os.PathLike[str],
    critic: CriticOptions | str | os.PathLike[str],
    **keywords: Any,
) -> ScoreResult:
    """``advcli score``: add (or replace) a ``values`` column computed by the critic
    (``critic``: its options, or the path of the ONNX file); the keywords are
    :class:`ScoreCommand`'s. ``engine="ray"`` scores each work unit on a Ray cluster, on a GPU
    each where it has GPUs; ``out`` is then a folder of parts."""
    options, _ = command_options(ScoreCommand, "score", {"out": out, "critic": critic, **keywords})
    col, format, force, nonfinite = options.col, options.format, options.force, options.nonfinite
    engine, ray_address, batch_rows = options.engine, options.ray_address, options.batch_rows
    started = time.perf_counter()
    out = os.fspath(out)
    opts = critic if isinstance(critic, CriticOptions) else CriticOptions(os.fspath(critic))
    job = jobs.job(input_paths(inputs), col=col, preset=options.from_,
                   preset_options=options.preset_options, engine=engine,
                   ray_address=ray_address, batch_rows=batch_rows, tokenizer=options.tokenizer,
                   max_retokenize_mismatch=options.max_retokenize_mismatch)  # fmt: skip
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
    if log.retokenized is not None:
        metadata.update(log.retokenized.as_metadata())
    written = write_batches(
        out, fmt, metadata, batches, force=force, nonfinite=nonfinite,
        passed_through=passed_through(log),
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
        warnings=log.warnings,
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
    check_option_file("critic", opts.path, "model.onnx")
    check_parts_output(out, fmt, job.files, force=force)
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
