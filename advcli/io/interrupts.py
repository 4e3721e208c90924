"""Ctrl-C stays Python's while advcli reads and writes; SIGTERM and SIGHUP end a run as
Ctrl-C does (the unwinding removes the temporaries).

polars installs a native SIGINT handler of its own (on import; :mod:`advcli.lazy_imports` puts
Python's back once it has loaded). That handler would swallow Ctrl-C for the rest of the run,
so every batch read or written puts Python's back, when Python's is the one in force.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import NoReturn

STOPS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run as Ctrl-C does (a job scheduler's stop, a closed terminal)."""


class Terminated(KeyboardInterrupt):
    """A run ended by SIGTERM or SIGHUP: unwound as an interrupt, exit 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        _received.append(signum)


_received: list[int] = []  # typer turns the interrupt into exit 130: the signal is kept here


def terminated_by() -> int | None:
    """The signal that ended the run (SIGTERM, SIGHUP), or None (none, or Ctrl-C)."""
    return _received[0] if _received else None


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


GRACE_SECONDS = 10.0
"""How long a stop (Ctrl-C, SIGTERM, SIGHUP) waits for the run to unwind before the process
leaves anyway: Python runs its handlers between bytecodes, so a call stuck in native code (a
network read) would otherwise never see the signal."""


@contextlib.contextmanager
def termination_handled() -> Iterator[None]:
    """Over one run: SIGTERM and SIGHUP raise :class:`Terminated` (main thread), unless the
    parent ignores them (``nohup`` ignores SIGHUP: it stays ignored); and a watchdog ends the
    process :data:`GRACE_SECONDS` after any stop the run has not acted on. After the run the
    handlers are the ones before it, and the watchdog lets later stops be (the command line
    may run in-process, in a test or a notebook, which a stop there must not end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in STOPS}
    for signum, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, _terminate)
    _watch()
    run = object()
    _armed.append(run)
    try:
        yield
    finally:
        _armed.remove(run)
        for signum, handler in before.items():
            if handler is not None:  # None: a handler not installed from Python
                signal.signal(signum, handler)


_armed: list[object] = []  # the runs in progress, which a stop ends


def arm_for_the_process() -> None:
    """The process is one run (the ``advcli`` command): a stop not acted on ends it, even
    after the command's own run (a hang in an exit handler)."""
    _armed.append(arm_for_the_process)


_left_running: list[str] = []


def left_running(call: str) -> None:
    """Note a call given up on while still running in native code (a request to object
    storage that never answered): the library's threads could hold the process's exit until
    their own retries end, so :func:`leave` does not wait for them."""
    _left_running.append(call)


def leave(code: int) -> NoReturn:
    """Exit with ``code``: at once (the standard streams flushed) where a call was
    :func:`left_running` and the process is one run (:func:`arm_for_the_process`); else as
    Python does (the command line run in-process returns to its caller)."""
    if _left_running and arm_for_the_process in _armed:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


_watching: list[bool] = []


def _watch() -> None:
    """The watchdog thread, started once a process."""
    if _watching:
        return
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    try:
        signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(reader)
        os.close(writer)
        return
    threading.Thread(target=_watchdog, args=(reader, writer), daemon=True).start()
    _watching.append(True)


def _watchdog(reader: int, _writer: int) -> None:
    """Wait for a stop's byte on the wakeup pipe (written by Python's C-level handler, from
    any thread, even while the main thread is stuck), then for :data:`GRACE_SECONDS`; if a run
    that was going when the stop came still is, leave with the stop's exit status.
    (``_writer``: the pipe's other end, kept open while the watchdog runs.)"""
    while True:
        data = os.read(reader, 1)
        if not data:
            return
        signum = data[0]
        going = list(_armed)
        if going and signum in (signal.SIGINT, *STOPS):
            time.sleep(GRACE_SECONDS)
            if not any(run in _armed for run in going):
                continue  # the run unwound: the stop was acted on
            word = b"interrupted" if signum == signal.SIGINT else b"terminated"
            os.write(2, b"advcli: " + word + b" (it did not stop in time)\n")
            os._exit(128 + signum)


def keep_python_interrupt() -> None:
    """Python's SIGINT handler installed again, if it is the one Python has (main thread)."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (or SIGTERM, SIGHUP) back until the block ends, then raise it: for a step
    that must not stop halfway (a file created and the thread that writes it started)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = {signal.SIGINT: signal.default_int_handler, **dict.fromkeys(STOPS, _terminate)}
    held = {s: h for s, h in ours.items() if signal.getsignal(s) is h}
    caught: list[int] = []
    for signum in held:
        signal.signal(signum, lambda got, _frame: caught.append(got))
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
    if caught:
        raise KeyboardInterrupt if caught[0] == signal.SIGINT else Terminated(caught[0])
