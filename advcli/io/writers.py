"""Writers that never leave a partial output: write to a temporary name, then rename.

The temporary file or folder sits beside the target (so the rename is atomic on one file system)
and is removed if anything fails before the rename. Also: the checks that refuse an output
before any work (it exists, it is an input), and the metadata advcli writes with its outputs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import queue
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from polars.io.plugins import register_io_source

from advcli.errors import DataError, OutputError, UsageError
from advcli.io import remote
from advcli.io.checksum import file_sha256
from advcli.io.folders import Folder
from advcli.io.interrupts import interrupt_deferred, keep_python_interrupt
from advcli.io.jsonl import STDIN
from advcli.io.remote import FolderOutput

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


def _refuse_special(path: Path) -> None:
    """Refuse, ``--force`` or not, an output path that holds something other than a regular
    file or folder (a FIFO, a device, a socket) or is a symlink: replacing it would lose what
    it is (``/dev/null`` replaced by a file), and a symlink's target is not what was named."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):
        what = "a symbolic link"
    elif stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    else:
        what = "not a regular file (a FIFO, a device or a socket)"
    msg = (
        f"{path}: {what}; advcli replaces only a regular file or a folder it wrote, --force "
        "or not. Hint: choose another --out"
    )
    raise OutputError(msg)


def _refuse_unlisted(out: str, listed: Callable[[Folder], set[str] | None]) -> None:
    """Refuse to replace the existing, non-empty folder ``out`` (local or in object storage)
    unless an advcli manifest in it lists every file it holds (hidden files and symlinks
    too): ``listed(folder)`` gives the names (None: no manifest)."""
    folder = Folder(out)
    names = folder.files()
    if not names:
        return
    known = listed(folder)
    unlisted = next(
        (n for n in names if known is None or n not in known or folder.kind(n) != "file"), None
    )
    if unlisted is not None:
        msg = (
            f"{out}: not an output folder of advcli (it holds {unlisted}, which no advcli "
            "manifest there lists); --force replaces only a folder advcli wrote. Hint: "
            "choose another --out, or move the folder away yourself"
        )
        raise OutputError(msg)


def _same_file(a: str | Path, b: str | Path) -> bool:
    """The same file (a symlink or a hard link counts), or the same resolved path."""
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return Path(a).resolve() == Path(b).resolve()


def check_output(out: str, files: list[str], *, force: bool) -> None:
    """Refuse an output file that is one of the inputs ``files`` (expanded: a glob or a folder
    names the files it holds) or their metadata, always; one that exists, or whose
    ``.meta.json`` (JSONL) exists, unless ``force``; and a path where no file can go."""
    if remote.is_remote(out):
        remote.check_output(out, files, force=force)
        return
    target = Path(out)
    clean_stale(target)
    written = [target, *([Path(f"{out}.meta.json")] if is_jsonl_output(out) else [])]
    for f in files:
        if f == STDIN:
            continue
        for path in written:
            if _same_file(path, f) or _same_file(path, f"{f}.meta.json"):
                msg = (
                    f"{out}: this is one of the inputs; advcli never overwrites its input. "
                    "Hint: choose another --out"
                )
                raise OutputError(msg)
    for path in written:
        if path.is_dir():
            msg = f"{path}: a folder, not a file. Hint: give a file name for --out"
            raise OutputError(msg)
        _refuse_special(path)
    for path in written:
        _refuse_existing(str(path), path.exists() or path.is_symlink(), force=force)
    _check_writable(target.parent, out)


