"""Where a log's rows come from: input discovery, and the protocol of logs read in passes.

Parquet (``.parquet``) and JSONL (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``; ``-`` is JSONL on
stdin). Several files, a directory or a glob are read as one log, in the order given (a directory
or glob in sorted order). A :class:`LogSource` gives a log's rows pass after pass: all rows of a
few columns, or batches of rows; :class:`Sources` turns a global row back into its file and row
(or JSONL line) for error messages. Here too what every source shares (the files pinned,
reading ahead on a thread that reports the pass's progress), a log in memory, and struct fields
lifted into columns; the sources that read the files are in :mod:`advcli.io.file_sources`.
"""

from __future__ import annotations

import contextvars
import glob
import io
import os
import queue
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from advcli import progress
from advcli.errors import DataError, UsageError, where
from advcli.io import jsonl, remote
from advcli.io.interrupts import keep_python_interrupt
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.lazy_imports import np, pa, pc

PARQUET_SUFFIXES = (".parquet", ".pq")

T = TypeVar("T")


def is_parquet(path: str) -> bool:
    return path.lower().endswith(PARQUET_SUFFIXES)


def refuse_pickle(path: str) -> None:
    """verl's ``gen_batch.dp`` (read only by ``--from verl``) and SkyRL's ``.pkl`` dumps
    pickle the frameworks' own classes."""
    if path.lower().endswith(".dp"):
        msg = (
            f"{path}: a pickle of verl's DataProto (its skip.rollout dump), which only verl's "
            "reader opens (without running code from the file). Hint: read it with "
            "`from_='verl'`"
        )
        raise UsageError(msg)
    if path.lower().endswith((".pkl", ".pickle")):
        msg = (
            f"{path}: a pickle of the framework's own classes (SkyRL's dumped_data): loading "
            "it would run code from the file, and it cannot be read without the framework "
            "installed, so advcli does not. Hint: use the framework's JSONL dump instead "
            "(SkyRL: trainer.dump_eval_results)"
        )
        raise UsageError(msg)


def refuse_unreadable(path: str) -> None:
    """Refuse an input that is no regular file: a FIFO or a device would hang the second
    pass (advcli reads a log more than once), and a symlink loop cannot be opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        msg = f"{path}: cannot open it ({exc.strerror or exc}). Hint: check the path"
        raise UsageError(msg) from None
    if not stat.S_ISREG(mode):
        msg = (
            f"{path}: not a regular file (a FIFO or a device), which advcli cannot read more "
            "than once. Hint: pipe it to standard input instead (advcli ... - < it), or save "
            "it to a file"
        )
        raise UsageError(msg)


def local_path(path: str) -> str:
    """A local path as pyarrow takes it for one: ``./`` before a relative path whose first
    part looks like a URI's scheme to it (``s3:b.parquet``, which it would open in S3; only
    ``scheme://`` is a URI to advcli)."""
    first = path.split("/", 1)[0]
    return f"./{path}" if ":" in first and not os.path.isabs(path) else path


def expand_inputs(patterns: list[str]) -> list[str]:
    """Files named by paths, directories and globs, in order, each once. A path that exists
    is that file or directory, even where its name holds glob characters (``[x].parquet``);
    only a ``scheme://`` path is a URI (``s3:b.parquet`` is a local file)."""
    files: list[str] = []
    for pattern in patterns:
        if pattern == STDIN:
            found = [STDIN]
        elif remote.is_remote(pattern):
            found = remote.expand(pattern, lambda name: is_jsonl(name) or is_parquet(name))
        elif os.path.isdir(pattern):
            found = sorted(
                str(p) for p in Path(pattern).iterdir() if is_jsonl(p.name) or is_parquet(p.name)
            )
            if not found:
                msg = f"{pattern}: the directory holds no .parquet or .jsonl files"
                raise UsageError(msg)
        elif any(ch in pattern for ch in "*?[") and not os.path.lexists(pattern):
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
            refuse_pickle(f)
            if f.lower().endswith(".pt"):
                msg = (
                    f"{f}: a torch file. Hint: slime and miles dump their rollouts as .pt "
                    "files: read them with `from_='slime'`"
                )
                raise UsageError(msg)
            if not (is_jsonl(f) or is_parquet(f)):
                msg = (
                    f"{f}: unknown input format. Hint: advcli reads .parquet and .jsonl "
                    "(.jsonl.gz, .jsonl.zst) files, and frameworks' dumps with `from_`"
                )
                raise UsageError(msg)
            if f != STDIN and not remote.is_remote(f):
                refuse_unreadable(f)
                f = local_path(f)
            if f not in files:
                files.append(f)
    return files


