"""The writers of advcli's output files, Parquet or JSONL, batch by batch, and the metadata
written with them.

A file is written under a temporary name and renamed into place (:mod:`advcli.io.outputs`), so it
is complete or absent; its batches are encoded on a thread of their own (:class:`PolarsSink`)
while the caller computes the next. A JSONL output refuses what JSON cannot hold (bytes, and NaN
or infinity unless asked), and :func:`read_metadata` reads back what advcli wrote.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from advcli import progress
from advcli.errors import DataError, OutputError, StdoutClosed, UsageError
from advcli.io import remote, stdout
from advcli.io.arrow import is_type
from advcli.io.checksum import file_sha256
from advcli.io.interrupts import interrupt_deferred, keep_python_interrupt
from advcli.io.manifests import footer_value
from advcli.io.outputs import (
    STDOUT,
    atomic_path,
    create_empty,
    existing_metadata,
    files_moving,
    is_jsonl_output,
    metadata_path,
    metadata_paths,
    output_errors,
    publish,
    temporaries,
    temporary_beside,
)
from advcli.lazy_imports import np, pa, pc, pl, pq

METADATA_KEY = b"advcli"
ROW_GROUP_ROWS = 4096  # ~4k rows of long token lists keep a decoded row group small


NONFINITE = ("error", "null")
"""What a NaN or infinity bound for a JSONL output becomes: an error at its row and column
(JSON has no such number, and most readers refuse a bare ``NaN``), or null, counted."""


class Written(NamedTuple):
    """What :func:`write_batches` wrote: rows, tokens, the sha256 of the bytes (when asked),
    and the NaN and infinite values written as null (``nonfinite="null"``, JSONL)."""

    rows: int
    tokens: int
    sha256: str | None
    nulled: int


def write_batches(
    out: str,
    fmt: str,
    metadata: dict[str, Any],
    batches: Iterable[tuple[pa.Table, int]],
    *,
    force: bool,
    digest: bool = False,
    nonfinite: str = "error",
    passed_through: Iterable[str] = (),
) -> Written:
    """Write ``(table, tokens)`` batches to ``out`` atomically. An output in object storage is
    written locally, then uploaded in one piece. A JSONL output refuses the first NaN or
    infinity of the ``passed_through`` columns (the input's, as they were: :data:`NONFINITE`)
    unless ``nonfinite`` is "null"; in advcli's own columns NaN is "no value" (a critic's
    first token), written null."""
    if out == STDOUT:
        return _to_stdout(fmt, metadata, batches, nonfinite, set(passed_through))
    if remote.is_remote(out):
        with tempfile.TemporaryDirectory(prefix="advcli-") as folder:
            local = os.path.join(folder, "out.parquet")
            done = write_batches(local, fmt, metadata, batches, force=False, digest=digest,
                                 nonfinite=nonfinite,
                                 passed_through=passed_through)  # fmt: skip
            remote.upload(local, out, force=force)
            return done
    rows = tokens = nulled = 0
    checked = set(passed_through)
    with TableWriter(out, fmt, metadata, force=force) as writer:
        for table, n_tokens in batches:
            if fmt == "jsonl":
                nulled += _json_ready(table, out, rows, nonfinite, checked)
            writer.write(table)
            rows += table.num_rows
            tokens += n_tokens
            progress.advance(rows, tokens)
        writer.commit()
    return Written(rows, tokens, file_sha256(out) if digest else None, nulled)


def _to_stdout(
    fmt: str,
    metadata: dict[str, Any],
    batches: Iterable[tuple[pa.Table, int]],
    nonfinite: str,
    checked: set[str],
) -> Written:
    """``--out -``: JSON lines as a file gets them, or an Arrow IPC stream whose schema carries
    the run's metadata (key ``advcli``), each batch flushed as it comes (a reader downstream
    starts at once). A JSONL stream has no place for the metadata."""
    sink = sys.stdout.buffer
    rows = tokens = nulled = 0
    stream: pa.RecordBatchStreamWriter | None = None
    schema: pa.Schema | None = None
    try:
        for table, n_tokens in batches:
            if fmt == "jsonl":
                nulled += _json_ready(table, "`out='-'`", rows, nonfinite, checked)
                sink.write(_frame(table).write_ndjson().encode())
            else:
                if stream is None or schema is None:
                    kv = {METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()}
                    schema = table.schema.with_metadata(kv)
                    stream = pa.ipc.new_stream(sink, schema)
                stream.write_table(table.cast(schema))
            sink.flush()
            rows += table.num_rows
            tokens += n_tokens
            progress.advance(rows, tokens)
        if stream is not None:
            stream.close()
        sink.flush()
    except BrokenPipeError:
        raise StdoutClosed("standard output closed") from None
    except OSError as exc:  # a full disk
        raise stdout.unwritable(exc) from None
    return Written(rows, tokens, None, nulled)


def _json_ready(table: pa.Table, out: str, row0: int, nonfinite: str, checked: set[str]) -> int:
    """Check that ``table`` (rows ``row0`` on of the output ``out``) can be JSON lines: no
    bytes column, and no NaN or infinity in the ``checked`` columns unless ``nonfinite`` is
    "null" (then: how many)."""
    count = 0
    for name, column in zip(table.column_names, table.columns, strict=True):
        if (unwritable := _not_json(column.type)) is not None:
            what = "bytes" if any(is_type(k, unwritable) for k in _BYTES) else unwritable
            msg = (
                f"{out}: column '{name}' holds {what}, which JSON lines cannot hold. Hint: "
                "write Parquet (`out` with a .parquet name)"
            )
            raise UsageError(msg)
        if name not in checked or not _holds_floats(column.type):
            continue
        leaves = list(_float_values(column.combine_chunks(), np.arange(len(column))))
        flat = np.concatenate([values for values, _ in leaves])
        row_of_value = np.concatenate([rows for _, rows in leaves])
        bad = ~np.isfinite(flat)
        if not bad.any():
            continue
        if nonfinite == "null":
            count += int(bad.sum())
            continue
        at = int(np.flatnonzero(bad)[np.argmin(row_of_value[bad])])  # the first row's
        msg = (
            f"{out}: row {row0 + int(row_of_value[at])} of the output, column '{name}': "
            f"{flat[at]}, which JSON has no number for (it would be written null). Hint: "
            "pass `nonfinite='null'` to write null (counted in the summary), or write Parquet"
        )
        raise DataError(msg)
    return count


# The plain types polars' JSON writer writes (it panics on bytes, and stops on others)
_JSON_PLAIN = (
    "null", "boolean", "integer", "floating", "decimal", "string", "large_string",
    "string_view", "date", "time", "timestamp", "duration",
)  # fmt: skip
_LISTS = ("list", "large_list", "fixed_size_list", "list_view", "large_list_view")
_BYTES = ("binary", "large_binary", "fixed_size_binary", "binary_view")


def _not_json(t: pa.DataType) -> pa.DataType | None:
    """The first type within ``t`` that JSON lines cannot hold (bytes; a map whose keys are
    not text; an interval, a union...), None if there is none."""
    if isinstance(t, pa.BaseExtensionType):
        return _not_json(t.storage_type)
    if pa.types.is_dictionary(t):
        return _not_json(t.value_type)
    if pa.types.is_map(t) and not any(is_type(k, t.key_type) for k in ("string", "large_string")):
        return t
    if children := _children(t):
        return next((u for f in children if (u := _not_json(f.type)) is not None), None)
    return None if any(is_type(kind, t) for kind in _JSON_PLAIN) else t


def _children(t: pa.DataType) -> list[pa.Field]:
    """The fields a list, struct or map type is made of (none for other types)."""
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if pa.types.is_struct(t):
        return list(t)
    return [t.value_field] if any(is_type(kind, t) for kind in _LISTS) else []


def _holds_floats(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or any(_holds_floats(f.type) for f in _children(t))


def _float_values(array: pa.Array, rows: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The float values under ``array`` (through lists, structs and maps), nulls as 0, and the
    row of each (``rows``: the row of each of ``array``'s values), leaf by leaf."""
    t = array.type
    if pa.types.is_floating(t):
        values = np.asarray(array.to_numpy(zero_copy_only=False), np.float64)  # nulls NaN
        if array.null_count:  # (fill_null takes no half float before pyarrow 16)
            values[array.is_null().to_numpy(zero_copy_only=False)] = 0
        yield values, rows
    elif pa.types.is_struct(t):
        for field in array.flatten():  # (the struct's nulls and slice applied)
            yield from _float_values(field, rows)
    elif pa.types.is_map(t):  # as the list of {key, value} it is
        yield from _float_values(array.cast(pa.list_(pa.struct(_children(t)))), rows)
    elif any(is_type(kind, t) for kind in _LISTS):
        parents = np.asarray(pc.list_parent_indices(array))
        yield from _float_values(pc.list_flatten(array), rows[parents])


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """zstd; no dictionary and no min/max statistics on list columns.

    Dictionaries slow writes of long token lists by ~40%; statistics over every token id or
    advantage cost ~12% of the write and prune nothing.
    """
    scalar = [
        f.name
        for f in schema
        if not pa.types.is_list(f.type) and not pa.types.is_large_list(f.type)
    ]
    return {
        "compression": "zstd",
        "use_dictionary": scalar,
        "write_statistics": scalar,
        "write_page_checksum": True,  # read back verified (verify, and any later read)
    }


