"""Standard output as the command line writes to it: a write that fails (a closed
descriptor, a full disk, a reader gone) is one line, and what it is (a file, a pipe) is known,
so that it can be compared with the inputs (:func:`advcli.io.outputs.check_stdout`).

Standard error, where the messages go (warnings, the summary, progress, the error's line),
has nowhere to report its own failure: a write there that fails is dropped
(:func:`stderr_guarded`), and the run's exit code stays its own.

Light on purpose: the command line loads it before any command runs (``--help`` included).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from advcli.errors import AdvcliError, OutputError, StdoutClosed

_CLOSED = -1


def _stdout_fd() -> int | None:
    """Standard output's descriptor: :data:`_CLOSED` where it is closed (``>&-``), None where
    it has none (a notebook's stream)."""
    if sys.stdout is None:  # Python found it closed when it started
        return _CLOSED
    try:
        fd = sys.stdout.fileno()
        os.fstat(fd)
    except (io.UnsupportedOperation, AttributeError, ValueError):
        return None
    except OSError:
        return _CLOSED
    return fd


def is_closed() -> bool:
    """Whether standard output is closed (``>&-``)."""
    return _stdout_fd() == _CLOSED


def regular_file() -> os.stat_result | None:
    """Standard output's file where it is a regular file (``> FILE``, ``>> FILE``); None
    where it is a terminal, a pipe, closed, or no descriptor of this process."""
    fd = _stdout_fd()
    if fd is None or fd == _CLOSED:
        return None
    return _regular(fd)


def stdin_file() -> os.stat_result | None:
    """The file behind descriptor 0 where it is a regular file (``< FILE``): what the input
    ``-`` reads, to be compared with the outputs; None where it is a terminal, a pipe, or
    closed."""
    return _regular(0)


def _regular(fd: int) -> os.stat_result | None:
    try:
        seen = os.fstat(fd)
    except OSError:
        return None
    return seen if stat.S_ISREG(seen.st_mode) else None


def unwritable(exc: OSError) -> OutputError:
    """The error for a write to standard output that failed (a closed descriptor, a full
    disk)."""
    reason = exc.strerror or type(exc).__name__
    return OutputError(
        f"standard output: could not write ({reason}). Hint: send it to a file or a pipe "
        "that takes it (or give `out` a file name)"
    )


class _StdoutBytes(io.RawIOBase):
    """Writes to standard output's descriptor (None: it is closed), where a failed write is
    one line: a reader that went away (:class:`StdoutClosed`, exit 141), or a closed
    descriptor or a full disk (:class:`OutputError`, exit 2). After the first failure the
    rest is dropped: the error is already on its way."""

    def __init__(self, fd: int | None):
        self.fd = fd
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.fd is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self.fd

    def isatty(self) -> bool:
        return self.fd is not None and os.isatty(self.fd)

    def write(self, data: Any, /) -> int:
        if self.failed:
            return len(data)
        try:
            return os.write(self.fileno(), data)
        except BrokenPipeError:
            self.failed = True
            raise StdoutClosed("standard output closed") from None
        except OSError as exc:
            self.failed = True
            raise unwritable(exc) from None


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Over a run of the command line, standard output through :class:`_StdoutBytes`, so that
    every write there (rows, JSON, tables, help) that fails is one line, not a traceback. Only
    where ``sys.stdout`` is the process's own (in a notebook or a test's capture it is not:
    left as it is); put back afterwards.

    Where standard output is closed, descriptor 1 is taken by /dev/null opened for reading
    (a write there fails), so that no file the run opens becomes standard output."""
    before: TextIO | None = sys.stdout
    if before is not None and before is not sys.__stdout__:
        yield
        return
    fd: int | None = 1
    if _stdout_fd() == _CLOSED:
        fd = None  # nothing is written to descriptor 1, whatever holds it now
        if _is_free(1):
            held = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: 1
            if held != 1:
                os.dup2(held, 1)
                os.close(held)
    elif before is not None:
        with contextlib.suppress(OSError, ValueError):
            before.flush()
    raw = _StdoutBytes(fd)
    stream = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=getattr(before, "encoding", None) or "utf-8",
        errors=getattr(before, "errors", None) or "strict",
        line_buffering=getattr(before, "line_buffering", False),
        write_through=getattr(before, "write_through", False),
    )
    sys.stdout = stream
    try:
        yield
    except BaseException:
        with contextlib.suppress(AdvcliError):  # what was printed before the error still goes
            stream.flush()
        raise
    else:
        stream.flush()
    finally:
        sys.stdout = before
        raw.failed = True  # nothing more is written when the stream is collected


def _is_free(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


class _StderrBytes(io.RawIOBase):
    """Writes to standard error's descriptor, where a write that fails (a full disk, a
    closed descriptor) is dropped, and the rest after it: there is nowhere to report it, and a
    run that did its work must not exit as if it had failed."""

    def __init__(self, fd: int):
        self.fd = fd
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return not self.failed and os.isatty(self.fd)

    def write(self, data: Any, /) -> int:
        if not self.failed:
            try:
                return os.write(self.fd, data)
            except OSError:
                self.failed = True
        return len(data)


@contextlib.contextmanager
def stderr_guarded() -> Iterator[None]:
    """Over a run of the command line, standard error through :class:`_StderrBytes` (only
    where ``sys.stderr`` is the process's own, or None: closed when Python started); put back
    afterwards. Where it is closed, descriptor 2 is taken by /dev/null opened for reading, so
    that no file the run opens becomes standard error."""
    before: TextIO | None = sys.stderr
    if before is not None and before is not sys.__stderr__:
        yield
        return
    raw = _StderrBytes(2)
    if before is None or _is_free(2):
        raw.failed = True
        if _is_free(2):
            held = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: 2
            if held != 2:
                os.dup2(held, 2)
                os.close(held)
    else:
        with contextlib.suppress(OSError, ValueError):
            before.flush()
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=getattr(before, "encoding", None) or "utf-8",
        errors=getattr(before, "errors", None) or "backslashreplace",
        line_buffering=True,
    )
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr = before
