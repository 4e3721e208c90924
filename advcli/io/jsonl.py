"""JSONL logs: decompressed streams, one schema for a whole file, and errors with line numbers.

polars parses the lines (fast, but its errors name no line); where it fails, the lines are read
again with orjson to find the first line and column that do not fit, so the user gets
``file: line 12, column 'reward': expected a number, saw "n/a"``.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

import orjson

from advcli import installed, versions
from advcli.errors import DataError, UsageError, no_rows, where
from advcli.io.jsonl_checks import IdKinds, check_id, id_columns, refuse_non_scalar_ids
from advcli.io.schema import jsonl_dtypes
from advcli.lazy_imports import np, pl

PLAIN_JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSONL_SUFFIXES = (*PLAIN_JSONL_SUFFIXES, ".jsonl.gz", ".jsonl.zst")
STDIN = "-"
SCHEMA_LINES = 100  # rows whose values type a JSONL log's columns (polars' own default)
JSONL_CHUNK_BYTES = 8 << 20  # JSONL parsed at a time: whole lines (8 MB read 2x faster than 32)


def is_jsonl(path: str) -> bool:
    return path == STDIN or path.lower().endswith(JSONL_SUFFIXES)


def open_stream(path: str) -> io.BufferedIOBase:
    """A file's bytes as a stream, decompressed (``.gz``, ``.zst``) as they are read.

    Compressed data that is truncated or corrupt is a :class:`DataError` naming the file, at
    the read that meets it: a partial read never passes for the whole file.
    """
    if path.lower().endswith(".gz"):
        import gzip

        return io.BufferedReader(_Checked(path, "gzip", gzip.open(path, "rb")))
    if path.lower().endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            msg = (
                f"{path}: reading .zst needs the zstandard package: {installed.pip_install('zstd')}"
            )
            raise UsageError(msg) from None
        versions.check_optional("zstandard", zstandard.__version__, "zstd")
        return io.BufferedReader(_Checked(path, "zstd", _ZstdFrames(path)))
    return open(path, "rb")


RATIO_VARIABLE = "ADVCLI_MAX_DECOMPRESSION_RATIO"
DEFAULT_RATIO = 1000
FLOOR_BYTES = 1 << 20  # a small file may always decompress this far


def decompression_limit(compressed: int) -> int:
    """Most bytes a compressed file of ``compressed`` bytes may decompress to: ``ratio`` times
    its size (``ADVCLI_MAX_DECOMPRESSION_RATIO``, default 1,000; JSONL logs compress some 3 to
    50 times, a crafted zstd frame 30,000), and at least 1 MiB."""
    given = os.environ.get(RATIO_VARIABLE, str(DEFAULT_RATIO))
    try:
        ratio = float(given)
    except ValueError:
        ratio = float("nan")
    if not ratio > 0:
        msg = f"{RATIO_VARIABLE}={given}: expected a number > 0. Hint: unset it for {DEFAULT_RATIO}"
        raise UsageError(msg)
    return max(int(min(ratio * compressed, 1 << 62)), FLOOR_BYTES)


class _Checked(io.RawIOBase):
    """A decompressing stream whose errors are :class:`DataError` s naming the file, and
    which stops at :func:`decompression_limit`."""

    def __init__(self, path: str, kind: str, raw: Any):
        self.path, self.kind, self.raw = path, kind, raw
        self.compressed = os.path.getsize(path)
        self.limit = decompression_limit(self.compressed)
        self.given = 0  # bytes decompressed so far

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.raw.read(len(buffer))
        except (EOFError, OSError, ValueError, zlib.error) as exc:  # gzip and zstandard errors
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            msg = (
                f"{self.path}: the {self.kind} data is truncated or corrupt ({reason}). "
                "Hint: check the file is complete"
            )
            raise DataError(msg) from None
        self.given += len(data)
        if self.given > self.limit:
            msg = (
                f"{self.path}: its {self.compressed:,} bytes of {self.kind} data decompress to "
                f"more than {self.limit:,}, beyond advcli's bound of "
                f"{os.environ.get(RATIO_VARIABLE, DEFAULT_RATIO)} times the file's size. Hint: "
                f"set {RATIO_VARIABLE} higher if the file is really this repetitive"
            )
            raise DataError(msg)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _ZstdFrames(io.RawIOBase):
    """Zstandard frames one after another, decompressed, holding at most about ``STEP`` bytes
    of their output at a time; input that ends inside a frame is an error (zstandard's own
    readers stop there quietly).

    What a piece of compressed data gives is bounded by the blocks it holds, not by its size
    (a block of 4 bytes may repeat one byte 128 KiB times), so the data is walked block by
    block, by their headers, and fed to the frame's decompressor a few blocks at a time: those
    whose output is at most ``STEP`` together. Linear in what it gives: each read takes its
    bytes from the decompressed piece at an offset rather than cutting the piece again."""

    STEP = 1 << 20  # most bytes decompressed at a time (give or take one block)
    READ = 1 << 20  # compressed bytes read at a time
    SKIPPABLE = 0x184D2A50  # a skippable frame's magic number, its low 4 bits aside

    def __init__(self, path: str):
        import zstandard

        self._zstd = zstandard
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._input = memoryview(b"")  # compressed bytes read, not yet fed
        self._frame: Any = None  # the decompressor of the frame being fed; None between frames
        self._unit = 0  # bytes of the header, block or checksum being fed that are not yet
        self._next = "frame"  # what they are followed by: "frame", "block" or "checksum"
        self._checksum = False  # whether the frame ends with a checksum
        self._pending = b""  # decompressed bytes not yet given, from ``_at`` on
        self._at = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while self._at == len(self._pending):
            if not self._input and not self._read_more():
                if self._frame is not None or self._unit:
                    raise EOFError("the input ends inside a frame")
                return b""
            self._pending, self._at = self._step(), 0
        end = len(self._pending) if size < 0 else min(self._at + size, len(self._pending))
        out = self._pending[self._at : end]
        self._at = end
        return out

    def _read_more(self) -> bool:
        """Read more compressed bytes after those not yet fed; whether there were any."""
        more = self._file.read(self.READ)
        self._input = memoryview(bytes(self._input) + more if self._input else more)
        return bool(more)

    def _step(self) -> bytes:
        """Feed the next blocks of the current frame whose output is at most ``STEP`` bytes
        together (at least one), or up to the frame's end; their output."""
        end = most = 0  # bytes of the input to feed, and the most they decompress to
        while end < len(self._input) and most < self.STEP:
            if not self._unit:  # at the header of a frame, a block or a checksum
                if self._next == "frame" and end:
                    break  # the next frame has its own decompressor
                header = self._header(self._input[end:])
                if header is None:  # cut by the end of what was read
                    if end:
                        break
                    if not self._read_more():
                        raise EOFError("the input ends inside a frame")
                    continue
                self._unit, bound, self._next = header
                most += bound
            fed = min(self._unit, len(self._input) - end)
            end, self._unit = end + fed, self._unit - fed
        if self._frame is None:
            self._frame = self._zstd.ZstdDecompressor().decompressobj()
        try:
            out: bytes = self._frame.decompress(self._input[:end])
        except self._zstd.ZstdError as exc:
            raise ValueError(str(exc)) from None
        self._input = self._input[end:]
        if self._next == "frame" and not self._unit:  # the frame's last block, or checksum
            if not self._frame.eof or self._frame.unused_data:
                raise ValueError("a frame does not end where its last block does")
            self._frame = None
        return out

    def _header(self, data: memoryview) -> tuple[int, int, str] | None:
        """The header at the start of ``data``: the bytes of its unit (with what follows it up
        to the next header), the most they decompress to, and what follows; None where
        ``data`` is too short to tell."""
        if self._next == "checksum":
            return 4, 0, "frame"
        if self._next == "block":
            if len(data) < 3:
                return None
            header = int.from_bytes(data[:3], "little")
            kind, size = header >> 1 & 3, header >> 3
            if kind == 3:
                raise ValueError("a block of the reserved type")
            after = ("checksum" if self._checksum else "frame") if header & 1 else "block"
            # raw: its bytes; one byte repeated; compressed: at most a block
            bound = self._zstd.BLOCKSIZE_MAX if kind == 2 else min(size, self._zstd.BLOCKSIZE_MAX)
            return 3 + (1 if kind == 1 else size), bound, after
        if len(data) < 8:  # a frame's magic number and what tells its header's size
            return None
        magic = int.from_bytes(data[:4], "little")
        if magic & ~0xF == self.SKIPPABLE:
            return 8 + int.from_bytes(data[4:8], "little"), 0, "frame"
        if magic != self._zstd.MAGIC_NUMBER:
            raise ValueError("not a zstd frame (an unknown magic number)")
        descriptor = data[4]
        single = descriptor >> 5 & 1
        self._checksum = bool(descriptor >> 2 & 1)
        content_size = (single, 2, 4, 8)[descriptor >> 6]
        return 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3] + content_size, 0, "block"

    def close(self) -> None:
        self._file.close()
        super().close()


