"""Logs read from their files: Parquet and JSONL, read again at every pass so that memory stays
bounded whatever the log's size (stdin, or Parquet and JSONL files together, are read into memory
once: :func:`read_inputs`).

:class:`ParquetSource` reads a batch at a time (:class:`FileRows`: rows of one file, a work unit
of ``--engine ray``); :class:`JsonlSource` parses a chunk of whole lines at a time, and can keep
what it parsed for the passes after it (:class:`ParsedRows`). :func:`open_source` picks the source
for a log's files.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from advcli import progress
from advcli.errors import DataError, UsageError, file_list, no_rows
from advcli.io import jsonl, jsonl_checks, remote
from advcli.io.arrow import nul_name, readable_schema, readable_table, repeated_name
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.schema import ROLES
from advcli.io.sources import (
    LogSource,
    Pins,
    Sources,
    TableSource,
    expand_inputs,
    is_parquet,
    local_path,
)
from advcli.lazy_imports import pa, pl, pq


def _input(path: str) -> Any:
    """What pyarrow's Parquet reader opens: a local path, or a remote object's file."""
    return remote.open_input(path) if remote.is_remote(path) else local_path(path)


def _unreadable_parquet(path: str, exc: Exception) -> DataError:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    hint = "check the file is complete"
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        if fh.read(64).lstrip()[:1] in (b"{", b"["):
            hint = "it holds JSON lines: name it .jsonl"
    return DataError(f"{path}: not a readable Parquet file ({reason}). Hint: {hint}")


def parquet_footer(path: str) -> pq.FileMetaData:
    """A Parquet file's footer, refused in one line where it cannot be read or disagrees with
    itself (the rows it counts are not its row groups' rows: a footer damaged or edited, which
    a reader would follow to fewer rows, silently). Every read of a log's Parquet file starts
    here."""
    try:
        meta = pq.read_metadata(_input(path))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable_parquet(path, exc) from None
    in_groups = sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
    if in_groups != meta.num_rows:
        msg = (
            f"{path}: not a readable Parquet file (its footer counts {meta.num_rows} rows, its "
            f"{meta.num_row_groups} row groups hold {in_groups}). Hint: the file is damaged: "
            "write it again"
        )
        raise DataError(msg)
    return meta


def read_parquet(path: str, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file's rows (those ``columns``), its footer checked (:func:`parquet_footer`),
    its pages verified against their checksums, and its types those advcli reads
    (:func:`advcli.io.arrow.readable_table`)."""
    parquet_footer(path)
    table = _read_table(path, columns)
    try:
        return readable_table(table, path)
    except (pa.ArrowException, ValueError) as exc:  # a conversion pyarrow fails
        raise _unreadable_parquet(path, exc) from None


def _read_table(path: str, columns: list[str] | None) -> pa.Table:
    """A Parquet file's rows (those ``columns``), its pages verified against their checksums
    (its footer checked already)."""
    try:
        return pq.read_table(
            _input(path), columns=columns, pre_buffer=False, page_checksum_verification=True
        )
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable_parquet(path, exc) from None


def _mixed_schemas(files: list[str], exc: Exception) -> DataError:
    return DataError(
        f"{file_list(files)}: the files have different columns or types ({exc}). "
        "Hint: annotate them separately"
    )


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
        if is_jsonl(f):
            # stdin and compressed files are read into bytes first (stdin's are kept).
            plain = f != STDIN and f.lower().endswith(jsonl.PLAIN_JSONL_SUFFIXES)
            data = None if plain else jsonl.read_bytes(f)
            if f == STDIN:
                sources.stdin = data
            table = jsonl.read_jsonl(f, mapping or {}, data).to_arrow()
        else:
            table = read_parquet(f)
        sources.files.append(f)
        sources.row_counts.append(table.num_rows)
        tables.append(table)
    if not tables or sum(sources.row_counts) == 0:
        raise no_rows(file_list(files) or "<input>")
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _mixed_schemas(files, exc) from None
    return table, sources


