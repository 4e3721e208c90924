"""``advcli shard``: a log as training-ready Parquet shards with a manifest: checked, opened,
measured, planned, then written (the steps: :mod:`advcli.shards`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from advcli import methods, progress
from advcli.commands import fields
from advcli.errors import DataError, UsageError, file_list
from advcli.io.outputs import check_output_folder
from advcli.params import command_options, option, options_of, parse_assignments, takes_options
from advcli.presets import PresetOptions
from advcli.results import ShardResult
from advcli.run import jobs
from advcli.run.logs import BATCH_ROWS, LogPaths, input_paths
from advcli.shards.build import write_shards
from advcli.shards.inputs import check_keep, measure, open_input
from advcli.shards.layout import BUCKET_TOKENS
from advcli.shards.manifest import listed
from advcli.shards.options import ShardOptions, check_options, check_text
from advcli.shards.plan import plan_shards


@dataclass(frozen=True)
class ShardCommand:
    """The options of ``advcli shard``: its flags, and the keywords of :func:`shard`."""

    out: str | os.PathLike[str] = field(
        metadata=fields.out_option("Output folder (must not exist).")
    )
    method: str | None = fields.method("Raw logs: the estimator (annotated logs keep theirs).")
    convention: str | None = fields.convention(f"Raw logs: {fields.CONVENTION}")
    param: list[str] | None = field(
        default=None,
        metadata=option("Deprecated: KEY=VALUE, now --key value.", flag="--param", hidden=True),
    )
    opts: ShardOptions | None = field(default=None, metadata=options_of(ShardOptions))
    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    tokenizer: str | os.PathLike[str] | None = fields.tokenizer()
    max_retokenize_mismatch: float = fields.max_retokenize_mismatch()
    keep_prompts: str | os.PathLike[str] | None = fields.keep_prompts()
    drop_prompts: str | os.PathLike[str] | None = fields.drop_prompts()
    force: bool = fields.force("Replace an existing output folder.")
    correction: str | None = fields.correction()
    correction_bounds: str | None = fields.correction_bounds()
    engine: str = fields.engine()
    ray_address: str | None = fields.ray_address()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the shards
    bucket_tokens: int = BUCKET_TOKENS  # tokens held while writing: memory, never the shards


@takes_options(ShardCommand, params=True)
def shard(
    inputs: LogPaths,
    out: str | os.PathLike[str],
    opts: ShardOptions | None = None,
    **keywords: Any,
) -> ShardResult:
    """``advcli shard``: returns a summary; the folder ``out`` appears only when complete.

    A raw log needs ``method`` (and takes ``convention`` and the method's parameters as
    keywords, as :func:`advcli.annotate` does; ``param``, ``["gamma=0.99"]``, is their former
    spelling); a log annotated by advcli keeps its own. ``batch_rows`` (rows read at a
    time) and ``bucket_tokens`` (tokens held in memory while writing) change memory and speed,
    never the output. ``engine="ray"`` counts, measures and annotates each work unit of a
    Parquet log on a Ray cluster; this process plans and writes the shards (the same bytes).
    ``correction`` (with ``correction_bounds``) writes each token's rollout-correction
    weight and mask, under the layout's names for them. The keywords are
    :class:`ShardCommand`'s, then the method's parameters.
    """
    called, params = command_options(
        ShardCommand, "shard", {"out": out, "opts": opts, **keywords}, methods.PARAMETERS
    )
    method, convention, param, col = called.method, called.convention, called.param, called.col
    from_, preset_options, force = called.from_, called.preset_options, called.force
    engine, ray_address, batch_rows = called.engine, called.ray_address, called.batch_rows
    bucket_tokens = called.bucket_tokens
    started = time.perf_counter()
    opts = opts or ShardOptions()
    paths = input_paths(inputs)
    out = os.fspath(out)
    check_options(opts)
    # Checked before reading. Without --method, what the parameters apply to is unknown:
    # only their text is checked (they matter for the error an annotated log gives).
    given = parse_assignments(param, methods.PARAMETERS)
    if method is None:
        check_text(param)
    twice = sorted(set(given) & {name for name, value in params.items() if value is not None})
    if twice:
        raise UsageError(f"`{twice[0]}` given twice: as a flag and with `param`")
    deprecated = [_param_deprecated(given)] if param else []
    given.update(params)
    job = jobs.job(paths, col=col, preset=from_, preset_options=preset_options, method=method,
                   convention=convention, params=given if method is not None else None,
                   engine=engine, ray_address=ray_address, batch_rows=batch_rows,
                   correction=called.correction,
                   correction_bounds=called.correction_bounds, tokenizer=called.tokenizer,
                   max_retokenize_mismatch=called.max_retokenize_mismatch,
                   keep_prompts=called.keep_prompts,
                   drop_prompts=called.drop_prompts)  # fmt: skip
    check_output_folder(out, job.files, force=force, listed=listed)
    inp = open_input(job)
    if job.ray is not None:
        inp.annotate = job.ray.annotate
    if inp.annotated_input and (
        convention is not None
        or job.correction is not None
        or any(v is not None for v in given.values())
    ):
        msg = (
            f"{inp.sources.files[0]}: already annotated (method {inp.metadata['method']!r}); "
            "`convention`, `correction` and the method's parameters apply to raw logs. Hint: "
            "drop them, or shard the raw log"
        )
        raise UsageError(msg)
    extra = check_keep(inp, opts.keep)
    with progress.stage("counting tokens"):
        samples = measure(inp, opts.pack, batch_rows, job.ray.count if job.ray else None)
    with progress.stage("planning"):
        ids = inp.roles["input_ids"]
        plan = plan_shards(samples, opts, lambda row: inp.sources.at(row, ids))
    if not any(len(sp.order) for sp in plan.splits):
        msg = (
            f"{file_list(inp.sources.files)}: no rows left to write "
            f"(dropped: {plan.dropped or inp.dropped_by_method}). "
            "Hint: drop `drop_zero_variance` / `drop_singletons`"
        )
        raise DataError(msg)
    manifest = write_shards(
        out,
        inp,
        samples,
        plan,
        opts,
        extra,
        force=force,
        batch_rows=batch_rows,
        bucket_tokens=bucket_tokens,
    )
    return ShardResult(
        output=out,
        method=manifest["method"],
        annotated_input=manifest["annotated_input"],
        layout=manifest["layout"],
        trainer_layout=opts.layout,
        **manifest["totals"],
        splits={k: v["samples"] for k, v in manifest["splits"].items()},
        dropped=manifest["dropped"],
        truncated=manifest["truncated"],
        warnings=[*deprecated, *inp.warnings],
        seconds=round(time.perf_counter() - started, 3),
        prompts_removed=inp.prompts_removed,
    )


def _param_deprecated(assigned: dict[str, Any]) -> str:
    """The warning of ``param=["KEY=VALUE"]``, naming the keywords that replace it (those
    annotate takes; ``param`` ran them all): on the command line, ``--param`` and the flags."""
    keywords = " ".join(f"`{name}={value!r}`" for name, value in assigned.items())
    return f"`param` is deprecated: write {keywords}"