@dataclass
class Sources:
    """Where every row of a log came from, for error messages.

    ``stdin`` holds the bytes read from ``-``: stdin cannot be read twice. ``lines`` (a log read
    through a preset) gives, per file, the line of each row, or None where rows are not lines.
    """

    files: list[str] = field(default_factory=list)
    row_counts: list[int] = field(default_factory=list)
    stdin: bytes | None = field(default=None, repr=False)
    lines: list[np.ndarray | None] | None = field(default=None, repr=False)

    def locate(self, row: int) -> tuple[str, int, bool]:
        """``(file, position, is_line)``: a 0-based global row as a file row or JSONL line."""
        for i, (f, n) in enumerate(zip(self.files, self.row_counts, strict=True)):
            if row < n:
                if self.lines is not None:
                    lines = self.lines[i]
                    return (f, int(lines[row]), True) if lines is not None else (f, row, False)
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
        lines = io.BytesIO(self.stdin or b"") if path == STDIN else jsonl.open_stream(path)
        with lines:
            return jsonl.line_number(lines, row)


class Pins:
    """Each local input file's size and modification time (and inode, on the machine that
    took them), taken when the log is opened: a file replaced or rewritten between two
    passes, or during one, would mix two versions in one output (advantages from one, rewards
    from the other), so every read of a file is checked against them, before and after."""

    def __init__(self, files: list[str]):
        self.host = os.uname().nodename
        self.seen = {f: self._identity(f) for f in files if f != STDIN and not remote.is_remote(f)}

    @staticmethod
    def _identity(path: str) -> tuple[int, int, int]:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns, st.st_ino

    def check(self, path: str) -> None:
        was = self.seen.get(path)
        if was is None:
            return
        try:
            now = self._identity(path)
        except OSError:
            now = (-1, -1, -1)
        same_machine = os.uname().nodename == self.host  # an inode is one machine's
        if now[:2] != was[:2] or (same_machine and now[2] != was[2]):
            msg = (
                f"{path}: changed while advcli read it (replaced or written to between its "
                "passes), so no output was written. Hint: run again on a file nothing writes "
                "to (copy it first)"
            )
            raise DataError(msg)


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

    def files_without(self, column: str) -> list[str]:
        """The files of the log that have no such column (their rows read it as null)."""
        return []

    def keep_parsed(self) -> None:
        """A hint: the log will be read again, every column. A source that parses text keeps
        what it parsed at the next pass for the passes after it."""

    def columns(self, names: list[str]) -> pa.Table:
        raise NotImplementedError

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        """``(first global row, table)`` for consecutive batches of ``rows`` rows."""
        raise NotImplementedError

    def file_batches(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        """``(input file, table)``: every column, in the batches of :meth:`batches`; a source
        that counts its rows by reading them counts them on the way."""
        ends = np.cumsum(self.sources.row_counts)
        for start, table in self.batches(None, rows):
            yield int(np.searchsorted(ends, start, side="right")), table


class TableSource(LogSource):
    """A log already in memory."""

    def __init__(self, table: pa.Table, sources: Sources):
        self.table = table
        self.schema = table.schema
        self.sources = sources

    def columns(self, names: list[str]) -> pa.Table:
        return self.table.select(names)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        table = self.table if names is None else self.table.select(names)
        first = 0
        for n in self.sources.row_counts or [table.num_rows]:  # no batch spans two files
            for start in range(first, first + n, rows):
                yield start, table.slice(start, min(rows, first + n - start))
                done = min(start + rows, first + n)
                progress.read(done, done / table.num_rows)
            first += n


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Produce ``items`` on a thread, ``depth`` ahead of the consumer (reading overlaps work).

    An error on the thread is raised in the consumer; closing the generator early (an error
    downstream) stops the thread.
    """
    done = object()
    box: queue.Queue[Any] = queue.Queue(maxsize=depth)
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

    context = contextvars.copy_context()  # the block's reporter: reads report to it
    thread = threading.Thread(target=context.run, args=(run,), daemon=True)
    thread.start()
    try:
        while (item := box.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            keep_python_interrupt()
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                box.get_nowait()
            except queue.Empty:
                thread.join(0.01)


class DerivedColumns(LogSource):
    """A log with columns derived from others of each batch as it is read (the base log's
    columns stay as they are). A subclass says which base columns a set of names reads
    (:meth:`_base_names`) and adds the derived ones to a table of them (:meth:`_derive`)."""

    base: LogSource

    @property
    def n_rows(self) -> int:
        return self.base.n_rows

    def files_without(self, column: str) -> list[str]:
        return self.base.files_without(column) if column in self.base.schema.names else []

    def keep_parsed(self) -> None:
        self.base.keep_parsed()

    def _base_names(self, names: list[str] | None) -> list[str] | None:
        raise NotImplementedError

    def _derive(self, table: pa.Table, names: list[str] | None, row0: int) -> pa.Table:
        """``table`` (base columns of the rows from ``row0`` on) with the derived columns,
        as ``names`` selects them (None: every column)."""
        raise NotImplementedError

    def columns(self, names: list[str]) -> pa.Table:
        return self._derive(self.base.columns(self._base_names(names) or []), names, 0)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        for row0, table in self.base.batches(self._base_names(names), rows):
            yield row0, self._derive(table, names, row0)

    def file_batches(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        row0 = 0
        for i, table in self.base.file_batches(rows):
            yield i, self._derive(table, None, row0)
            row0 += table.num_rows


class NestedFields(DerivedColumns):
    """A log with struct fields lifted into columns of their own: ``--col prompt_id=group.id``
    names the field ``id`` of the struct column ``group``, read as a column ``group.id``."""

    def __init__(self, base: LogSource, paths: dict[str, list[str]]):
        self.base = base
        self.paths = paths  # lifted column -> [struct column, field, field, ...]
        self.sources = base.sources
        fields = [pa.field(name, _field_type(base.schema, path)) for name, path in paths.items()]
        self.schema = pa.schema([*base.schema, *fields])

    def _base_names(self, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        wanted = [self.paths[n][0] if n in self.paths else n for n in names]
        return list(dict.fromkeys(wanted))

    def _derive(self, table: pa.Table, names: list[str] | None, row0: int) -> pa.Table:
        for name, path in self.paths.items():
            if names is None or name in names:
                column = table.column(path[0])
                for field_name in path[1:]:
                    column = pc.struct_field(column, field_name)
                table = table.append_column(name, column)
        return table if names is None else table.select(names)


def _field_type(schema: pa.Schema, path: list[str]) -> pa.DataType:
    t = schema.field(path[0]).type
    for name in path[1:]:
        t = t.field(name).type
    return t


def nested_paths(schema: pa.Schema, columns: list[str]) -> dict[str, list[str]]:
    """The ``--col`` columns that are dotted paths into struct columns (``group.id``), as
    paths; a dotted name that is a column itself stays a column."""
    out = {}
    for name in columns:
        if name in schema.names or "." not in name:
            continue
        path = name.split(".")
        t = schema.field(path[0]).type if path[0] in schema.names else None
        for part in path[1:]:
            if t is None or not pa.types.is_struct(t) or t.get_field_index(part) < 0:
                t = None
                break
            t = t.field(part).type
        if t is not None:
            out[name] = path
    return out
