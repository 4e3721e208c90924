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

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson")
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
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    if path.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            msg = f"{path}: reading .zst needs the zstandard package: pip install 'advcli[zstd]'"
            raise UsageError(msg) from None
        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
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
    data = _read_bytes(path) if path == STDIN or path.endswith((".gz", ".zst")) else None
    if path == STDIN:
        sources._stdin_bytes = data
    if data is None:
        with open(path, "rb") as fh:
            first = _first_object(path, fh)
    else:
        first = _first_object(path, io.BytesIO(data))
    if first is None:
        msg = f"{path}: the input has no rows. Hint: check the file"
        raise DataError(msg)
    overrides = jsonl_dtypes(list(first), mapping, first)
    try:
        frame = pl.read_ndjson(
            path if data is None else io.BytesIO(data), schema_overrides=overrides or None
        )
    except Exception as exc:  # polars raises several error types without line numbers
        with open_stream(path) if data is None else io.BytesIO(data) as lines:
            _diagnose_jsonl(path, lines, 1, overrides)
        msg = f"{path}: not valid JSONL ({exc}). Hint: one JSON object per line"
        raise DataError(msg) from None
    return frame.to_arrow()


def _first_object(path: str, lines: Iterable[bytes]) -> dict | None:
    """The first non-blank line, parsed (its number in errors); None if every line is blank."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            return _parse_line(path, number, line)
    return None


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
    path: str, lines: Iterable[bytes], first_line: int, overrides: dict[str, pl.DataType]
) -> None:
    """Find the first line polars could not read, and raise a precise error for it."""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        obj = _parse_line(path, number, line)
        for key, dtype in overrides.items():
            value = obj.get(key)
            if value is None:
                continue
            inner = dtype.inner  # type: ignore[attr-defined]
            if not isinstance(value, list) or not all(_fits(v, inner) for v in value):
                shown = orjson.dumps(value).decode()[:60]
                msg = (
                    f"{where(path, number, key, line=True)}: expected a list of "
                    f"{_describe(inner)}, saw {shown}. Hint: every line must use the same types"
                )
                raise DataError(msg)


def _fits(value: object, inner: pl.DataType) -> bool:
    if value is None:
        return True
    if inner == pl.Boolean:
        return isinstance(value, bool)
    if inner.is_integer():
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _describe(inner: pl.DataType) -> str:
    if inner == pl.Boolean:
        return "booleans"
    return "integers" if inner.is_integer() else "numbers"


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

    Parquet inputs are read from disk at every pass (memory stays bounded); JSONL inputs are
    parsed once into memory.
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


def open_source(patterns: list[str], mapping: dict[str, str] | None = None) -> LogSource:
    """A Parquet-only log streams from disk; a log with JSONL is read into memory."""
    files = expand_inputs(patterns)
    if files and all(is_parquet(f) for f in files):
        return ParquetSource(files)
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
