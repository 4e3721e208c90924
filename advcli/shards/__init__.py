"""``advcli shard`` and ``advcli verify``: annotated logs as training-ready Parquet shards.

Shard streams: memory is bounded by one bucket of rows plus a few batches, not by the log.
The decisions are pure steps on per-sample arrays; the data moves in three passes:

1. :mod:`~advcli.shards.inputs` opens the log (planning the method for a raw log) and
   measures every sample's tokens and action tokens (one pass over the token columns);
2. :mod:`~advcli.shards.plan` decides drops, splits, order, packing and shards;
   :mod:`~advcli.shards.layout` cuts the output into pieces and buckets;
3. :mod:`~advcli.shards.route` streams the annotated rows into temporary bucket files;
4. :mod:`~advcli.shards.write` writes the buckets, one at a time and in order, into the shards
   (rows that already arrive in output order skip the files: each bucket is written as soon
   as its last row arrives);
5. :mod:`~advcli.shards.manifest` writes the manifest last; the folder is then renamed into
   place (in object storage: uploaded, its manifest last; see
   :func:`~advcli.io.outputs.output_folder`), and ``verify`` checks it later.

Options: :mod:`~advcli.shards.options`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from advcli import presets
from advcli._version import __version__
from advcli.accounting import CountTokens
from advcli.engine import Batch, Measure, Run
from advcli.errors import DataError, UsageError
from advcli.io.outputs import check_output_folder, output_folder
from advcli.io.sources import LogSource, expand_inputs
from advcli.logs import BATCH_ROWS, Inputs, Stage, check_engine, input_paths, no_stage
from advcli.presets import PresetOptions
from advcli.results import ShardResult
from advcli.shards.inputs import Input, Samples, check_keep, measure, open_input
from advcli.shards.layout import BUCKET_TOKENS, ROW_GROUP_TOKENS, layout
from advcli.shards.manifest import (
    CHECKSUM,
    FORMAT,
    MANIFEST,
    build_manifest,
    listed,
    verify,
    write_manifest,
)
from advcli.shards.options import (
    DEFAULT_TOKENS_PER_SHARD,
    ShardOptions,
    check_options,
    check_text,
    run_params,
)
from advcli.shards.plan import ShardPlan, plan_shards
from advcli.shards.route import allow_open_files, arrive_in_order, route
from advcli.shards.write import PieceWriter, write_pieces

__all__ = ["DEFAULT_TOKENS_PER_SHARD", "ShardOptions", "shard", "verify"]


def write_shards(
    out: str,
    inp: Input,
    samples: Samples,
    plan: ShardPlan,
    opts: ShardOptions,
    extra: list[str],
    *,
    force: bool,
    stage: Stage = no_stage,
    batch_rows: int = BATCH_ROWS,
    bucket_tokens: int = BUCKET_TOKENS,
) -> dict[str, Any]:
    """Route and write into a temporary folder, then the manifest (last), then the rename.
    ``extra`` are the ``--keep`` columns."""
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
    with output_folder(out, force=force, last=(MANIFEST, CHECKSUM)) as output:
        tmp = output.folder
        if direct:
            with (
                stage(f"{reading} and writing shards"),
                PieceWriter(tmp, plan, lay, opts, set(), shard_meta) as pieces,
            ):
                route(inp, samples, lay, extra, None, batch_rows, complete=pieces.bucket)
            records = pieces.records
        else:
            buckets = tmp / ".buckets"
            with stage(reading):
                per_token = route(inp, samples, lay, extra, buckets, batch_rows)
            with stage("writing shards"):
                records = write_pieces(tmp, buckets, plan, lay, opts, per_token, shard_meta)
            buckets.rmdir()
        manifest = build_manifest(inp, plan, opts, records)
        write_manifest(tmp, manifest)
    return manifest


def shard(
    inputs: Inputs,
    out: str | os.PathLike[str],
    opts: ShardOptions | None = None,
    *,
    method: str | None = None,
    convention: str | None = None,
    param: list[str] | None = None,
    col: list[str] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    force: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
    stage: Stage = no_stage,
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
    params = None
    if method is not None or convention is not None or param:
        # Checked before reading. Without --method, what the parameters apply to is unknown:
        # only their text is checked (they matter for the error an annotated log gives).
        conv = presets.convention_for(convention, preset)
        if method is not None:
            params = run_params(method, conv, param)
        else:
            check_text(conv, param)
    files = presets.get(preset).files(paths) if preset is not None else expand_inputs(paths)
    check_output_folder(out, files, force=force, listed=listed)
    on_cluster = _on_ray(engine, ray_address, batch_rows)
    inp = open_input(
        paths,
        method=method,
        params=params,
        col=col,
        preset=preset,
        preset_options=preset_options,
        stage=stage,
        batch_rows=batch_rows,
        measure=on_cluster.measure if on_cluster else None,
        place=on_cluster.place if on_cluster else None,
    )
    if on_cluster:
        inp.annotate = on_cluster.annotate
    if inp.annotated_input and (convention is not None or param):
        msg = (
            f"{inp.sources.files[0]}: already annotated (method {inp.metadata['method']!r}); "
            "--convention and --param apply to raw logs. Hint: drop them, or shard the raw log"
        )
        raise UsageError(msg)
    extra = check_keep(inp, opts.keep)
    with stage("counting tokens"):
        samples = measure(inp, opts.pack, batch_rows, on_cluster.count if on_cluster else None)
    with stage("planning"):
        ids = inp.roles["input_ids"]
        plan = plan_shards(samples, opts, lambda row: inp.sources.at(row, ids))
    if not any(len(sp.order) for sp in plan.splits):
        msg = (
            f"{', '.join(inp.sources.files)}: no rows left to write "
            f"(dropped: {plan.dropped or inp.dropped_by_method}). "
            "Hint: drop --drop-zero-variance / --drop-singletons"
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
        stage=stage,
        batch_rows=batch_rows,
        bucket_tokens=bucket_tokens,
    )
    return ShardResult(
        output=out,
        method=manifest["method"],
        annotated_input=manifest["annotated_input"],
        layout=manifest["layout"],
        **manifest["totals"],
        splits={k: v["samples"] for k, v in manifest["splits"].items()},
        dropped=manifest["dropped"],
        truncated=manifest["truncated"],
        warnings=inp.warnings,
        seconds=round(time.perf_counter() - started, 3),
    )


@dataclass(frozen=True)
class _OnRay:
    """What ``shard --engine ray`` runs on the cluster: the token passes, the counts and the
    final pass; and where its tasks read the log (a log not in Parquet files: from Ray's
    object store)."""

    measure: Measure
    count: CountTokens
    annotate: Callable[[Run], Iterator[Batch]]
    place: Callable[[LogSource], LogSource]


def _on_ray(engine: str, address: str | None, batch_rows: int) -> _OnRay | None:
    check_engine(engine)
    if engine == "local":
        return None
    from advcli.on_ray import cluster, tasks

    ray = cluster.connect(address)
    return _OnRay(
        place=lambda source: cluster.on_cluster(ray, source, batch_rows),
        measure=tasks.measured_on_ray(ray),
        count=tasks.counted_on_ray(ray, batch_rows),
        annotate=tasks.annotated_on_ray(ray),
    )
