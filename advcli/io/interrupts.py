"""Ctrl-C stays Python's while advcli reads and writes.

polars before 2.0 installs a native SIGINT handler of its own when a query starts (polars 2
does it on import, and the command line puts Python's back after the imports). That handler
would swallow Ctrl-C for the rest of the run, so every batch read or written puts Python's
back, when Python's is the one in force.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def keep_python_interrupt() -> None:
    """Python's SIGINT handler installed again, if it is the one Python has (main thread)."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back until the block ends, then raise it: for a step that must not stop
    halfway (a file created and the thread that writes it started)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