class ParquetSource(LogSource):
    """Parquet files, read from disk a batch at a time at every pass.

    Files may differ in their columns: a column some files lack is null on their rows (a role
    column must be in every file: :meth:`LogSource.files_without`). A file that cannot be read
    (a corrupt page) is an error naming it, at the read that meets it.
    """

    def __init__(self, files: list[str]):
        self.files = files
        self.pins = Pins(files)
        self.sources = Sources()
        self.row_group_rows: list[list[int]] = []  # rows of each row group, file by file
        schemas = []
        for f in files:
            meta = parquet_footer(f)
            try:
                schema = pq.read_schema(_input(f))
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise _unreadable_parquet(f, exc) from None
            schemas.append(readable_schema(schema, f))  # each batch is cast to it: _conform
            self.sources.files.append(f)
            self.sources.row_counts.append(meta.num_rows)
            self.row_group_rows.append(
                [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            )
            if (name := nul_name(schemas[-1])) is not None:
                msg = f"{f}: column {name!r} holds a NUL character. Hint: rename the column"
                raise DataError(msg)
            if (name := repeated_name(schemas[-1])) is not None:
                msg = f"{f}: column {name!r} appears twice (readers disagree on which to keep)"
                raise DataError(msg + ". Hint: keep one")
        self.file_columns = [set(schema.names) for schema in schemas]
        if self.n_rows == 0:
            raise no_rows(file_list(files))
        try:
            schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise _mixed_schemas(files, exc) from None
        self.schema = schema.remove_metadata()

    def _file_tables(self, names: list[str] | None, rows: int) -> Iterator[pa.Table]:
        for index in range(len(self.files)):
            yield from self.file_tables(index, names, rows)

    def file_tables(
        self, index: int, names: list[str] | None, rows: int, within: tuple[int, int] | None = None
    ) -> Iterator[pa.Table]:
        """Batches of one file, in the log's schema (a pass over a log is the passes over its
        files one after another: no batch spans two files). ``within``: only the file's rows
        ``[start, stop)``, ``start`` a multiple of ``rows``, read from the row groups that hold
        them, in the same batches as a pass over the whole file."""
        wanted = self.schema.names if names is None else names
        target = pa.schema([self.schema.field(n) for n in wanted])
        f, has = self.files[index], self.file_columns[index]
        present = [n for n in wanted if n in has]
        self.pins.check(f)
        try:
            pf = pq.ParquetFile(
                _input(f), pre_buffer=False, buffer_size=8 << 20, page_checksum_verification=True
            )
            if within is None:
                for batch in pf.iter_batches(batch_size=rows, columns=present):
                    yield _conform(pa.Table.from_batches([batch]), target)
            else:
                groups, at = _row_groups(pf.metadata, *within)
                read = pf.iter_batches(batch_size=rows, columns=present, row_groups=groups)
                take = within[1] - within[0]
                for table in _rebatched(read, rows, skip=within[0] - at, take=take):
                    yield _conform(table, target)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _unreadable_parquet(f, exc) from None
        self.pins.check(f)

    def first_row(self, index: int) -> int:
        """The global row of file ``index``'s first row."""
        return sum(self.sources.row_counts[:index])

    def columns(self, names: list[str]) -> pa.Table:
        target = pa.schema([self.schema.field(n) for n in names])
        tables = []
        for f, has in zip(self.files, self.file_columns, strict=True):
            self.pins.check(f)
            table = _read_table(f, [n for n in names if n in has])  # footer checked at open
            try:
                tables.append(_conform(table, target))
            except (pa.ArrowException, OSError, ValueError) as exc:  # a cast that fails
                raise _unreadable_parquet(f, exc) from None
            self.pins.check(f)
            done = sum(t.num_rows for t in tables)
            progress.read(done, done / self.n_rows)
        return pa.concat_tables(tables)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        start = 0
        for table in self._file_tables(names, rows):
            yield start, table
            start += table.num_rows
            progress.read(start, start / self.n_rows)  # the row count is in the files' footers

    def files_without(self, column: str) -> list[str]:
        return [
            f for f, has in zip(self.files, self.file_columns, strict=True) if column not in has
        ]


class FileRows(LogSource):
    """Rows ``[start, stop)`` of one file of a Parquet log (all of them by default), read as
    their part of the whole: the log's schema, global row numbers, and the batches a pass over
    the whole log reads (a work unit of ``--engine ray``)."""

    def __init__(self, log: ParquetSource, index: int, within: tuple[int, int] | None = None):
        self.log, self.index, self.within = log, index, within
        self.schema = log.schema
        self.sources = log.sources

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        start = self.log.first_row(self.index) + (self.within[0] if self.within else 0)
        for table in self.log.file_tables(self.index, names, rows, self.within):
            yield start, table
            start += table.num_rows


def _row_groups(meta: pq.FileMetaData, start: int, stop: int) -> tuple[list[int], int]:
    """The row groups that hold rows ``[start, stop)`` of a file, and the row the first begins."""
    groups: list[int] = []
    first = at = 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if at < stop and at + n > start:
            if not groups:
                first = at
            groups.append(g)
        at += n
    return groups, first


def _rebatched(
    batches: Iterator[pa.RecordBatch], rows: int, *, skip: int, take: int
) -> Iterator[pa.Table]:
    """Rows ``[skip, skip + take)`` of a stream of batches, cut into tables of ``rows`` rows
    (the last may be shorter), each in one chunk."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        pending.append(batch.slice(skip, min(batch.num_rows - skip, take - held)))
        held += pending[-1].num_rows
        skip = 0
        while held >= rows or (held and held == take):
            table = pa.Table.from_batches(pending)
            yield table.slice(0, rows).combine_chunks()
            rest = table.slice(rows)
            take -= held - rest.num_rows
            pending, held = rest.to_batches(), rest.num_rows
        if take <= 0:
            return


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table`` with ``target``'s columns, in its order and types (a missing one: nulls)."""
    if table.schema.equals(target):
        return table
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in target
    ]
    return pa.Table.from_arrays(columns, schema=target)