def read_bytes(path: str) -> bytes:
    """A whole file (decompressed), or all of stdin for ``-``."""
    if path == STDIN:
        import sys

        return sys.stdin.buffer.read()
    with open_stream(path) as fh:
        return fh.read()


# What bytes.strip() removes: a line of these alone holds no row.
BLANK_BYTES = b" \t\n\r\x0b\x0c"


def row_lines(runs: Iterable[tuple[int, bytes]]) -> np.ndarray:
    """The 1-based line of every row (every line that is not blank, as :func:`line_number`
    counts them) of a text given as ``(first line, bytes)`` runs of whole lines
    (:func:`chunks`), in one scan of each run's bytes."""
    found = [np.zeros(0, np.int64)]
    for first, run in runs:
        text = np.frombuffer(run, np.uint8)
        ends = np.flatnonzero(text == ord("\n"))
        if not run.endswith(b"\n"):
            ends = np.append(ends, len(text))  # the last line, without its newline
        starts = np.concatenate([[0], ends[:-1] + 1])
        blank = np.isin(text, np.frombuffer(BLANK_BYTES, np.uint8))
        inked = np.concatenate([[0], np.cumsum(~blank)])
        found.append(first + np.flatnonzero(inked[ends] > inked[starts]))
    return np.concatenate(found)


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
    ids = [key for key in sorted(id_columns(mapping)) if key in schema]
    kinds: IdKinds = {}
    for line, chunk in chunks(path) if data is None else [(1, data)]:
        refuse_non_scalar_ids(path, chunk, line, ids, kinds)
    return read_ndjson(path, data, schema, schema=schema)


