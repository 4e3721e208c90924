"""Writers that never leave a partial output: write to a temporary name, then rename.

The temporary file or folder sits beside the target (so the rename is atomic on one file system)
and is removed if anything fails before the rename. Also: the checks that refuse an output
before any work (it exists, it is an input), and the metadata advcli writes with its outputs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from polars.io.plugins import register_io_source

from advcli.errors import OutputError, UsageError
from advcli.io.jsonl import STDIN

METADATA_KEY = b"advcli"
ROW_GROUP_ROWS = 4096  # ~4k rows of long token lists keep a decoded row group small


def output_format(path: str, fmt: str | None) -> str:
    """``parquet`` or ``jsonl``, from ``--format`` or the extension."""
    if fmt:
        if fmt not in ("parquet", "jsonl"):
            msg = f"--format {fmt!r}: expected parquet or jsonl"
            raise UsageError(msg)
        return fmt
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    msg = (
        f"{path}: cannot tell the output format. "
        "Hint: end the name in .parquet or .jsonl, or pass --format"
    )
    raise UsageError(msg)


def _refuse_existing(out: str, exists: bool, *, force: bool) -> None:
    if exists and not force:
        msg = f"{out}: already exists. Hint: pass --force to replace it"
        raise OutputError(msg)


def check_output(out: str, inputs: list[str], *, force: bool) -> None:
    """Refuse an output file that is one of the inputs (always) or exists (unless ``force``)."""
    target = Path(out)
    for f in inputs:
        if f != STDIN and target.resolve() == Path(f).resolve():
            msg = (
                f"{out}: this is one of the inputs; advcli never overwrites its input. "
                "Hint: choose another --out"
            )
            raise OutputError(msg)
    _refuse_existing(out, target.exists(), force=force)


def check_output_folder(out: str, files: list[str], *, force: bool) -> Path:
    """Refuse an output folder that holds an input, holds the current folder, or exists
    (unless ``force``); ``files`` are the inputs, expanded."""
    target = Path(out)
    for f in files:
        if f == STDIN:
            continue
        path = Path(f).resolve()
        if path == target.resolve() or target.resolve() in path.parents:
            msg = (
                f"{out}: holds the input {f}; advcli never overwrites its input. "
                "Hint: choose another --out"
            )
            raise OutputError(msg)
    here = Path.cwd().resolve()
    if target.resolve() == here or target.resolve() in here.parents:
        msg = f"{out}: the current folder or one above it. Hint: choose a new folder for --out"
        raise OutputError(msg)
    _refuse_existing(out, target.exists() or target.is_symlink(), force=force)
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_beside(target: Path) -> Path:
    """An empty file beside ``target``, with the permissions a new file gets (mkstemp: 0600)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success."""
    tmp = _temporary_beside(Path(target))
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_folder(target: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; rename it onto ``target`` on success.

    An interrupted run leaves only a hidden ``.NAME.*.tmp`` folder, never ``target``. With
    ``force`` an existing ``target`` is moved aside, replaced, then removed.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if target.exists() or target.is_symlink():
            if not force:
                msg = f"{target}: appeared while writing. Hint: pass --force to replace it"
                raise OutputError(msg)
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            os.rename(target, old / "previous")
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def parquet_options(schema: pa.Schema) -> dict:
    """zstd; no dictionary and no min/max statistics on list columns.

    Dictionaries slow writes of long token lists by ~40%; statistics over every token id or
    advantage cost ~12% of the write and prune nothing.
    """
    scalar = [
        f.name
        for f in schema
        if not pa.types.is_list(f.type) and not pa.types.is_large_list(f.type)
    ]
    return {"compression": "zstd", "use_dictionary": scalar, "write_statistics": scalar}


def write_json(path: str | Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_metadata(path: str) -> dict | None:
    """The advcli metadata of an output written by advcli, or None."""
    if path.lower().endswith((".jsonl", ".ndjson")):
        meta = Path(f"{path}.meta.json")
        return json.loads(meta.read_text()) if meta.exists() else None
    raw = (pq.read_metadata(path).metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else None


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
        self, path: Path, target: str, fmt: str, schema: pa.Schema, metadata: dict, depth: int = 2
    ):
        self.path = path
        self.target = target  # what the user asked for; ``path`` is its temporary name
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        frames = register_io_source(self._frames, schema=_frame(schema.empty_table()).schema)
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
        self._thread = threading.Thread(target=self._sink, args=(write,), daemon=True)
        self._thread.start()

    def _frames(self, *_: object) -> Iterator[pl.DataFrame]:
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

    def _put(self, item: pa.Table | None) -> None:
        while self._thread.is_alive():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            msg = f"{self.target}: could not write the output: {self._error}"
            raise OutputError(msg) from self._error

    def write(self, table: pa.Table) -> None:
        self._raise_if_failed()
        self._put(table)
        self._raise_if_failed()

    def close(self) -> None:
        """End the stream and wait for the file to be finished."""
        self._put(None)
        self._thread.join()
        self._raise_if_failed()


class TableWriter:
    """Write tables batch by batch to a temporary file; :meth:`commit` renames it into place.

    Writes run on a :class:`PolarsSink` thread, so the caller computes the next batch meanwhile.
    Used as a context manager: leaving the block without :meth:`commit` (an error, an
    interrupt) removes the temporary file, so the target is either complete or untouched.
    Nothing is created on disk before the first table.
    """

    def __init__(self, out: str, fmt: str, metadata: dict):
        self.out = out
        self.fmt = fmt
        self.metadata = metadata
        self._tmp: Path | None = None
        self._sink: PolarsSink | None = None

    def write(self, table: pa.Table) -> None:
        if self._sink is None:
            self._tmp = _temporary_beside(Path(self.out))
            self._sink = PolarsSink(self._tmp, self.out, self.fmt, table.schema, self.metadata)
        self._sink.write(table)

    def commit(self) -> None:
        """Finish the file and rename it into place."""
        if self._tmp is None:
            msg = f"{self.out}: nothing to write"
            raise OutputError(msg)
        self._close()
        if self.fmt == "jsonl":
            write_json(f"{self.out}.meta.json", self.metadata)
        os.replace(self._tmp, self.out)

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