def check_output_folder(
    out: str,
    files: list[str],
    *,
    force: bool,
    listed: Callable[[Folder], set[str] | None],
) -> Path:
    """Refuse an output folder that holds an input, holds the current folder, or exists
    (unless ``force``); ``files`` are the inputs, expanded. ``--force`` replaces only a folder
    advcli wrote: ``listed(folder)`` gives the files its manifest names (None: no manifest),
    and a folder holding anything else is refused, ``--force`` or not."""
    if remote.is_remote(out):
        return _check_remote_folder(out, files, force=force, listed=listed)
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
    _refuse_special(target)
    if target.exists() and not target.is_dir():
        msg = f"{out}: a file, not a folder. Hint: give a new folder for --out"
        raise OutputError(msg)
    clean_stale(target)  # a swap a kill interrupted is undone first
    _refuse_existing(out, target.exists(), force=force)
    if target.is_dir():
        _refuse_unlisted(out, listed)
    _check_writable(target.parent, out)
    return target


def _check_remote_folder(
    out: str, files: list[str], *, force: bool, listed: Callable[[Folder], set[str] | None]
) -> Path:
    prefix = out.split("?")[0].rstrip("/") + "/"
    for f in files:
        if f.split("?")[0].startswith(prefix):
            msg = f"{out}: holds the input {f}; advcli never overwrites its input"
            raise OutputError(f"{msg}. Hint: choose another --out")
    _refuse_existing(out, bool(remote.listing(out)), force=force)
    _refuse_unlisted(out, listed)
    return Path(out)


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
    progress: Callable[[int, int], None] | None = None,
    digest: bool = False,
    nonfinite: str = "error",
    passed_through: Iterable[str] = (),
) -> Written:
    """Write ``(table, tokens)`` batches to ``out`` atomically. An output in object storage is
    written locally, then uploaded in one piece. A JSONL output refuses the first NaN or
    infinity of the ``passed_through`` columns (the input's, as they were: :data:`NONFINITE`)
    unless ``nonfinite`` is "null"; in advcli's own columns NaN is "no value" (a critic's
    first token), written null."""
    if remote.is_remote(out):
        with tempfile.TemporaryDirectory(prefix="advcli-") as folder:
            local = os.path.join(folder, "out.parquet")
            done = write_batches(local, fmt, metadata, batches, force=False, progress=progress,
                                 digest=digest, nonfinite=nonfinite,
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
            if progress:
                progress(rows, tokens)
        writer.commit()
    return Written(rows, tokens, file_sha256(out) if digest else None, nulled)


def _json_ready(table: pa.Table, out: str, row0: int, nonfinite: str, checked: set[str]) -> int:
    """Check that ``table`` (rows ``row0`` on of the output ``out``) can be JSON lines: no
    bytes column, and no NaN or infinity in the ``checked`` columns unless ``nonfinite`` is
    "null" (then: how many)."""
    count = 0
    for name, column in zip(table.column_names, table.columns, strict=True):
        if _holds(column.type, _is_bytes):
            msg = (
                f"{out}: column '{name}' holds bytes, which JSON lines cannot hold. Hint: "
                "write Parquet (--out NAME.parquet)"
            )
            raise UsageError(msg)
        if name not in checked or not _holds(column.type, pa.types.is_floating):
            continue
        flat, row_of_value = _leaf_values(column.combine_chunks())
        bad = ~np.isfinite(flat)
        if not bad.any():
            continue
        if nonfinite == "null":
            count += int(bad.sum())
            continue
        at = int(np.flatnonzero(bad)[0])
        msg = (
            f"{out}: row {row0 + int(row_of_value[at])} of the output, column '{name}': "
            f"{flat[at]}, which JSON has no number for (it would be written null). Hint: "
            "pass --nonfinite null to write null (counted in the summary), or write Parquet"
        )
        raise DataError(msg)
    return count


def _is_bytes(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or getattr(pa.types, "is_binary_view", lambda _: False)(t)  # pyarrow >= 16
    )


def _holds(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t`` is of ``kind``, or a list of (lists of) it."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _holds(t.value_type, kind)
    return kind(t)


def _leaf_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The float values under a (list) column, nulls as 0, and the row of each."""
    rows = np.arange(len(array))
    while not pa.types.is_floating(array.type):
        rows = rows[np.asarray(pc.list_parent_indices(array))]
        array = pc.list_flatten(array)
    values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    return values, rows


@contextlib.contextmanager
def output_folder(out: str, *, force: bool, last: tuple[str, ...]) -> Iterator[FolderOutput]:
    """Write an output folder: on a local disk through :func:`atomic_folder`, in object
    storage through :func:`advcli.io.remote.staged_folder` (``last``: the manifest's names)."""
    if remote.is_remote(out):
        with remote.staged_folder(out, force=force, last=last) as staged:
            yield staged
        return
    with atomic_folder(Path(out), force=force) as tmp:
        yield FolderOutput(tmp)


def is_jsonl_output(path: str) -> bool:
    return path.lower().endswith((".jsonl", ".ndjson"))


def _check_writable(folder: Path, out: str) -> None:
    """The first existing folder on the way to ``folder`` must let us create files."""
    existing = folder.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        msg = f"{out}: {existing} is a file, not a folder. Hint: choose another --out"
        raise OutputError(msg)
    if not os.access(existing, os.W_OK | os.X_OK):
        msg = f"{out}: cannot write in {existing} (no permission). Hint: choose another --out"
        raise OutputError(msg)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), which tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


_OURS = re.compile(r"\.advcli-(\d+)-(\d+)-")
TAG = f"advcli-{os.getpid()}-{_start_time(os.getpid()) or 0}"
"""In the name of every temporary file or folder this process writes: which process, since
when. A later write to the same output removes the ones of a process that is gone."""


def clean_stale(target: Path) -> None:
    """Remove the temporaries that an earlier, interrupted run left beside ``target``."""
    if not target.parent.is_dir():
        return
    for path in target.parent.glob(f".{glob_escape(target.name)}.advcli-*"):
        m = _OURS.search(path.name)
        if m is None:
            continue
        pid, start = int(m.group(1)), m.group(2)
        if pid == os.getpid() or (_start_time(pid) or "") == start:
            continue  # ours, or a run still going
        if path.name.endswith(".old") and not (target.exists() or target.is_symlink()):
            os.rename(path, target)  # killed in the middle of a swap: the old output comes back
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _temporary_name(target: Path, suffix: str) -> Path:
    return target.parent / f".{target.name}.{TAG}-{os.urandom(4).hex()}{suffix}"


def _temporary_beside(target: Path) -> Path:
    """A fresh temporary name beside ``target`` (its folder made, stale leftovers removed).

    Only the name: the caller holds it where its clean-up will find it *before* creating
    the file, so a Ctrl-C that lands in between leaves nothing behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(target)
    return _temporary_name(target, ".tmp")


def _create_empty(path: Path) -> None:
    """An empty file, with the permissions a new file gets (the umask applies)."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))


def publish(tmp: Path, target: Path, *, force: bool, shown: str) -> None:
    """Move the finished ``tmp`` onto ``target`` in one step. Without ``force``, a file that
    appeared at ``target`` meanwhile (another run) is never replaced: an error instead."""
    if force:
        os.replace(tmp, target)
        return
    appeared = OutputError(
        f"{shown}: appeared while writing (another run?). Hint: pass --force to replace it"
    )
    try:
        os.link(tmp, target)  # fails if target exists: no other run's output is lost
    except FileExistsError:
        raise appeared from None
    except OSError:  # a file system without hard links: check, then rename
        if target.exists():
            raise appeared from None
        os.replace(tmp, target)
        return
    tmp.unlink()


@contextlib.contextmanager
def output_errors(shown: str | Path) -> Iterator[None]:
    """A write that fails (full disk, read-only or vanished folder) as an :class:`OutputError`."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        msg = (
            f"{shown}: could not write the output ({reason}). "
            "Hint: check the disk has room and the folder is writable"
        )
        raise OutputError(msg) from None


@contextlib.contextmanager
def atomic_path(target: str | Path, *, force: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; move it onto ``target`` on success."""
    with output_errors(target):
        tmp = _temporary_beside(Path(target))
        try:
            _create_empty(tmp)
            yield tmp
            publish(tmp, Path(target), force=force, shown=str(target))
        finally:
            tmp.unlink(missing_ok=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


@contextlib.contextmanager
def atomic_folder(target: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; move it onto ``target`` on success.

    An interrupted run leaves only a hidden temporary folder (removed by the next write to
    ``target``), never a partial ``target``. With ``force`` an existing ``target`` is swapped
    with the new folder in one step where Linux allows it (``renameat2``), so the old or the new
    complete folder is there at every instant; elsewhere the old one is moved aside first, and
    restored if the new one cannot take its place (or, after a kill, by the next run).
    """
    with output_errors(target):
        tmp = _temporary_beside(target)
        try:
            os.mkdir(tmp, 0o777)  # the umask applies
            yield tmp
            _swap_in(tmp, target, force=force)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, target: Path, *, force: bool) -> None:
    if not (target.exists() or target.is_symlink()):
        os.rename(tmp, target)
        return
    if not force:
        msg = f"{target}: appeared while writing. Hint: pass --force to replace it"
        raise OutputError(msg)
    if _exchange(tmp, target):  # tmp now holds the old folder, removed on the way out
        return
    old = _temporary_name(target, ".old")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


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
    return {
        "compression": "zstd",
        "use_dictionary": scalar,
        "write_statistics": scalar,
        "write_page_checksum": True,  # read back verified (verify, and any later read)
    }


def write_json(path: str | Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        write_json_to(tmp, obj)


def write_json_to(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_metadata(path: str) -> dict | None:
    """The advcli metadata of an output written by advcli, or None.

    A JSONL output's ``.meta.json`` records the size and sha256 of the data it describes, and
    is written in full (under a temporary name) before the data moves into place: a run killed
    between the two moves leaves the new data with the old metadata (or none) and the new
    metadata still under its temporary name, which is then the one returned. A ``.meta.json``
    that describes other data (an edit) is an error rather than the wrong metadata.
    """
    if not is_jsonl_output(path):
        raw = (pq.read_metadata(path).metadata or {}).get(METADATA_KEY)
        return None if raw is None else _metadata(raw, f"{path} (its advcli metadata)")
    meta_path = Path(f"{path}.meta.json")
    meta = _metadata(meta_path.read_bytes(), str(meta_path)) if meta_path.exists() else None
    data = _DataDigest(path)
    if meta is not None and data.described_by(meta):
        return meta
    pending = meta_path.parent.glob(f".{glob_escape(meta_path.name)}.advcli-*.tmp")
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

    def described_by(self, meta: dict) -> bool:
        data = meta.get("data")
        if data is None:
            return True  # written before advcli recorded it
        return isinstance(data, dict) and all(data.get(k) == v for k, v in self.record.items())


_METADATA_TYPES = {"method": str, "params": dict, "roles": dict, "convention": str}


def _metadata(raw: bytes, shown: str) -> dict:
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

    def __init__(self, out: str, fmt: str, metadata: dict, *, force: bool = False):
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
                self._tmp = _temporary_beside(Path(self.out))
                _create_empty(self._tmp)
                self._sink = PolarsSink(self._tmp, self.out, self.fmt, table.schema, self.metadata)
        self._sink.write(table)

    def commit(self) -> None:
        """Finish the file and move it into place (a JSONL file, then its ``.meta.json``,
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
            data = {"bytes": self._tmp.stat().st_size, "sha256": file_sha256(self._tmp)}
            with atomic_path(f"{self.out}.meta.json") as meta:
                write_json_to(meta, {**self.metadata, "data": data})
                publish(self._tmp, Path(self.out), force=self.force, shown=self.out)

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
