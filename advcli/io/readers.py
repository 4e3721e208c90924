"""Find input files and read them into one Arrow table, remembering where each row came from.

Parquet (``.parquet``) and JSONL (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``; ``-`` is JSONL on
stdin). Several files, a directory or a glob are read as one log, in the order given (a directory
or glob in sorted order).
"""

from __future__ import annotations

import glob
import io
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.errors import DataError, UsageError, where
from advcli.io.schema import jsonl_dtypes

PLAIN_JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSONL_SUFFIXES = (*PLAIN_JSONL_SUFFIXES, ".jsonl.gz", ".jsonl.zst")
PARQUET_SUFFIXES = (".parquet", ".pq")
STDIN = "-"


def is_jsonl(path: str) -> bool:
    return path == STDIN or path.lower().endswith(JSONL_SUFFIXES)


def is_parquet(path: str) -> bool:
    return path.lower().endswith(PARQUET_SUFFIXES)


def expand_inputs(patterns: list[str]) -> list[str]:
    """Files named by paths, directories and globs, in order, each once."""
    files: list[str] = []
    for pattern in patterns:
        if pattern == STDIN:
            found = [STDIN]
        elif os.path.isdir(pattern):
            found = sorted(
                str(p) for p in Path(pattern).iterdir() if is_jsonl(p.name) or is_parquet(p.name)
            )
            if not found:
                msg = f"{pattern}: the directory holds no .parquet or .jsonl files"
                raise UsageError(msg)
        elif any(ch in pattern for ch in "*?["):
            found = sorted(glob.glob(pattern, recursive=True))
            if not found:
                msg = f"{pattern}: no file matches this pattern"
                raise UsageError(msg)
        else:
            if not os.path.exists(pattern):
                msg = f"{pattern}: no such file. Hint: check the path, or quote a glob pattern"
                raise UsageError(msg)
            found = [pattern]
        for f in found:
            if not (is_jsonl(f) or is_parquet(f)):
                msg = (
                    f"{f}: unknown input format. Hint: advcli reads .parquet and .jsonl "
                    "(.jsonl.gz, .jsonl.zst) files"
                )
                raise UsageError(msg)
            if f not in files:
                files.append(f)
    return files


@dataclass
class Sources:
    """Where every row of the combined table came from, for error messages."""

    files: list[str] = field(default_factory=list)
    row_counts: list[int] = field(default_factory=list)
    _stdin_bytes: bytes | None = field(default=None, repr=False)

    def locate(self, row: int) -> tuple[str, int, bool]:
        """``(file, position, is_line)``: a 0-based global row as a file row or JSONL line."""
        for f, n in zip(self.files, self.row_counts, strict=True):
            if row < n:
                if is_jsonl(f):
                    return f, self._line_number(f, row), True
                return f, row, False
            row -= n
        return (self.files[-1] if self.files else "<input>"), row, False

    def at(self, row: int, column: str | None = None) -> str:
        """Location prefix for an error: ``file: row 3, column 'reward'``."""
        f, pos, is_line = self.locate(row)
        return where(f, pos, column, line=is_line)

    def _line_number(self, path: str, row: int) -> int:
        """1-based line of the row-th JSON object (blank lines are skipped by the reader)."""
        lines = io.BytesIO(self._stdin_bytes or b"") if path == STDIN else open_stream(path)
        with lines:
            rows_seen = 0
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    if rows_seen == row:
                        return number
                    rows_seen += 1
        return row + 1


def open_stream(path: str) -> BinaryIO:
    """A file's bytes as a stream, decompressed (``.gz``, ``.zst``) as they are read."""
    if path.lower().endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    if path.lower().endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            msg = f"{path}: reading .zst needs the zstandard package: pip install 'advcli[zstd]'"
            raise UsageError(msg) from None
        return io.BufferedReader(zstandard.open(path, "rb"))  # lines, as the others give
    return open(path, "rb")


def _read_bytes(path: str) -> bytes:
    if path == STDIN:
        return sys.stdin.buffer.read()
    with open_stream(path) as fh:
        return fh.read()


def read_parquet(path: str) -> pa.Table:
    try:
        return pq.read_table(path, pre_buffer=False)
    except (pa.ArrowInvalid, OSError) as exc:
        msg = f"{path}: not a readable Parquet file ({exc}). Hint: check the file is complete"
        raise DataError(msg) from None