def write_bytes(out: str, data: bytes, *, force: bool) -> None:
    """``data`` as the file ``out`` (complete, or absent after an error), or on standard
    output (``-``)."""
    if out != STDOUT:
        with atomic_path(out, force=force) as tmp:
            tmp.write_bytes(data)
        return
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise StdoutClosed("standard output closed") from None
    except OSError as exc:  # a full disk
        raise stdout.unwritable(exc) from None


def write_json_to(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_metadata(path: str) -> dict[str, Any] | None:
    """The advcli metadata of an output written by advcli, or None.

    A JSONL output's metadata file (:func:`metadata_path`) records the size and sha256 of the
    data it describes, and
    is written in full (under a temporary name) before the data moves into place: a run killed
    between the two moves leaves the new data with the old metadata (or none) and the new
    metadata still under its temporary name, which is then the one returned. A ``.meta.json``
    that describes other data (an edit) is an error rather than the wrong metadata.
    """
    if not is_jsonl_output(path):
        hint = "annotate the log again"
        raw = footer_value(pq.read_metadata(path), METADATA_KEY, path, hint)
        return None if raw is None else _metadata(raw, f"{path} (its advcli metadata)")
    meta_path = existing_metadata(path) or metadata_path(path)
    meta = _metadata(meta_path.read_bytes(), str(meta_path)) if meta_path.exists() else None
    data = _DataDigest(path)
    if meta is not None and data.described_by(meta):
        return meta
    pending = [
        candidate for place in metadata_paths(path) for candidate in temporaries(place, ".tmp")
    ]
    for candidate in sorted(pending):
        with contextlib.suppress(DataError, OSError):
            found = _metadata(candidate.read_bytes(), str(candidate))
            if found.get("data") is not None and data.described_by(found):
                return found
    if meta is None:
        return None
    msg = (
        f"{meta_path}: describes another version of {path} (an edit, or another program's "
        "write). Hint: annotate the log again"
    )
    raise DataError(msg)


class _DataDigest:
    """A data file's size and sha256, computed once and only when asked."""

    def __init__(self, path: str):
        self.path = path

    @functools.cached_property
    def record(self) -> dict[str, Any]:
        return {"bytes": os.path.getsize(self.path), "sha256": file_sha256(self.path)}

    def described_by(self, meta: dict[str, Any]) -> bool:
        data = meta.get("data")
        if data is None:
            return True  # written before advcli recorded it
        return isinstance(data, dict) and all(data.get(k) == v for k, v in self.record.items())


_METADATA_TYPES = {"method": str, "params": dict, "roles": dict, "convention": str}


def _metadata(raw: bytes, shown: str) -> dict[str, Any]:
    """advcli's metadata from its JSON text, its fields of the types advcli reads."""
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        reason = " ".join(str(exc).split())
        msg = f"{shown}: not advcli metadata ({reason}). Hint: annotate the log again"
        raise DataError(msg) from None
    if not isinstance(meta, dict):
        raise DataError(f"{shown}: not advcli metadata. Hint: annotate the log again")
    for key, kind in _METADATA_TYPES.items():
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            msg = (
                f"{shown}: advcli metadata with {key!r} of type {type(meta[key]).__name__}, "
                f"expected {kind.__name__}. Hint: annotate the log again"
            )
            raise DataError(msg)
    roles = meta.get("roles") or {}
    if not all(isinstance(c, str) for c in roles.values()):
        msg = f"{shown}: advcli metadata whose roles are not column names. Hint: annotate again"
        raise DataError(msg)
    return meta


def _frame(table: pa.Table) -> pl.DataFrame:
    """A polars frame over an Arrow table's buffers (no copy)."""
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame


class PolarsSink:
    """polars' streaming writer (Parquet or NDJSON) on its own thread, fed one table at a time.

    pyarrow's ``ParquetWriter`` encodes on one core; polars' sink encodes columns on every core
    and was 3x faster on 2 cores for long float lists, and an annotate run is bound by writing.
    The sink pulls the tables from a small queue (through an IO-source plugin), so memory stays
    bounded and the caller goes on computing while it writes. Parquet: zstd level 1, row groups
    of ``ROW_GROUP_ROWS``, the metadata in the file's key-value metadata; lists come back as
    ``large_list`` and strings as ``large_string``.
    """

    def __init__(
        self,
        path: Path,
        target: str,
        fmt: str,
        schema: pa.Schema,
        metadata: dict[str, Any],
        depth: int = 2,
    ):
        self.path = path
        self.target = target  # what the user asked for; ``path`` is its temporary name
        self._queue: queue.Queue[pa.Table | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        frames = pl.io.plugins.register_io_source(
            self._frames, schema=_frame(schema.empty_table()).schema
        )
        write: Callable[[Path], object]
        if fmt == "parquet":
            kv = {METADATA_KEY.decode(): json.dumps(metadata, sort_keys=True)}
            write = functools.partial(
                frames.sink_parquet,
                compression="zstd",
                compression_level=1,
                row_group_size=ROW_GROUP_ROWS,
                metadata=kv,
            )
        else:
            write = frames.sink_ndjson
        self._pulling = threading.Event()  # the sink's query runs: its handlers are in place
        # Set when the file is closed. Not Thread.is_alive()/join(): on Python 3.11 a Ctrl-C
        # landing inside them marks a running thread stopped, and the clean-up would remove
        # the file while the thread still writes it.
        self._done = threading.Event()
        threading.Thread(target=self._sink, args=(write,), daemon=True).start()

    def _frames(self, *_: object) -> Iterator[pl.DataFrame]:
        self._pulling.set()
        while (table := self._queue.get()) is not None:
            yield _frame(table)

    def _sink(self, write: Callable[[Path], object]) -> None:
        try:
            write(self.path)
        except BaseException as exc:  # handed to the caller
            self._error = exc
            with contextlib.suppress(queue.Empty):
                while True:  # unblock a producer waiting on a full queue
                    self._queue.get_nowait()
        finally:
            self._done.set()

    def _put(self, item: pa.Table | None) -> None:
        while not self._done.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        if isinstance(self._error, KeyboardInterrupt):
            raise KeyboardInterrupt
        if self._error is not None:
            reason = " ".join(str(self._error).split()) or type(self._error).__name__
            msg = (
                f"{self.target}: could not write the output ({reason}). "
                "Hint: check the disk has room and the folder is writable"
            )
            raise OutputError(msg) from self._error

    def write(self, table: pa.Table) -> None:
        self._raise_if_failed()
        while not self._pulling.is_set() and not self._done.is_set():
            self._pulling.wait(0.005)  # the first table: once the query runs, Ctrl-C is Python's
        keep_python_interrupt()
        self._put(table)
        keep_python_interrupt()
        self._raise_if_failed()

    def close(self) -> None:
        """End the stream and wait for the file to be finished."""
        self._put(None)
        self._done.wait()
        self._raise_if_failed()


class TableWriter:
    """Write tables batch by batch to a temporary file; :meth:`commit` renames it into place.

    Writes run on a :class:`PolarsSink` thread, so the caller computes the next batch meanwhile.
    Used as a context manager: leaving the block without :meth:`commit` (an error, an
    interrupt) removes the temporary file, so the target is either complete or untouched.
    Nothing is created on disk before the first table.
    """

    def __init__(self, out: str, fmt: str, metadata: dict[str, Any], *, force: bool = False):
        self.out = out
        self.fmt = fmt
        self.metadata = metadata
        self.force = force
        self._tmp: Path | None = None
        self._sink: PolarsSink | None = None

    def write(self, table: pa.Table) -> None:
        if self._sink is None:
            # A Ctrl-C waits until the file exists *and* its writer thread runs: the clean-up
            # then finds both (a thread still starting would create the file after it)
            with interrupt_deferred(), output_errors(self.out):
                self._tmp = temporary_beside(Path(self.out))
                create_empty(self._tmp)
                self._sink = PolarsSink(self._tmp, self.out, self.fmt, table.schema, self.metadata)
        self._sink.write(table)

    def commit(self) -> None:
        """Finish the file and move it into place (a JSONL file, then its metadata file,
        which records the data's size and sha256: see :func:`read_metadata`)."""
        if self._tmp is None:
            msg = f"{self.out}: nothing to write"
            raise OutputError(msg)
        self._close()
        with output_errors(self.out):
            if self.fmt != "jsonl":
                publish(self._tmp, Path(self.out), force=self.force, shown=self.out)
                return
            # The metadata is written in full before the data moves: a full disk stops the run
            # with the old output intact, and a kill between the two moves leaves it where
            # read_metadata() finds it.
            # Both moves under the folder's lock: runs writing this output at once (--force)
            # leave one run's pair, whatever the order their moves would have interleaved in.
            data = {"bytes": self._tmp.stat().st_size, "sha256": file_sha256(self._tmp)}
            target = Path(self.out)
            with files_moving(target), atomic_path(str(metadata_path(self.out))) as meta:
                write_json_to(meta, {**self.metadata, "data": data})
                publish(self._tmp, target, force=self.force, shown=self.out)
                # the replaced output's metadata, where advcli wrote it before: its own, stale
                metadata_paths(self.out)[1].unlink(missing_ok=True)

    def _close(self) -> None:
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._close()
        except Exception:
            if exc_info[0] is None:  # an error already in flight is the one to report
                raise
        finally:
            if self._tmp is not None:
                self._tmp.unlink(missing_ok=True)
