"""The I/O floor: read a Parquet log and write it back with one more list<float32> column (or
two: a method that also writes ``returns`` is compared with the floor that writes as much).

No computation: what any read-annotate-write tool must at least spend on the same file. The
extra column is a copy of the log's ``values`` (float32, one per token): advantages are as hard
to compress as values, while a column of zeros would compress to nothing and flatter the floor.
``python -m bench.floor advcli|pyarrow|polars|shard IN OUT [COLUMNS]`` (IN a file, or for
``advcli`` a folder of them, read in name order):

- ``advcli``: advcli's own reader and writer (pyarrow batches read on a thread, polars' Parquet
  sink encoding on every core), i.e. ``annotate`` minus the computation;
- ``pyarrow``: the same reader with pyarrow's ``ParquetWriter`` (one core) on a second thread;
- ``polars``: polars' own streaming engine, scan to sink;
- ``shard``: the columns a shard holds, read and written once with the shards' writer;
- ``ndjson``: a JSONL log read whole with polars' ``read_ndjson`` and written as Parquet with
  polars' writer (the floor of ``annotate`` on JSONL);
- ``streams``: only reads, as ``audit`` does: the columns the audit of two log-prob streams
  reads, with pyarrow's ``iter_batches``, the token lists flattened to numpy; OUT is not written.
- ``prompts``: only reads, as ``prompts`` does: the prompt id, prompt text, step and reward
  columns, with pyarrow's ``iter_batches``, the numbers as numpy; OUT is not written.

All write zstd (level 1 for polars' writer, pyarrow's default otherwise) and row groups of
``ROW_GROUP_ROWS``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from advcli._malloc import tune_allocator
from advcli.io.sources import prefetch
from advcli.io.writers import (
    ROW_GROUP_ROWS,
    TableWriter,
    parquet_options,
)

EXTRA = ("advantages", "returns")


def with_extra_column(src: str, columns: int = 1) -> Iterator[pa.Table]:
    """The log's batches (a folder: its files in name order), each with the extra columns."""
    files = sorted(Path(src).glob("*.parquet")) if Path(src).is_dir() else [Path(src)]
    for path in files:
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=8 << 20)
        for batch in prefetch(pf.iter_batches(batch_size=512)):
            table = pa.Table.from_batches([batch])
            for name in EXTRA[:columns]:
                table = table.append_column(name, table.column("values"))
            yield table


def floor_advcli(src: str, out: str, columns: int = 1) -> None:
    with TableWriter(out, "parquet", {}) as writer:
        for table in with_extra_column(src, columns):
            writer.write(table)
        writer.commit()


def floor_pyarrow(src: str, out: str, columns: int = 1) -> None:
    writer = None
    for table in with_extra_column(src, columns):
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, **parquet_options(table.schema))
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    writer.close()


SHARD_COLUMNS = {"prompt_id": "prompt_id", "rollout_id": "rollout_id", "input_ids": "input_ids",
                 "action_mask": "loss_mask", "values": "advantages"}  # fmt: skip


def floor_shard(src: str, out: str, columns: int = 1) -> None:
    """What ``shard`` must at least do: read the log's columns a shard holds and write them
    once (the values standing in for the advantages), with the shards' writer settings."""
    pf = pq.ParquetFile(src, pre_buffer=False, buffer_size=8 << 20)
    writer = None
    for batch in prefetch(pf.iter_batches(batch_size=512, columns=list(SHARD_COLUMNS))):
        table = pa.Table.from_batches([batch]).rename_columns(list(SHARD_COLUMNS.values()))
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, **parquet_options(table.schema))
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    assert writer is not None
    writer.close()


def floor_polars(src: str, out: str, columns: int = 1) -> None:
    frame = pl.scan_parquet(src).with_columns(
        [pl.col("values").alias(name) for name in EXTRA[:columns]]
    )
    frame.sink_parquet(out, row_group_size=ROW_GROUP_ROWS, compression="zstd", compression_level=1)


JSONL_TYPES = {"input_ids": pl.List(pl.Int64), "action_mask": pl.List(pl.Int64),
               "values": pl.List(pl.Float32)}  # fmt: skip


def floor_ndjson(src: str, out: str, columns: int = 1) -> None:
    frame = pl.read_ndjson(src, schema_overrides=JSONL_TYPES).with_columns(
        [pl.col("values").alias(name) for name in EXTRA[:columns]]
    )
    frame.write_parquet(out, row_group_size=ROW_GROUP_ROWS, compression="zstd", compression_level=1)


STREAM_COLUMNS = ("prompt_id", "reward", "input_ids", "action_mask", "logprobs",
                  "trainer_logprobs")  # fmt: skip


def floor_streams(src: str, out: str, columns: int = 1) -> None:
    """What ``audit`` of a log with both log-prob streams must at least do: read its columns,
    every token list flattened to one numpy array a batch."""
    pf = pq.ParquetFile(src, pre_buffer=False, buffer_size=8 << 20)
    for batch in prefetch(pf.iter_batches(batch_size=512, columns=list(STREAM_COLUMNS))):
        for column in batch.columns:
            if pa.types.is_list(column.type):
                pc.list_flatten(column).to_numpy()


PROMPT_COLUMNS = ("prompt_id", "prompt", "step", "reward")


def floor_prompts(src: str, out: str, columns: int = 1) -> None:
    """What ``prompts`` must at least do: read each rollout's prompt, step and reward."""
    pf = pq.ParquetFile(src, pre_buffer=False, buffer_size=8 << 20)
    for batch in prefetch(pf.iter_batches(batch_size=512, columns=list(PROMPT_COLUMNS))):
        batch.column("step").to_numpy()
        batch.column("reward").to_numpy()


if __name__ == "__main__":
    tune_allocator()  # as the advcli command does
    floors = {"advcli": floor_advcli, "pyarrow": floor_pyarrow, "polars": floor_polars,
              "shard": floor_shard, "ndjson": floor_ndjson, "streams": floor_streams,
              "prompts": floor_prompts}  # fmt: skip
    Path(sys.argv[3]).unlink(missing_ok=True)  # the last run's (advcli's writer never replaces)
    floors[sys.argv[1]](sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
