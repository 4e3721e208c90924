"""Writing: one bucket at a time, its rows put in order and written, piece by piece, into the
shards (Parquet, zstd), each shard's checksum and counts recorded for the manifest."""

from __future__ import annotations

import collections
import concurrent.futures
import json
from pathlib import Path
from typing import Any

from advcli import progress
from advcli.core.ragged import offsets_from_lengths, positions, ranges
from advcli.io.arrow import flat_list, list_array, narrow
from advcli.io.checksum import file_sha256
from advcli.io.writers import METADATA_KEY, ROW_GROUP_ROWS, parquet_options
from advcli.lazy_imports import np, pa, pq
from advcli.shards import trainers
from advcli.shards.layout import Layout
from advcli.shards.options import OWN_COLUMNS, ShardOptions
from advcli.shards.plan import ShardPlan
from advcli.shards.route import POSITION, bucket_path
from advcli.shards.trainers import TrainerLayout


def piece_table(
    t: pa.Table,
    lens: np.ndarray,
    weight: np.ndarray | None,
    row_offsets: np.ndarray,
    per_token: set[str],
    *,
    packed: bool,
    large_tokens: bool,
    large_samples: bool,
    trainer: TrainerLayout = trainers.LAYOUTS[trainers.DEFAULT],
) -> pa.Table:
    """Output rows of one piece, in the ``trainer``'s layout. ``t`` holds its samples in order
    (as routed), output row r holds samples ``[row_offsets[r], row_offsets[r + 1])``, ``lens``
    tokens each; ``per_token``: the routed extra columns with a value per token; ``large_*``:
    whether the shard needs large lists."""

    def column(name: str) -> pa.Array:
        return t.column(name).combine_chunks()

    sample_offsets = offsets_from_lengths(lens)
    tok_offsets = sample_offsets[row_offsets]  # tokens per output row
    take_np = ranges(flat_list(column("input_ids"))[1][:-1], lens)
    take = pa.array(take_np)

    def tokens(name: str) -> pa.Array:
        return list_array(flat_list(column(name))[0].take(take), tok_offsets, large=large_tokens)

    def per_row(name: str) -> pa.Array:
        values = column(name)
        values = values.cast(narrow(values.type))
        return list_array(values, row_offsets, large=large_samples) if packed else values

    mask = flat_list(column("loss_mask"))[0].to_numpy()[take_np]
    cols: dict[str, pa.Array] = {}
    for name in ("prompt_id", "rollout_id", "segment_index"):
        if name in t.column_names:
            cols[name] = per_row(name)
    cols["input_ids"] = tokens("input_ids")
    if packed:
        pos = positions(sample_offsets)
        cols["position_ids"] = list_array(pos.astype(np.int32), tok_offsets, large=large_tokens)
        cols["seq_lens"] = list_array(lens.astype(np.int32), row_offsets, large=large_samples)
    cols["loss_mask"] = list_array(mask, tok_offsets, large=large_tokens)
    for name in ("advantages", "returns", trainers.WEIGHTS, trainers.MASKED):
        if name in t.column_names:
            cols[name] = tokens(name)
    if weight is not None:
        w = np.repeat(weight, lens) * mask
        cols["loss_weight"] = list_array(w.astype(np.float32), tok_offsets, large=large_tokens)
    extra = [n for n in t.column_names if n not in OWN_COLUMNS and n != POSITION]
    for name in extra:
        if name in per_token:
            cols[name] = tokens(name)
    for name in extra:
        if name not in per_token:
            cols[name] = per_row(name)
    return pa.table(trainer.convert(cols, per_token, large_tokens))


def schema_list(schema: pa.Schema) -> list[list[str]]:
    return [[f.name, str(f.type)] for f in schema]


class ShardFiles:
    """Writes the shards in order, piece by piece; one manifest record per shard.

    pyarrow encodes a piece on a writer thread (it frees the GIL) while the caller prepares
    the next; at most ``PENDING`` pieces wait, so memory stays bounded."""

    PENDING = 2

    def __init__(
        self, folder: Path, plan: ShardPlan, metadata: dict[str, Any], trainer: TrainerLayout
    ):
        self.folder = folder
        self.trainer = trainer
        self.plan = plan
        self.metadata = json.dumps(metadata, sort_keys=True)
        self.named = len(plan.splits) > 1
        self.records: list[dict[str, Any]] = []
        self._writer: pq.ParquetWriter | None = None
        self._current: tuple[int, int] | None = None
        self._path = folder
        self._record: dict[str, Any] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1)
        self._pending: collections.deque[concurrent.futures.Future[None]] = collections.deque()

    def write(self, split: int, shard: int, table: pa.Table) -> None:
        if self._current != (split, shard):
            self.close()
            self._writer = self._open(split, shard, table.schema)
        assert self._writer is not None
        table = table.replace_schema_metadata({METADATA_KEY: self.metadata})
        while len(self._pending) >= self.PENDING:
            self._pending.popleft().result()
        self._pending.append(
            self._pool.submit(self._writer.write_table, table, row_group_size=ROW_GROUP_ROWS)
        )
        tokens, actions = self.trainer.count(table)
        self._record.update(
            rows=self._record["rows"] + table.num_rows,
            tokens=self._record["tokens"] + tokens,
            action_tokens=self._record["action_tokens"] + actions,
        )

    def _open(self, split: int, shard: int, schema: pa.Schema) -> pq.ParquetWriter:
        sp = self.plan.splits[split]
        folder = self.folder / sp.name if self.named else self.folder
        folder.mkdir(exist_ok=True)
        width = max(5, len(str(len(sp.shard_bounds) - 2)))
        name = f"part-{shard:0{width}d}.parquet"
        self._path = folder / name
        a, b = sp.shard_bounds[shard], sp.shard_bounds[shard + 1]
        self._record = {
            "path": f"{sp.name}/{name}" if self.named else name,
            "split": sp.name,
            "rows": 0,
            "samples": int(sp.row_offsets[b] - sp.row_offsets[a]),
            "tokens": 0,
            "action_tokens": 0,
        }
        self._current = (split, shard)
        schema = schema.with_metadata({METADATA_KEY: self.metadata})
        return pq.ParquetWriter(self._path, schema, **parquet_options(schema))

    def shutdown(self) -> None:
        """Stop the writer thread once its pieces are done (after an error too)."""
        for future in self._pending:
            future.exception()  # waits; the error, if any, is already on its way
        self._pool.shutdown()

    def close(self) -> None:
        while self._pending:  # every piece written (an error raised here, in order)
            self._pending.popleft().result()
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        path = self._path
        self._record.update(
            bytes=path.stat().st_size,
            sha256=file_sha256(path),
            schema=schema_list(pq.read_schema(path)),  # as readers see it
        )
        self.records.append(self._record)