def read_ndjson(
    path: str, data: bytes | None, dtypes: Mapping[str, Any], first_line: int = 1, **options: Any
) -> pl.DataFrame:
    """polars' NDJSON reader on ``data`` (lines of ``path`` from ``first_line`` on), or on the
    whole file when None; where it fails, the line and column that ``dtypes`` do not fit."""
    try:
        return pl.read_ndjson(path if data is None else io.BytesIO(data), **options)
    except (Exception, pl.exceptions.PanicException) as exc:  # many types, no line numbers
        with open_stream(path) if data is None else io.BytesIO(data) as lines:
            _diagnose(path, lines, first_line, dtypes)
        msg = f"{path}: not valid JSONL ({exc}). Hint: one JSON object per line"
        raise DataError(msg) from None


def head(lines: Iterable[bytes], rows: int) -> bytes:
    """The first lines, up to and including the ``rows``-th non-blank one (as one text: blank
    lines before it take their bytes, not an object each)."""
    kept = bytearray()
    for line in lines:
        kept += line
        rows -= bool(line.strip())
        if not rows:
            break
    return bytes(kept)


def jsonl_schema(path: str, first_lines: bytes, mapping: dict[str, str]) -> dict[str, Any]:
    """The polars schema of a JSONL log, from its first lines.

    Roles are typed by :func:`~advcli.io.schema.jsonl_dtypes` from each key's first non-null
    value there; other columns as polars infers them, except that a column null on every one of
    those lines is read as text (it could hold anything later; a number then reads as "0.35").
    """
    seen: dict[str, Any] = {}
    parsed = []
    for number, line in enumerate(io.BytesIO(first_lines), start=1):
        if line.strip():
            obj = parse_line(path, number, line)
            # Arrow's C interface cannot name such a key; the text says first if one may be there
            maybe_nul = b"\\u0000" in line or b"\x00" in line
            if maybe_nul and (key := _nul_key(obj)) is not None:
                msg = f"{where(path, number, line=True)}: key {key!r} holds a NUL character"
                raise DataError(f"{msg}. Hint: rename the key")
            parsed.append((number, obj))
            for key, value in obj.items():
                if seen.get(key) is None:
                    seen[key] = value
    if not first_lines.strip():
        raise no_rows(path)
    overrides = jsonl_dtypes(list(seen), mapping, seen)
    # The typed roles are checked by polars, with a precise message; ids by their own rule.
    kinds, ids = Kinds(path), id_columns(mapping)
    for number, obj in parsed:
        for key in ids & obj.keys():
            check_id(path, number, key, obj[key])
        kinds.check(number, obj, skip={*overrides, *ids})
    inferred = read_ndjson(path, first_lines, overrides, schema_overrides=overrides or None).schema
    return {name: _storable(dtype) for name, dtype in inferred.items()}


_WIDE_INTEGERS = ("Int128", "UInt128")
"""polars' integer types beyond 64 bits (UInt128 is newer than advcli's polars floor)."""


def _storable(dtype: Any) -> Any:
    """A type Arrow can hold: null and integers beyond 64 bits (ids, seeds) are read as text."""
    if dtype == pl.Null or any(dtype == getattr(pl, name, None) for name in _WIDE_INTEGERS):
        return pl.String
    if isinstance(dtype, pl.List):
        return pl.List(_storable(dtype.inner))
    return dtype