def read_jsonl(path: str, sources: Sources, mapping: dict[str, str]) -> pa.Table:
    # A plain file goes to polars by path (no copy of it in Python); stdin and compressed
    # files are read into bytes first (stdin's are kept for error messages).
    plain = path != STDIN and path.lower().endswith(PLAIN_JSONL_SUFFIXES)
    data = None if plain else _read_bytes(path)
    if path == STDIN:
        sources._stdin_bytes = data
    with open_stream(path) if data is None else io.BytesIO(data) as lines:
        schema = jsonl_schema(path, _head(lines, SCHEMA_LINES), mapping)
    return _read_ndjson(path, data, schema, schema=schema).to_arrow()


def _read_ndjson(
    path: str, data: bytes | None, dtypes: dict[str, pl.DataType], first_line: int = 1, **options
) -> pl.DataFrame:
    """polars' NDJSON reader on ``data`` (lines of ``path`` from ``first_line`` on), or on the
    whole file when None; where it fails, the line and column that ``dtypes`` do not fit."""
    try:
        return pl.read_ndjson(path if data is None else io.BytesIO(data), **options)
    except Exception as exc:  # polars raises several error types without line numbers
        with open_stream(path) if data is None else io.BytesIO(data) as lines:
            _diagnose_jsonl(path, lines, first_line, dtypes)
        msg = f"{path}: not valid JSONL ({exc}). Hint: one JSON object per line"
        raise DataError(msg) from None


SCHEMA_LINES = 100  # rows whose values type a JSONL log's columns (polars' own default)


def _head(lines: Iterable[bytes], rows: int) -> bytes:
    """The first lines, up to and including the ``rows``-th non-blank one."""
    head = []
    for line in lines:
        head.append(line)
        rows -= bool(line.strip())
        if not rows:
            break
    return b"".join(head)


def jsonl_schema(path: str, head: bytes, mapping: dict[str, str]) -> dict[str, pl.DataType]:
    """The polars schema of a JSONL log, from its first lines ``head``.

    Roles are typed by :func:`jsonl_dtypes` from each key's first non-null value there; other
    columns as polars infers them, except that a column null on every one of those lines is
    read as text (it could hold anything later; a number then reads as "0.35").
    """
    seen: dict = {}
    for number, line in enumerate(io.BytesIO(head), start=1):
        if line.strip():
            for key, value in _parse_line(path, number, line).items():
                if seen.get(key) is None:
                    seen[key] = value
    if not head.strip():
        msg = f"{path}: the input has no rows. Hint: check the file"
        raise DataError(msg)
    overrides = jsonl_dtypes(list(seen), mapping, seen)
    inferred = _read_ndjson(path, head, overrides, schema_overrides=overrides or None).schema
    return {name: pl.String if dtype == pl.Null else dtype for name, dtype in inferred.items()}


def _parse_line(path: str, number: int, line: bytes) -> dict:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        loc = where(path, number, line=True)
        msg = f"{loc}: not valid JSON ({exc}). Hint: one JSON object per line"
        raise DataError(msg) from None
    if not isinstance(obj, dict):
        msg = (
            f"{where(path, number, line=True)}: expected a JSON object, saw "
            f"{type(obj).__name__}. Hint: one JSON object per line"
        )
        raise DataError(msg)
    return obj


def _diagnose_jsonl(
    path: str, lines: Iterable[bytes], first_line: int, dtypes: dict[str, pl.DataType]
) -> None:
    """Find the first line polars could not read with ``dtypes``, and raise a precise error."""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        obj = _parse_line(path, number, line)
        for key, dtype in dtypes.items():
            value = obj.get(key)
            if value is None:
                continue
            if isinstance(dtype, pl.List):
                fits = isinstance(value, list) and all(_fits(v, dtype.inner) for v in value)
            else:
                fits = _fits(value, dtype)
            if not fits:
                shown = orjson.dumps(value).decode()[:60]
                msg = (
                    f"{where(path, number, key, line=True)}: expected {_describe(dtype)}, saw "
                    f"{shown}. Hint: every line must use the same types"
                )
                raise DataError(msg)


