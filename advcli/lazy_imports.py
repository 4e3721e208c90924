"""numpy, polars and pyarrow, each imported on its first use.

Together they take about 0.3 s to import: more than all of typer's ``--help``. advcli's
modules take them from here (``from advcli.lazy_imports import np``) rather than importing
them, so that ``advcli --help`` and ``advcli COMMAND --help``, which only read the methods'
declarations, import none of them, while a command's first ``np.…`` imports numpy.

Each name is a stand-in module whose first attribute read imports the real one and keeps the
attribute, so later reads are a plain attribute lookup. The real modules are the ones in
``sys.modules`` (unlike :class:`importlib.util.LazyLoader`, whose lazy module a second
``import numpy`` elsewhere loads at once); a module's top level must not read these names.
ruff's banned-api rule keeps advcli's modules from importing the three themselves.

A stop (Ctrl-C, SIGTERM, SIGHUP) that comes while one of them loads is held until it has
loaded, then acted on as it would have been: an interrupt inside a native module's
initialisation can crash the process, and polars puts a SIGINT handler of its own in place
as it loads, which would swallow Ctrl-C; the handlers in force before are put back.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

__all__ = ["np", "pa", "pafs", "pandas_unseen", "pc", "pl", "pq"]

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The stops held while a module loads."""


def import_holding_stops(name: str) -> types.ModuleType:
    """``importlib.import_module(name)``, with :data:`HELD` held until it returns, then each
    stop that came acted on (where it loads now, on the main thread: elsewhere no handler can
    be set)."""
    if name in sys.modules or threading.current_thread() is not threading.main_thread():
        return importlib.import_module(name)  # loaded (or loading: this waits for it)
    before = {signum: signal.getsignal(signum) for signum in HELD}
    came: list[int] = []
    for signum, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, lambda got, _frame: came.append(got))
    try:
        return importlib.import_module(name)
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: a handler not installed from Python
                signal.signal(signum, handler)
        for stop in came:
            held_handler = before[signal.Signals(stop)]
            if callable(held_handler):
                held_handler(stop, None)  # raises, as it would have
            else:  # the default action (SIGINT's default handler is a callable)
                os.kill(os.getpid(), stop)


class _OnFirstUse(types.ModuleType):
    """A stand-in for the module of its name, imported when an attribute is first read."""

    def __getattr__(self, attr: str) -> Any:
        value = getattr(import_holding_stops(self.__name__), attr)
        setattr(self, attr, value)  # later reads find it here, without this method
        return value


class _NoPandas:  # a meta path finder (importlib.abc's base class would import more)
    """A finder that answers ``import pandas`` (and its submodules) as if it were not installed."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextlib.contextmanager
def pandas_unseen() -> Iterator[None]:
    """While it lasts, pandas cannot be imported, for a command that never uses it.

    pyarrow imports pandas (about 0.2 s) the first time it turns a list, a numpy array or a
    scalar into Arrow or an array into numpy, only to ask whether the value is a pandas object;
    ``advcli schema`` would spend a fifth of its time there. pyarrow asks again when pandas is
    wanted (``to_pandas``), so pandas imports as usual afterwards; one loaded already stays."""
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


if TYPE_CHECKING:
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
else:
    np = _OnFirstUse("numpy")
    pl = _OnFirstUse("polars")
    pa = _OnFirstUse("pyarrow")
    pc = _OnFirstUse("pyarrow.compute")
    pafs = _OnFirstUse("pyarrow.fs")
    pq = _OnFirstUse("pyarrow.parquet")
