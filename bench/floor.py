"""The I/O floor: read a Parquet log and write it back with one more list<float32> column.

No computation: what any read-annotate-write tool must at least spend on the same file. The
extra column is a copy of the log's ``values`` (float32, one per token): advantages are as hard
to compress as values, while a column of zeros would compress to nothing and flatter the floor.
``python -m bench.floor pyarrow|polars IN OUT``. The pyarrow variant reads, writes on a second
thread (as advcli does) and uses advcli's writer settings; the polars one is polars' own
streaming engine.
"""

from __future__ import annotations

import sys

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.io.writers import ROW_GROUP_ROWS, parquet_options


def floor_pyarrow(src: str, out: str) -> None:
    from advcli.io.readers import prefetch

    pf = pq.ParquetFile(src, pre_buffer=False, buffer_size=8 << 20)
    writer = None
    for batch in prefetch(pf.iter_batches(batch_size=512)):
        table = pa.Table.from_batches([batch])
        table = table.append_column("advantages", table.column("values"))
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, **parquet_options(table.schema))
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    writer.close()


def floor_polars(src: str, out: str) -> None:
    frame = pl.scan_parquet(src).with_columns(pl.col("values").alias("advantages"))
    frame.sink_parquet(out, row_group_size=ROW_GROUP_ROWS, compression="zstd")


if __name__ == "__main__":
    {"pyarrow": floor_pyarrow, "polars": floor_polars}[sys.argv[1]](sys.argv[2], sys.argv[3])