def _fits(value: object, dtype: pl.DataType) -> bool:
    """Whether polars reads a JSON value as ``dtype`` (only the types advcli checks)."""
    if value is None:
        return True
    if dtype == pl.Boolean:
        return isinstance(value, bool)
    if dtype.is_integer():
        return isinstance(value, int) and not isinstance(value, bool)
    if dtype.is_float():
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True  # text takes any value; nested types are left to polars' own message


def _describe(dtype: pl.DataType) -> str:
    inner = dtype.inner if isinstance(dtype, pl.List) else dtype
    if inner == pl.Boolean:
        one, many = "a boolean", "booleans"
    elif inner.is_integer():
        one, many = "an integer", "integers"
    else:
        one, many = "a number", "numbers"
    return f"a list of {many}" if isinstance(dtype, pl.List) else one


def read_inputs(
    patterns: list[str], mapping: dict[str, str] | None = None
) -> tuple[pa.Table, Sources]:
    """Read every input into one table; raise a clear error for an empty or unreadable one.

    ``mapping`` is the ``--col`` mapping, used to type JSONL list columns explicitly.
    """
    files = expand_inputs(patterns)
    sources = Sources()
    tables = []
    for f in files:
        table = read_jsonl(f, sources, mapping or {}) if is_jsonl(f) else read_parquet(f)
        sources.files.append(f)
        sources.row_counts.append(table.num_rows)
        tables.append(table)
    if not tables or sum(sources.row_counts) == 0:
        msg = f"{', '.join(files) or '<input>'}: the input has no rows. Hint: check the file"
        raise DataError(msg)
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        msg = (
            f"{', '.join(files)}: the files have different columns or types ({exc}). "
            "Hint: annotate them separately"
        )
        raise DataError(msg) from None
    return table, sources


class LogSource:
    """A log to read in passes: all rows of a few columns, or batches of rows of any columns.

    Files are read from disk at every pass (memory stays bounded); stdin, or a mix of Parquet
    and JSONL files, is read once into memory (:class:`TableSource`).
    """

    schema: pa.Schema
    sources: Sources

    @property
    def n_rows(self) -> int:
        return sum(self.sources.row_counts)

    def columns(self, names: list[str]) -> pa.Table:
        raise NotImplementedError

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        """``(first global row, table)`` for consecutive batches of ``rows`` rows."""
        raise NotImplementedError


class TableSource(LogSource):
    def __init__(self, table: pa.Table, sources: Sources):
        self.table = table
        self.schema = table.schema
        self.sources = sources

    def columns(self, names: list[str]) -> pa.Table:
        return self.table.select(names)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        table = self.table if names is None else self.table.select(names)
        for start in range(0, table.num_rows, rows):
            yield start, table.slice(start, rows)


class ParquetSource(LogSource):
    def __init__(self, files: list[str]):
        self.files = files
        self.sources = Sources()
        schemas = []
        for f in files:
            try:
                meta = pq.read_metadata(f)
                schemas.append(pq.read_schema(f))
            except (pa.ArrowInvalid, OSError) as exc:
                msg = f"{f}: not a readable Parquet file ({exc}). Hint: check the file is complete"
                raise DataError(msg) from None
            self.sources.files.append(f)
            self.sources.row_counts.append(meta.num_rows)
        if self.n_rows == 0:
            msg = f"{', '.join(files)}: the input has no rows. Hint: check the file"
            raise DataError(msg)
        try:
            self.schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = (
                f"{', '.join(files)}: the files have different columns or types ({exc}). "
                "Hint: annotate them separately"
            )
            raise DataError(msg) from None
        self.schema = self.schema.remove_metadata()

    def _file_tables(self, names: list[str] | None, rows: int) -> Iterator[pa.Table]:
        for f in self.files:
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=8 << 20)
            for batch in pf.iter_batches(batch_size=rows, columns=names):
                table = pa.Table.from_batches([batch])
                target = pa.schema([self.schema.field(n) for n in table.column_names])
                yield table if table.schema.equals(target) else table.cast(target)

    def columns(self, names: list[str]) -> pa.Table:
        tables = [
            pq.read_table(f, columns=names, pre_buffer=False).cast(
                pa.schema([self.schema.field(n) for n in names])
            )
            for f in self.files
        ]
        return pa.concat_tables(tables)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        start = 0
        for table in self._file_tables(names, rows):
            yield start, table
            start += table.num_rows