class JsonlSource(LogSource):
    """JSONL files (plain, ``.gz``, ``.zst``) parsed a chunk of whole lines at a time at every
    pass, so memory stays bounded whatever the log's size.

    Every chunk is parsed with one schema, taken from each file's first ``SCHEMA_LINES`` rows
    (:func:`~advcli.io.jsonl.jsonl_schema`) and promoted across files. Rows per file are
    counted by the first full pass.
    """

    def __init__(
        self, files: list[str], mapping: dict[str, str], chunk_bytes: int = jsonl.JSONL_CHUNK_BYTES
    ):
        self.files = files
        self.pins = Pins(files)
        self.chunk_bytes = chunk_bytes
        self.sources = Sources(files=list(files))
        schemas = []
        for f in files:
            with jsonl.open_stream(f) as lines:
                schemas.append(
                    jsonl.jsonl_schema(f, jsonl.head(lines, jsonl.SCHEMA_LINES), mapping)
                )
        self.file_columns = [set(schema) for schema in schemas]
        role_names = {n for role, (_, aliases) in ROLES.items() for n in (role, *aliases)}
        role_names |= {column.partition(".")[0] for column in mapping.values()}
        self._unique_keys: list[str | tuple[str, ...]] = [
            c for c in dict.fromkeys(k for s in schemas for k in s) if c in role_names
        ]
        self._unique_keys += [  # a struct field a role reads: checked inside its object
            tuple(c.split(".")) for c in mapping.values() if "." in c and c not in schemas[0]
        ]
        self._unique_checked: set[int] = set()  # files whose keys were checked
        self._fields_checked: set[tuple[int, str]] = set()  # (file, column of objects) checked
        self._id_keys = [c for c in sorted(jsonl_checks.id_columns(mapping))
                         if any(c in schema for schema in schemas)]  # fmt: skip
        self._id_kinds: jsonl_checks.IdKinds = {}  # of the log's first ids, across its files
        try:
            empty = [pl.DataFrame(schema=schema) for schema in schemas]
            self.polars_schema = pl.concat(empty, how="diagonal_relaxed").schema
        except pl.exceptions.PolarsError as exc:
            raise _mixed_schemas(files, exc) from None
        self.schema = pl.DataFrame(schema=self.polars_schema).to_arrow().schema
        self._keep = False  # keep_parsed() was called
        self._parsed: ParsedRows | None = None  # every column, parsed once
        self.sample_bytes: int | None = None  # sample(): the log is its first lines
        self.sampled_bytes: int | None = None  # how many, where the sample is not all of it

    def sample(self, limit_bytes: int) -> None:
        """Read the log as its first lines, about ``limit_bytes`` of text (whole lines, in
        file order; ``schema`` without ``--full``); :attr:`sampled_bytes` then says how much
        was read where that is not the whole log."""
        self.sample_bytes = limit_bytes
        self.chunk_bytes = min(self.chunk_bytes, limit_bytes)

    def _sampled(self, read: int) -> bool:
        """Whether a pass that has read ``read`` bytes has its sample, and more is left (the
        caller knows: it was about to read on); says so in :attr:`sampled_bytes`."""
        if self.sample_bytes is None or read < self.sample_bytes:
            return False
        self.sampled_bytes = read
        return True

    def keep_parsed(self) -> None:
        """The next pass parses every column (whatever it asks for) and keeps them in an
        unnamed temporary file (uncompressed Arrow, about 1.3x the text), which the passes
        after it read instead of parsing the text again: parsing is most of a JSONL pass."""
        self._keep = True

    def _object_keys(self, frame: pl.DataFrame) -> list[str]:
        """The role columns of ``frame`` that hold objects (or lists of them: spans), whose
        keys are checked inside each object."""

        def objects(t: Any) -> bool:
            while isinstance(t, pl.List):
                t = t.inner
            return isinstance(t, pl.Struct)

        return [c for c in self._unique_keys if isinstance(c, str) and c in frame.columns
                and objects(frame.schema[c])]  # fmt: skip

    def _frames(self, names: list[str] | None) -> Iterator[tuple[int, pl.DataFrame]]:
        """``(file index, frame)`` for every chunk of every file, in order."""
        if self._parsed is not None:
            yield from self._parsed.frames(names, sum(self.sources.row_counts))
            return
        full = self.polars_schema
        keep = ParsedRows() if self._keep else None
        schema = full if names is None or keep else {n: full[n] for n in names}
        rows = read = 0
        known = sum(self.sources.row_counts) if self.sources.row_counts else None
        try:
            for i, path in enumerate(self.files):
                if self._sampled(read):
                    break
                self.pins.check(path)
                checked: set[str] = set()  # columns of objects whose keys this pass checks
                for line, chunk in jsonl.chunks(path, self.chunk_bytes):
                    if self._sampled(read):  # (a chunk more: the log goes on)
                        break
                    frame = jsonl.read_ndjson(path, chunk, full, line, schema=schema)
                    if i not in self._unique_checked:
                        jsonl_checks.refuse_duplicate_keys(
                            path, chunk, line, frame.height, self._unique_keys
                        )
                        jsonl_checks.refuse_non_scalar_ids(
                            path, chunk, line, self._id_keys, self._id_kinds
                        )
                    objects = [
                        c for c in self._object_keys(frame) if (i, c) not in self._fields_checked
                    ]
                    jsonl_checks.refuse_duplicate_fields(path, chunk, line, frame.select(objects))
                    checked.update(objects)
                    if keep is not None:
                        keep.add(i, frame)
                    yield i, frame if names is None else frame.select(names)
                    rows, read = rows + frame.height, read + len(chunk)
                    # the share: of the rows once counted; of the bytes until then (plain files)
                    size = self.plain_bytes
                    progress.read(rows, rows / known if known else read / size if size else None)
                self.pins.check(path)
                if self.sampled_bytes is None:
                    self._unique_checked.add(i)
                    self._fields_checked |= {(i, c) for c in checked}
        except BaseException:
            if keep is not None:
                keep.close()
            raise
        self._keep = False
        if keep is not None and keep.finish():  # a whole pass: the later ones read it
            self._parsed = keep

    @functools.cached_property
    def plain_bytes(self) -> int | None:
        """The files' size in bytes; None if one is compressed (its share is not known)."""
        if any(not f.lower().endswith(jsonl.PLAIN_JSONL_SUFFIXES) for f in self.files):
            return None
        return sum(os.path.getsize(f) for f in self.files)

    def files_without(self, column: str) -> list[str]:
        return [
            f for f, has in zip(self.files, self.file_columns, strict=True) if column not in has
        ]

    def _count_rows(self) -> None:
        """Rows per file (for ``n_rows`` and error messages), unless a full pass counted them."""
        if self.sources.row_counts:
            return
        if self.polars_schema:
            self.columns([next(iter(self.polars_schema))])
        else:  # lines of empty objects, {}: no column to count them by
            self.sources.row_counts = [jsonl.count_rows(f, self.chunk_bytes) for f in self.files]

    @property
    def n_rows(self) -> int:
        self._count_rows()
        return sum(self.sources.row_counts)

    def _count(
        self, frames: Iterable[tuple[int, pl.DataFrame]]
    ) -> Iterator[tuple[int, pl.DataFrame]]:
        """Pass the frames through, recording the rows of every file."""
        counts = [0] * len(self.files)
        for i, frame in frames:
            counts[i] += frame.height
            yield i, frame
        self.sources.row_counts = counts

    def columns(self, names: list[str]) -> pa.Table:
        if not names:  # polars frames without columns have no rows: keep the count
            return pa.table({"": pa.nulls(self.n_rows)}).drop_columns([""])
        tables = [frame.to_arrow() for _, frame in self._count(self._frames(names))]
        return pa.concat_tables(tables)

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        self._count_rows()
        start = 0
        for _, table in self._sliced(self._frames(names), rows):
            yield start, table
            start += table.num_rows

    def file_batches(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        counted = self._count((i, frame) for i, frame in self._frames(None))
        yield from self._sliced(counted, rows)

    @staticmethod
    def _sliced(
        frames: Iterable[tuple[int, pl.DataFrame]], rows: int
    ) -> Iterator[tuple[int, pa.Table]]:
        """Each chunk's frame cut into batches of ``rows`` rows (no batch spans two chunks)."""
        for i, frame in frames:
            for lo in range(0, frame.height, rows):
                yield i, frame.slice(lo, rows).to_arrow()


class ParsedRows:
    """A JSONL log's parsed chunks in an unnamed temporary file (an Arrow IPC stream,
    uncompressed: writing and reading it back cost a tenth of parsing the text again).
    Unnamed, so nothing is left on disk however the process ends; ``TMPDIR`` says where. Only
    a speed-up: where the folder has no room, nothing is kept and every pass parses again."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        # Per frame added: its input file and its record batches (polars parses a chunk in
        # pieces, as many as it has threads), so that frames() gives back the same frames.
        self._frames: list[tuple[int, int]] = []
        with contextlib.suppress(OSError):
            self._file = tempfile.TemporaryFile(prefix="advcli-parsed-")  # noqa: SIM115

    def add(self, file_index: int, frame: pl.DataFrame) -> None:
        if self._file is None:
            return
        table = frame.to_arrow()
        try:
            if self._writer is None:
                sink = pa.PythonFile(self._file, mode="w")
                self._writer = pa.ipc.new_stream(sink, table.schema)
            batches = table.to_batches()
            for batch in batches:
                self._writer.write_batch(batch)
            self._frames.append((file_index, len(batches)))
        except OSError:  # no room: keep nothing
            self.close()

    def finish(self) -> bool:
        """Whether every row added is on disk, to be read back by :meth:`frames`."""
        try:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._file is not None:
                self._file.flush()
        except OSError:
            self.close()
        return self._file is not None and bool(self._frames)  # (no rows: parse again)

    def frames(self, names: list[str] | None, n_rows: int) -> Iterator[tuple[int, pl.DataFrame]]:
        """``(file index, frame)`` as :meth:`add` got them (``names``: those columns): the
        same frames, so a pass over them reads the same batches as a pass over the text."""
        assert self._file is not None
        self._file.seek(0)
        rows = 0
        reader = pa.ipc.open_stream(pa.PythonFile(self._file, mode="r"))
        for file_index, n_batches in self._frames:
            batches = [reader.read_next_batch() for _ in range(n_batches)]
            table = pa.Table.from_batches(batches, schema=reader.schema)
            frame = pl.from_arrow(table if names is None else table.select(names))
            assert isinstance(frame, pl.DataFrame)
            yield file_index, frame
            rows += table.num_rows
            progress.read(rows, rows / n_rows if n_rows else None)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a writer whose file is full: its end unwritten
            if self._writer is not None:
                self._writer.close()
        self._writer = None
        if self._file is not None:
            with contextlib.suppress(OSError):  # its buffered bytes: nowhere to go, not needed
                self._file.close()
            self._file = None


def open_source(patterns: list[str], mapping: dict[str, str] | None = None) -> LogSource:
    """A log of Parquet files, or of JSONL files, streams from disk at every pass; stdin, or
    Parquet and JSONL files together, are read into memory once."""
    files = expand_inputs(patterns)
    if files and all(is_parquet(f) for f in files):
        return ParquetSource(files)
    for f in files:
        if remote.is_remote(f):
            msg = (
                f"{f}: JSONL in object storage is not read in place yet (Parquet is). Hint: "
                "copy it to a local disk, or write the log as Parquet"
            )
            raise UsageError(msg)
    if files and all(is_jsonl(f) and f != STDIN for f in files):
        return JsonlSource(files, mapping or {})
    table, sources = read_inputs(patterns, mapping)
    return TableSource(table, sources)
