"""The shards written: rows routed into buckets (or straight into the shards), the shards, then
the manifest (last), in a folder that appears only when complete (the command:
:mod:`advcli.commands.shard`)."""

from __future__ import annotations

from typing import Any

from advcli import progress
from advcli._version import __version__
from advcli.core.correction import mode_named
from advcli.io import manifests
from advcli.io.outputs import output_folder
from advcli.io.schema import POLICY_LOGPROBS
from advcli.run.logs import BATCH_ROWS
from advcli.shards import trainers
from advcli.shards.inputs import Input, Samples
from advcli.shards.layout import BUCKET_TOKENS, ROW_GROUP_TOKENS, layout
from advcli.shards.manifest import (
    FORMAT,
    build_manifest,
    write_manifest,
)
from advcli.shards.options import (
    ShardOptions,
)
from advcli.shards.plan import ShardPlan
from advcli.shards.route import allow_open_files, arrive_in_order, route
from advcli.shards.trainers import (
    LOGPROB_STREAMS,
    LOGPROBS,
    REJECTED,
    SAMPLER_LOGPROBS,
    SEQUENCE_ADVANTAGE,
    SEQUENCE_WEIGHT,
    WEIGHTS,
    TrainerLayout,
)
from advcli.shards.write import PieceWriter, write_pieces


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
    if "tokenizer_sha256" in inp.metadata:  # the ids were made from text
        shard_meta["tokenizer_sha256"] = inp.metadata["tokenizer_sha256"]
    reading = "annotating" if inp.run is not None else "reading rows"
    with output_folder(out, force=force, last=manifests.NAMES) as output:
        tmp = output.folder
        if direct:
            with (
                progress.stage(f"{reading} and writing shards"),
                PieceWriter(
                    tmp, plan, lay, opts, {*LOGPROB_STREAMS, REJECTED} & set(taken), shard_meta
                ) as pieces,
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
    column): the policy's log-probs (the trainer's, else the sampler's) and the sampler's
    where the log has them, and one advantage per sequence, from
    the advantages, where the layout holds one (refused, as the rows are read, at a row whose
    advantages vary along its action tokens); with a rollout correction, the tokens a
    rejection mode masked (verl's layout) and a sequence mode's one weight per sequence (trl's)."""
    if trainer.name == trainers.DEFAULT:
        return {}
    taken = {}
    if inp.roles[POLICY_LOGPROBS] is not None:
        taken[LOGPROBS] = inp.roles.column(POLICY_LOGPROBS)
    if inp.roles["logprobs"] is not None:
        taken[SAMPLER_LOGPROBS] = inp.roles.column("logprobs")
    if trainer.sequence_advantage:
        taken[SEQUENCE_ADVANTAGE] = "advantages"
    mode = mode_named(inp.correction["mode"]) if inp.correction else None
    if mode is not None and mode.kind == "reject" and trainer.name == "verl":
        taken[REJECTED] = trainers.MASKED
    if mode is not None and mode.level == "sequence" and trainer.name == "trl":
        taken[SEQUENCE_WEIGHT] = WEIGHTS
    return taken
