"""JSONL logs: decompressed streams, one schema for a whole file, and errors with line numbers.

polars parses the lines (fast, but its errors name no line); where it fails, the lines are read
again with orjson to find the first line and column that do not fit, so the user gets
``file: line 12, column 'reward': expected a number, saw "n/a"``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson
import polars as pl

from advcli.errors import DataError, UsageError, no_rows, where
from advcli.io.schema import jsonl_dtypes

PLAIN_JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSONL_SUFFIXES = (*PLAIN_JSONL_SUFFIXES, ".jsonl.gz", ".jsonl.zst")
STDIN = "-"
SCHEMA_LINES = 100  # rows whose values type a JSONL log's columns (polars' own default)
JSONL_CHUNK_BYTES = 8 << 20  # JSONL parsed at a time: whole lines (8 MB read 2x faster than 32)


def is_jsonl(path: str) -> bool:
    return path == STDIN or path.lower().endswith(JSONL_SUFFIXES)


def open_stream(path: str) -> io.BufferedIOBase:
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


def read_bytes(path: str) -> bytes:
    """A whole file (decompressed), or all of stdin for ``-``."""
    if path == STDIN:
        import sys

        return sys.stdin.buffer.read()
    with open_stream(path) as fh:
        return fh.read()


def line_number(lines: Iterable[bytes], row: int) -> int:
    """1-based line of the row-th JSON object (blank lines are skipped by the reader)."""
    rows_seen = 0
    for number, line in enumerate(lines, start=1):
        if line.strip():
            if rows_seen == row:
                return number
            rows_seen += 1
    return row + 1


def read_jsonl(path: str, mapping: dict[str, str], data: bytes | None = None) -> pl.DataFrame:
    """A whole JSONL file (or ``data``, its bytes) in memory, typed as :func:`jsonl_schema` says.

    A plain file goes to polars by path (no copy of it in Python).
    """
    with open_stream(path) if data is None else io.BytesIO(data) as lines:
        schema = jsonl_schema(path, head(lines, SCHEMA_LINES), mapping)
    return read_ndjson(path, data, schema, schema=schema)


def read_ndjson(
    path: str, data: bytes | None, dtypes: Mapping[str, Any], first_line: int = 1, **options: Any
) -> pl.DataFrame:
    """polars' NDJSON reader on ``data`` (lines of ``path`` from ``first_line`` on), or on the
    whole file when None; where it fails, the line and column that ``dtypes`` do not fit."""
    try:
        return pl.read_ndjson(path if data is None else io.BytesIO(data), **options)
    except Exception as exc:  # polars raises several error types without line numbers
        with open_stream(path) if data is None else io.BytesIO(data) as lines:
            _diagnose(path, lines, first_line, dtypes)
        msg = f"{path}: not valid JSONL ({exc}). Hint: one JSON object per line"
        raise DataError(msg) from None


def head(lines: Iterable[bytes], rows: int) -> bytes:
    """The first lines, up to and including the ``rows``-th non-blank one."""
    kept = []
    for line in lines:
        kept.append(line)
        rows -= bool(line.strip())
        if not rows:
            break
    return b"".join(kept)


def jsonl_schema(path: str, first_lines: bytes, mapping: dict[str, str]) -> dict[str, Any]:
    """The polars schema of a JSONL log, from its first lines.

    Roles are typed by :func:`~advcli.io.schema.jsonl_dtypes` from each key's first non-null
    value there; other columns as polars infers them, except that a column null on every one of
    those lines is read as text (it could hold anything later; a number then reads as "0.35").
    """
    seen: dict = {}
    for number, line in enumerate(io.BytesIO(first_lines), start=1):
        if line.strip():
            for key, value in parse_line(path, number, line).items():
                if seen.get(key) is None:
                    seen[key] = value
    if not first_lines.strip():
        raise no_rows(path)
    overrides = jsonl_dtypes(list(seen), mapping, seen)
    inferred = read_ndjson(path, first_lines, overrides, schema_overrides=overrides or None).schema
    return {name: pl.String if dtype == pl.Null else dtype for name, dtype in inferred.items()}


def chunks(path: str, chunk_bytes: int = JSONL_CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(number of its first line, bytes)``: a file's consecutive runs of whole lines."""
    line = 1
    with open_stream(path) as fh:
        while block := fh.read(chunk_bytes):
            if not block.endswith(b"\n"):
                block += fh.readline()  # the rest of the last line
            yield line, block
            line += block.count(b"\n")


def parse_line(path: str, number: int, line: bytes, *, nan: bool = False) -> dict:
    """The JSON object on line ``number``; ``nan``: also as Python's ``json`` writes it (bare
    ``NaN``, ``Infinity``, which orjson refuses)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            if not nan:
                raise ValueError(exc) from None
            obj = json.loads(line)
        except ValueError as error:
            loc = where(path, number, line=True)
            msg = f"{loc}: not valid JSON ({error}). Hint: one JSON object per line"
            raise DataError(msg) from None
    if not isinstance(obj, dict):
        msg = (
            f"{where(path, number, line=True)}: expected a JSON object, saw "
            f"{type(obj).__name__}. Hint: one JSON object per line"
        )
        raise DataError(msg)
    return obj


def _diagnose(
    path: str, lines: Iterable[bytes], first_line: int, dtypes: Mapping[str, Any]
) -> None:
    """Find the first line polars could not read with ``dtypes``, and raise a precise error."""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        obj = parse_line(path, number, line)
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


def _fits(value: object, dtype: Any) -> bool:
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


def _describe(dtype: Any) -> str:
    inner = dtype.inner if isinstance(dtype, pl.List) else dtype
    if inner == pl.Boolean:
        one, many = "a boolean", "booleans"
    elif inner.is_integer():
        one, many = "an integer", "integers"
    else:
        one, many = "a number", "numbers"
    return f"a list of {many}" if isinstance(dtype, pl.List) else one
