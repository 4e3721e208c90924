"""Outputs that are complete or absent: written under a temporary name, then renamed.

The temporary file or folder sits beside the target (so the rename is atomic on one file system)
and is removed if anything fails before the rename. Also: the checks that refuse an output before
any work (it exists, it is an input, it is a folder ``--force`` may not replace). What goes into
an output file is written by :mod:`advcli.io.writers`.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from advcli.errors import OutputError, UsageError
from advcli.io import remote, stdout
from advcli.io.folders import Folder
from advcli.io.jsonl import STDIN
from advcli.io.remote import FolderOutput

STDOUT = "-"
"""``--out -``: standard output, for a pipe (JSONL, or Arrow IPC with ``--format arrow``)."""


def output_format(path: str, fmt: str | None) -> str:
    """``parquet`` or ``jsonl``, from ``--format`` or the extension; to standard output
    (``-``), ``jsonl`` (the default) or ``arrow``."""
    if path == STDOUT:
        if fmt in (None, "jsonl", "arrow"):
            return fmt or "jsonl"
        if fmt == "parquet":
            msg = (
                "`out='-'`: Parquet needs a file it can seek in, which a pipe is not. Hint: "
                "`format='jsonl'` or arrow for a pipe, or `out` with a .parquet name"
            )
            raise UsageError(msg)
        raise UsageError(f"`format={fmt!r}`: expected jsonl or arrow for `out='-'`")
    if fmt == "arrow":
        raise UsageError("`format='arrow'` writes Arrow IPC to standard output: add `out='-'`")
    if fmt:
        if fmt not in ("parquet", "jsonl"):
            msg = f"`format={fmt!r}`: expected parquet or jsonl"
            raise UsageError(msg)
        return fmt
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    msg = (
        f"{path}: cannot tell the output format. "
        "Hint: end the name in .parquet or .jsonl, or pass `format`"
    )
    raise UsageError(msg)


def _refuse_existing(out: str, exists: bool, *, force: bool) -> None:
    if exists and not force:
        msg = f"{out}: already exists. Hint: pass `force=True` to replace it"
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
        f"{path}: {what}; advcli replaces only a regular file or a folder it wrote, `force=True` "
        "or not. Hint: choose another `out`"
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
            "manifest there lists); `force=True` replaces only a folder advcli wrote. Hint: "
            "choose another `out`, or move the folder away yourself"
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


def _same_identity(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    """The same file, as st_dev and st_ino tell (None: no file to compare)."""
    return a is not None and b is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _stat(path: str | Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def check_stdout(files: list[str]) -> None:
    """Refuse standard output, for ``--out -``, where it is closed (``>&-``), or is one of
    the inputs ``files`` (see :func:`refuse_stdout_input`)."""
    if stdout.is_closed():
        msg = (
            "`out='-'`: standard output is closed, so nothing could be written there. Hint: "
            "send it to a file or a pipe, or give `out` a file name"
        )
        raise OutputError(msg)
    refuse_stdout_input(files)


def refuse_stdout_input(files: list[str]) -> None:
    """Refuse standard output where it is one of the input ``files`` or their metadata (the
    same file, as st_dev and st_ino tell; for ``-``, the file standard input reads where it
    is one): ``advcli annotate LOG --out - >> LOG`` (or ``annotate - --out - < LOG >> LOG``)
    would append to the log while reading it, and any command's result would go into its
    input."""
    seen = stdout.regular_file()
    if seen is None:
        return
    for f in files:
        if f == STDIN:
            if _same_identity(stdout.stdin_file(), seen):
                msg = (
                    "standard output is the file standard input (-) reads, one of the inputs; "
                    "advcli never writes to its input. Hint: send standard output to another file"
                )
                raise OutputError(msg)
            continue
        if remote.is_remote(f):
            continue
        for path in (f, *metadata_paths(f)):
            if _same_identity(_stat(path), seen):
                msg = (
                    f"standard output is {path}, one of the inputs; advcli never writes to "
                    "its input. Hint: send standard output to another file"
                )
                raise OutputError(msg)


def metadata_path(path: str | os.PathLike[str]) -> Path:
    """Where a JSONL output's metadata goes: a hidden file beside it, ``.NAME.meta.json``
    (Hugging Face ``datasets`` skips hidden files: ``load_dataset("json", data_dir=...)`` on
    the folder reads the data alone)."""
    data = Path(path)
    return data.with_name(f".{data.name}.meta.json")


def metadata_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Today's place of a JSONL output's metadata, and the one before (``NAME.meta.json``,
    beside it and not hidden), which still reads."""
    return metadata_path(path), Path(f"{os.fspath(path)}.meta.json")