def shard_totals(plan: ShardPlan) -> list[list[tuple[int, int]]]:
    """Per split and shard: its tokens and samples (to choose list or large list)."""
    out = []
    for sp in plan.splits:
        cum = offsets_from_lengths(plan.lens[sp.order])
        first = sp.row_offsets[sp.shard_bounds]
        out.append(list(zip(np.diff(cum[first]).tolist(), np.diff(first).tolist(), strict=True)))
    return out


def in_order(bucket: pa.Table) -> pa.Table:
    """A bucket's rows by position, column by column (each column freed once copied); as
    they are when already in order (no shuffle)."""
    position = bucket.column(POSITION).to_numpy()
    if (np.diff(position) > 0).all():
        return bucket
    order = pa.array(np.argsort(position))
    cols = {}
    for name in bucket.column_names:
        cols[name] = bucket.column(name).take(order).combine_chunks()
        bucket = bucket.drop_columns([name])
    return pa.table(cols)


class PieceWriter:
    """Writes buckets, in order, piece by piece into the shards (:meth:`bucket`); a context
    manager that stops the shards' writer thread on the way out."""

    def __init__(
        self,
        folder: Path,
        plan: ShardPlan,
        lay: Layout,
        opts: ShardOptions,
        per_token: set[str],
        metadata: dict[str, Any],
    ):
        self.plan, self.lay, self.opts, self.per_token = plan, lay, opts, per_token
        self.trainer = trainers.get(opts.layout)
        self.files = ShardFiles(folder, plan, metadata, self.trainer)
        self.totals = shard_totals(plan)

    def bucket(self, j: int, bucket: pa.Table) -> None:
        """Write bucket ``j`` (its rows in any order, with their positions)."""
        plan, lay = self.plan, self.lay
        bucket = in_order(bucket)
        first = int(lay.bucket_positions[j])
        for i in range(int(lay.bucket_pieces[j]), int(lay.bucket_pieces[j + 1])):
            k, s = int(lay.piece_split[i]), int(lay.piece_shard[i])
            a, b = int(lay.piece_positions[i]), int(lay.piece_positions[i + 1])
            sp = plan.splits[k]
            row_offsets = sp.row_offsets[lay.piece_row0[i] : lay.piece_row1[i] + 1]
            samples = lay.order[a:b]
            n_tokens, n_samples = self.totals[k][s]
            table = piece_table(
                bucket.slice(a - first, b - a),
                plan.lens[samples],
                None if plan.weight is None else plan.weight[samples],
                row_offsets - row_offsets[0],
                self.per_token,
                packed=self.opts.pack is not None,
                large_tokens=n_tokens >= 2**31,
                large_samples=n_samples >= 2**31,
                trainer=self.trainer,
            )
            self.files.write(k, s, table)

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.files.records

    def __enter__(self) -> PieceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                self.files.close()
        finally:
            self.files.shutdown()


def write_pieces(
    folder: Path,
    buckets: Path,
    plan: ShardPlan,
    lay: Layout,
    opts: ShardOptions,
    per_token: set[str],
    metadata: dict[str, Any],
) -> list[dict[str, Any]]:
    """Bucket by bucket, read from its file in ``buckets``, write the pieces into the shards."""
    ends = lay.bucket_positions[1:]
    with PieceWriter(folder, plan, lay, opts, per_token, metadata) as pieces:
        for j in range(lay.n_buckets):
            path = bucket_path(buckets, j)
            with pa.OSFile(str(path)) as fh:
                bucket = pa.ipc.open_stream(fh).read_all()
            path.unlink()
            pieces.bucket(j, bucket)
            del bucket
            progress.read(int(ends[j]), int(ends[j]) / max(int(ends[-1]), 1))
    return pieces.records
