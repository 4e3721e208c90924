"""``advcli shard``: the whole job, from opening the log to the manifest (the steps are in
:mod:`advcli.shards`)."""

from __future__ import annotations

import os
import time
from typing import Any

from advcli import jobs, methods, progress
from advcli._version import __version__
from advcli.errors import DataError, UsageError, file_list
from advcli.io import manifests
from advcli.io.outputs import check_output_folder, output_folder
from advcli.logs import BATCH_ROWS, Inputs, input_paths
from advcli.params import parse_assignments
from advcli.presets import PresetOptions
from advcli.results import ShardResult
from advcli.shards import trainers
from advcli.shards.inputs import Input, Samples, check_keep, measure, open_input
from advcli.shards.layout import BUCKET_TOKENS, ROW_GROUP_TOKENS, layout
from advcli.shards.manifest import (
    FORMAT,
    build_manifest,
    listed,
    write_manifest,
)
from advcli.shards.options import (
    ShardOptions,
    check_options,
    check_text,
)
from advcli.shards.plan import ShardPlan, plan_shards
from advcli.shards.route import allow_open_files, arrive_in_order, route
from advcli.shards.trainers import LOGPROBS, SEQUENCE_ADVANTAGE, TrainerLayout
from advcli.shards.write import PieceWriter, write_pieces

__all__ = ["shard"]


def write_shards(
    out: str,
    inp: Input,
    samples: Samples,
    plan: ShardPlan,
    opts: ShardOptions,
    extra: list[str],
    *,
    force: bool,
    batch_rows: int = BATCH_ROWS,
    bucket_tokens: int = BUCKET_TOKENS,
) -> dict[str, Any]:
    """Route and write into a temporary folder, then the manifest (last), then the rename.
    ``extra`` are the ``--keep`` columns."""
    taken = taken_columns(inp, trainers.get(opts.layout))
    lay = layout(plan, bucket_tokens)
    # Rows that arrive in output order go straight to the shards, a bucket at a time; --keep
    # columns wait for the end (whether they are per-token is known once every row is seen).
    direct = not extra and arrive_in_order(lay)
    if direct:  # a bucket is held only until its last row arrives: one row group is enough
        lay = layout(plan, min(bucket_tokens, ROW_GROUP_TOKENS))
    else:
        allow_open_files(lay.n_buckets, out)
    shard_meta = {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": inp.metadata.get("method"),
        "params": inp.metadata.get("params"),
        "pack": opts.pack,
        "loss_weights": opts.loss_weights,
    }
    reading = "annotating" if inp.run is not None else "reading rows"
    with output_folder(out, force=force, last=manifests.NAMES) as output:
        tmp = output.folder
        if direct:
            with (
                progress.stage(f"{reading} and writing shards"),
                PieceWriter(tmp, plan, lay, opts, {LOGPROBS} & set(taken), shard_meta) as pieces,
            ):
                route(inp, samples, lay, extra, None, batch_rows, taken=taken,
                      complete=pieces.bucket)  # fmt: skip
            records = pieces.records
        else:
            buckets = tmp / ".buckets"
            with progress.stage(reading):
                per_token = route(inp, samples, lay, extra, buckets, batch_rows, taken=taken)
            with progress.stage("writing shards"):
                records = write_pieces(tmp, buckets, plan, lay, opts, per_token, shard_meta)
            buckets.rmdir()
        manifest = build_manifest(inp, plan, opts, records)
        write_manifest(tmp, manifest)
    return manifest


def taken_columns(inp: Input, trainer: TrainerLayout) -> dict[str, str]:
    """The log's columns a trainer layout takes besides advcli's own (its name for each: the
    column): the logged log-probs where there are some, and one advantage per sequence, from
    the advantages, where the layout holds one (refused, as the rows are read, at a row whose
    advantages vary along its action tokens)."""
    if trainer.name == trainers.DEFAULT:
        return {}
    taken = {}
    if inp.roles["logprobs"] is not None:
        taken[LOGPROBS] = inp.roles.column("logprobs")
    if trainer.sequence_advantage:
        taken[SEQUENCE_ADVANTAGE] = "advantages"
    return taken


def shard(
    inputs: Inputs,
    out: str | os.PathLike[str],
    opts: ShardOptions | None = None,
    *,
    method: str | None = None,
    convention: str | None = None,
    param: list[str] | None = None,
    col: list[str] | None = None,
    from_: str | None = None,
    preset_options: PresetOptions | None = None,
    force: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
    bucket_tokens: int = BUCKET_TOKENS,
) -> ShardResult:
    """``advcli shard``: returns a summary; the folder ``out`` appears only when complete.

    A raw log needs ``method`` (and takes ``convention`` and ``param``, annotate's options as
    ``KEY=VALUE``); a log annotated by advcli keeps its own. ``batch_rows`` (rows read at a
    time) and ``bucket_tokens`` (tokens held in memory while writing) change memory and speed,
    never the output. ``engine="ray"`` counts, measures and annotates each work unit of a
    Parquet log on a Ray cluster; this process plans and writes the shards (the same bytes).
    """
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
    job = jobs.job(paths, col=col, preset=from_, preset_options=preset_options, method=method,
                   convention=convention, params=given if method is not None else None,
                   engine=engine, ray_address=ray_address, batch_rows=batch_rows)  # fmt: skip
    check_output_folder(out, job.files, force=force, listed=listed)
    inp = open_input(job)
    if job.ray is not None:
        inp.annotate = job.ray.annotate
    if inp.annotated_input and (convention is not None or param):
        msg = (
            f"{inp.sources.files[0]}: already annotated (method {inp.metadata['method']!r}); "
            "`convention` and `param` apply to raw logs. Hint: drop them, or shard the raw log"
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
        warnings=inp.warnings,
        seconds=round(time.perf_counter() - started, 3),
    )