def existing_metadata(path: str | os.PathLike[str]) -> Path | None:
    """The metadata file a JSONL output has, today's place first; None without one."""
    return next((p for p in metadata_paths(path) if p.exists()), None)


def check_output(out: str, files: list[str], *, force: bool) -> None:
    """Refuse an output file that is one of the inputs ``files`` (expanded: a glob or a folder
    names the files it holds; ``-``: the file standard input reads, where it is one) or their
    metadata, always; one that exists, or whose
    metadata file (JSONL) exists, unless ``force``; and a path where no file can go.
    Standard output (``-``) is refused where it is closed or is one of the inputs."""
    if out == STDOUT:
        check_stdout(files)
        return
    if remote.is_remote(out):
        remote.check_output(out, files, force=force)
        return
    with output_errors(out):  # a path the system refuses to look at (a name too long)
        _check_local_output(out, files, force=force)


def _check_local_output(out: str, files: list[str], *, force: bool) -> None:
    target = Path(out)
    written = [target, *(metadata_paths(out) if is_jsonl_output(out) else [])]
    _refuse_long_names(out, written)
    clean_stale(target)
    for f in files:
        if f == STDIN:  # the file behind descriptor 0 (``< FILE``), where it is one
            stdin = stdout.stdin_file()
            if any(_same_identity(_stat(path), stdin) for path in written):
                msg = (
                    f"{out}: this is the file standard input (-) reads, one of the inputs; "
                    "advcli never overwrites its input. Hint: choose another `out`"
                )
                raise OutputError(msg)
            continue
        for path in written:
            if any(_same_file(path, g) for g in (f, *metadata_paths(f))):
                msg = (
                    f"{out}: this is one of the inputs; advcli never overwrites its input. "
                    "Hint: choose another `out`"
                )
                raise OutputError(msg)
    for path in written:
        if path.is_dir():
            msg = f"{path}: a folder, not a file. Hint: give a file name for `out`"
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
    if out == STDOUT:
        msg = (
            "`out='-'`: this output is a folder of files, which standard output cannot hold. "
            "Hint: name a folder (./- for one named '-')"
        )
        raise UsageError(msg)
    if remote.is_remote(out):
        return _check_remote_folder(out, files, force=force, listed=listed)
    with output_errors(out):  # a path the system refuses to look at (a name too long)
        return _check_local_folder(out, files, force=force, listed=listed)


