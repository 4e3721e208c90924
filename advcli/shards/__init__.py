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

:func:`advcli.commands.shard.shard` runs them; its options: :mod:`~advcli.shards.options`.
"""

from advcli.shards.options import DEFAULT_TOKENS_PER_SHARD, ShardOptions

__all__ = ["DEFAULT_TOKENS_PER_SHARD", "ShardOptions"]