JSONL_CHUNK_BYTES = 8 << 20  # JSONL parsed at a time: whole lines (8 MB read 2x faster than 32)


def jsonl_chunks(path: str, chunk_bytes: int = JSONL_CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(number of its first line, bytes)``: a file's consecutive runs of whole lines."""
    line = 1
    with open_stream(path) as fh:
        while block := fh.read(chunk_bytes):
            if not block.endswith(b"\n"):
                block += fh.readline()  # the rest of the last line
            yield line, block
            line += block.count(b"\n")


class JsonlSource(LogSource):
    """JSONL files (plain, ``.gz``, ``.zst``) parsed a chunk of whole lines at a time at every
    pass, so memory stays bounded whatever the log's size.

    Every chunk is parsed with one schema, taken from each file's first ``SCHEMA_LINES`` rows
    (:func:`jsonl_schema`) and promoted across files. Rows per file are counted by the first
    full pass.
    """

    def __init__(
        self, files: list[str], mapping: dict[str, str], chunk_bytes: int = JSONL_CHUNK_BYTES
    ):
        self.files = files
        self.chunk_bytes = chunk_bytes
        self.sources = Sources(files=list(files))
        schemas = []
        for f in files:
            with open_stream(f) as lines:
                schemas.append(jsonl_schema(f, _head(lines, SCHEMA_LINES), mapping))
        try:
            empty = [pl.DataFrame(schema=schema) for schema in schemas]
            self.polars_schema = pl.concat(empty, how="diagonal_relaxed").schema
        except pl.exceptions.PolarsError as exc:
            msg = (
                f"{', '.join(files)}: the files have different columns or types ({exc}). "
                "Hint: annotate them separately"
            )
            raise DataError(msg) from None
        self.schema = pl.DataFrame(schema=self.polars_schema).to_arrow().schema

    def _frames(self, names: list[str] | None) -> Iterator[tuple[int, pl.DataFrame]]:
        """``(file index, frame)`` for every chunk of every file, in order."""
        full = self.polars_schema
        schema = full if names is None else {n: full[n] for n in names}
        for i, path in enumerate(self.files):
            for line, chunk in jsonl_chunks(path, self.chunk_bytes):
                yield i, _read_ndjson(path, chunk, full, line, schema=schema)

    def _count(self, frames: Iterable[tuple[int, pl.DataFrame]]) -> Iterator[pl.DataFrame]:
        """Pass the frames through, recording the rows of every file."""
        counts = [0] * len(self.files)
        for i, frame in frames:
            counts[i] += frame.height
            yield frame
        self.sources.row_counts = counts

    def columns(self, names: list[str]) -> pa.Table:
        tables = [frame.to_arrow() for frame in self._count(self._frames(names))]
        return pa.concat_tables(tables)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        if not self.sources.row_counts:  # error messages need the rows of each file
            self.columns([next(iter(self.polars_schema))])
        start = 0
        for _, frame in self._frames(names):
            for lo in range(0, frame.height, rows):
                table = frame.slice(lo, rows).to_arrow()
                yield start, table
                start += table.num_rows


def open_source(patterns: list[str], mapping: dict[str, str] | None = None) -> LogSource:
    """A log of Parquet files, or of JSONL files, streams from disk at every pass; stdin, or
    Parquet and JSONL files together, are read into memory once."""
    files = expand_inputs(patterns)
    if files and all(is_parquet(f) for f in files):
        return ParquetSource(files)
    if files and all(is_jsonl(f) and f != STDIN for f in files):
        return JsonlSource(files, mapping or {})
    table, sources = read_inputs(patterns, mapping)
    return TableSource(table, sources)


def prefetch(items: Iterator, depth: int = 2) -> Iterator:
    """Produce ``items`` on a thread, ``depth`` ahead of the consumer (reading overlaps work).

    An error on the thread is raised in the consumer; closing the generator early (an error
    downstream) stops the thread.
    """
    done = object()
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def run() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                box.put(item)
            box.put(done)
        except BaseException as exc:  # handed to the consumer
            box.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        while (item := box.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(0.01)