def _check_local_folder(
    out: str, files: list[str], *, force: bool, listed: Callable[[Folder], set[str] | None]
) -> Path:
    target = Path(out)
    _refuse_long_names(out, [target])
    for f in files:
        if f == STDIN:
            continue
        path = Path(f).resolve()
        if path == target.resolve() or target.resolve() in path.parents:
            msg = (
                f"{out}: holds the input {f}; advcli never overwrites its input. "
                "Hint: choose another `out`"
            )
            raise OutputError(msg)
    here = Path.cwd().resolve()
    if target.resolve() == here or target.resolve() in here.parents:
        msg = f"{out}: the current folder or one above it. Hint: choose a new folder for `out`"
        raise OutputError(msg)
    _refuse_special(target)
    if target.exists() and not target.is_dir():
        msg = f"{out}: a file, not a folder. Hint: give a new folder for `out`"
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
            raise OutputError(f"{msg}. Hint: choose another `out`")
    _refuse_existing(out, bool(remote.listing(out)), force=force)
    _refuse_unlisted(out, listed)
    return Path(out)


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


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, that ``folder`` (or the first existing folder above
    it) takes: 255 on most file systems."""
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _refuse_long_names(out: str, paths: list[Path]) -> None:
    """Refuse an output whose file name, or its metadata file's (``.NAME.meta.json``, 11
    bytes more), is longer than its folder allows."""
    for path in paths:
        size, most = len(os.fsencode(path.name)), _name_max(path.parent)
        if size > most:
            what = "its name" if path.name == Path(out).name else f"the name {path.name}"
            msg = (
                f"{out}: {what} is {size} bytes long; a file name in that folder holds at most "
                f"{most}. Hint: choose a shorter `out`"
            )
            raise OutputError(msg)


def _check_writable(folder: Path, out: str) -> None:
    """The first existing folder on the way to ``folder`` must let us create files."""
    existing = folder.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        msg = f"{out}: {existing} is a file, not a folder. Hint: choose another `out`"
        raise OutputError(msg)
    if not os.access(existing, os.W_OK | os.X_OK):
        msg = f"{out}: cannot write in {existing} (no permission). Hint: choose another `out`"
        raise OutputError(msg)


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


_TEMPORARY_ROOM = len("..advcli-4194304-18446744073709551615-01234567.tmp")
"""What a temporary's name adds to its output's stem: two dots, the tag (a process id and a
start time, at their longest), four random bytes and the suffix (``.tmp``, ``.old``)."""


def _stem(target: Path) -> str:
    """``target``'s name as its temporaries carry it: the whole name, or, where a temporary
    would then be longer than a file name may be, its first characters (as many as fit
    whole) and a hash of the whole (the same in every run, so that a later run finds the
    leftovers)."""
    name = os.fsencode(target.name)
    room = _name_max(target.parent) - _TEMPORARY_ROOM
    if len(name) <= room:
        return target.name
    digest = hashlib.sha256(name).hexdigest()[:16]
    # Cut at a character: half a character would be a name that is not text (which the
    # writers, taking names as UTF-8, refuse); bytes of the name that are not text are left out.
    first = name[: max(room - len(digest) - 1, 0)].decode("utf-8", errors="ignore")
    return first + "~" + digest


def temporaries(target: Path, suffix: str = "") -> Iterator[Path]:
    """The temporaries of ``target`` beside it (any process's), those ending in ``suffix``."""
    return target.parent.glob(f".{glob_escape(_stem(target))}.advcli-*{suffix}")


def clean_stale(target: Path) -> None:
    """Remove the temporaries that an earlier, interrupted run left beside ``target``."""
    if not target.parent.is_dir():
        return
    for path in temporaries(target):
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
    return target.parent / f".{_stem(target)}.{TAG}-{os.urandom(4).hex()}{suffix}"


def temporary_beside(target: Path) -> Path:
    """A fresh temporary name beside ``target`` (its folder made, stale leftovers removed).

    Only the name: the caller holds it where its clean-up will find it *before* creating
    the file, so a Ctrl-C that lands in between leaves nothing behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(target)
    return _temporary_name(target, ".tmp")


def create_empty(path: Path) -> None:
    """An empty file, with the permissions a new file gets (the umask applies)."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))


def publish(tmp: Path, target: Path, *, force: bool, shown: str) -> None:
    """Move the finished ``tmp`` onto ``target`` in one step. Without ``force``, a file that
    appeared at ``target`` meanwhile (another run) is never replaced: an error instead."""
    if force:
        os.replace(tmp, target)
        return
    appeared = OutputError(
        f"{shown}: appeared while writing (another run?). Hint: pass `force=True` to replace it"
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
def files_moving(target: Path) -> Iterator[None]:
    """Hold the lock of ``target``'s folder (an exclusive ``flock`` of the folder itself, so
    nothing is created beside the output) while a run moves an output of several files into
    place: two runs writing one JSONL output with ``--force`` then move their data and
    metadata pair by pair, never one's data beside the other's metadata. The lock goes with
    the process however it ends; where the file system has no ``flock``, none is held."""
    try:
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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
        tmp = temporary_beside(Path(target))
        try:
            create_empty(tmp)
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
    done: int = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
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
        tmp = temporary_beside(target)
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
        msg = f"{target}: appeared while writing. Hint: pass `force=True` to replace it"
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