def _nul_key(value: object) -> str | None:
    """A key, at any depth, holding a NUL character."""
    if isinstance(value, dict):
        key: str
        for key, inner in value.items():
            if "\x00" in key:
                return key
            if (found := _nul_key(inner)) is not None:
                return found
    elif isinstance(value, list):
        for inner in value:
            if (found := _nul_key(inner)) is not None:
                return found
    return None


def chunks(path: str, chunk_bytes: int = JSONL_CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(number of its first line, bytes)``: a file's consecutive runs of whole lines."""
    line = 1
    with open_stream(path) as fh:
        while block := fh.read(chunk_bytes):
            if not block.endswith(b"\n"):
                block += fh.readline()  # the rest of the last line
            yield line, block
            line += block.count(b"\n")


def count_rows(path: str, chunk_bytes: int = JSONL_CHUNK_BYTES) -> int:
    """The non-blank lines of a JSONL file."""
    return sum(
        sum(1 for line in chunk.splitlines() if line.strip())
        for _, chunk in chunks(path, chunk_bytes)
    )


def parse_line(path: str, number: int, line: bytes, *, nan: bool = False) -> dict[str, Any]:
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
    """Find the first line polars could not read with ``dtypes`` (or, for the other keys, whose
    value is of another kind than on the first line that has it), and raise a precise error."""
    kinds = Kinds(path)
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        obj = parse_line(path, number, line)
        kinds.check(number, obj, skip=dtypes)
        for key, dtype in dtypes.items():
            misfit = _misfit(obj.get(key), dtype)
            if misfit is not None:
                inside, expected, value = misfit
                shown = orjson.dumps(value).decode()[:60]
                part = f" at {key}{inside}" if inside else ""
                msg = (
                    f"{where(path, number, key, line=True)}: expected {_describe(expected)}"
                    f"{part}, saw {shown}. Hint: every line must use the same types"
                )
                raise DataError(msg)


class Kinds:
    """The kind of JSON value (number, string, list, …) each key holds, from the first line
    that has it: a line where a key holds another kind is an error naming line and column."""

    def __init__(self, path: str):
        self.path = path
        self.first: dict[str, tuple[str, int]] = {}

    def check(self, number: int, obj: dict[str, Any], skip: Collection[str] = ()) -> None:
        for key, value in obj.items():
            kind = _kind(value)
            if kind is None or key in skip:
                continue
            first = self.first.setdefault(key, (kind, number))
            if first[0] != kind:
                shown = orjson.dumps(value).decode()[:60]
                msg = (
                    f"{where(self.path, number, key, line=True)}: expected {first[0]} (as on "
                    f"line {first[1]}), saw {shown}. Hint: every line must use the same types"
                )
                raise DataError(msg)


def _kind(value: object) -> str | None:
    """A JSON value's kind, as messages name it (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _misfit(value: object, dtype: Any, inside: str = "") -> tuple[str, Any, object] | None:
    """The first part of ``value`` that polars cannot read as ``dtype``: where in the value
    (``[1].start``), the type it needs, and the part; None if it all fits. A list of scalars
    is named whole."""
    if value is None:
        return None
    if isinstance(dtype, pl.List):
        if not isinstance(value, list):
            return inside, dtype, value
        if isinstance(dtype.inner, (pl.List, pl.Struct)):
            found = (_misfit(v, dtype.inner, f"{inside}[{i}]") for i, v in enumerate(value))
            return next((f for f in found if f is not None), None)
        return None if all(_fits(v, dtype.inner) for v in value) else (inside, dtype, value)
    if isinstance(dtype, pl.Struct):
        if not isinstance(value, dict):
            return inside, dtype, value
        fields = (_misfit(value.get(f.name), f.dtype, f"{inside}.{f.name}") for f in dtype.fields)
        return next((f for f in fields if f is not None), None)
    return None if _fits(value, dtype) else (inside, dtype, value)


def _fits(value: object, dtype: Any) -> bool:
    """Whether polars reads a JSON scalar as ``dtype`` (only the types advcli checks)."""
    if value is None:
        return True
    if dtype == pl.Boolean:
        return isinstance(value, bool)
    if dtype.is_integer():
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if dtype.is_float():
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True  # text takes any value


def _describe(dtype: Any) -> str:
    inner = dtype.inner if isinstance(dtype, pl.List) else dtype
    if isinstance(inner, (pl.List, pl.Struct)):
        one, many = ("a list", "lists") if isinstance(inner, pl.List) else ("an object", "objects")
    elif inner == pl.Boolean:
        one, many = "a boolean", "booleans"
    elif inner.is_integer():
        one, many = "a 64-bit integer", "64-bit integers"
    else:
        one, many = "a number", "numbers"
    return f"a list of {many}" if isinstance(dtype, pl.List) else one
