"""Progress: the one channel through which work tells how far it has got.

Work calls this module's functions; they reach the :class:`Reporter` of the block that
:func:`reporting` opened, and nothing hears them outside one. The reporter is a context
variable, so a thread started with the block's context (a pass's read-ahead) reports to it too,
and no function between a command and its passes carries a callback:

- :func:`stage` names the work that runs inside it ("annotating", a token pass, ...), and
  which pass over the log it is where it reads the whole log;
- :func:`read` tells how many rows a pass over a log has read, and what share of the pass
  that is (None: its total is not known yet);
- :func:`advance` tells how many rows and tokens the pass that writes (or counts) has done.

The CLI's progress line (:class:`advcli.render.Activity`) is a reporter; a Python caller may
open its own::

    class Printed(advcli.Reporter):
        def stage(self, name):
            print(name)

    with advcli.reporting(Printed()):
        advcli.annotate("logs/", "gae.parquet", method="gae")
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

MODES = ("auto", "bar", "plain", "none")  # how the command line shows progress (--progress)


class Reporter:
    """Hears the progress of the work run in its :func:`reporting` block; every method does
    nothing unless a subclass says otherwise."""

    def stage(self, name: str) -> None:
        """The work called ``name`` starts (and lasts until the next stage)."""

    def passes(self, number: int, total: int | None) -> None:
        """The stage that starts next is pass ``number`` over the log, of ``total`` (None:
        not known yet: the number of passes a method makes can depend on the log)."""

    def read(self, rows: int, share: float | None) -> None:
        """A pass over the log has read ``rows``, ``share`` of it (0 to 1; None: unknown)."""

    def advance(self, rows: int, tokens: int) -> None:
        """The pass that writes (or counts) has done ``rows`` rows of ``tokens`` tokens."""


_SILENT = Reporter()
_REPORTER: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "reporter", default=None
)


def _current() -> Reporter:
    return _REPORTER.get() or _SILENT


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Send the progress of the work run in this block to ``reporter``."""
    token = _REPORTER.set(reporter)
    try:
        yield reporter
    finally:
        _REPORTER.reset(token)


@contextlib.contextmanager
def stage(name: str, *, number: int | None = None, total: int | None = None) -> Iterator[None]:
    """A block of work called ``name`` (the progress line's title while it runs); one that
    reads the whole log is pass ``number`` of ``total``, and its title says so
    ("pass 2/3: whitening moments")."""
    reporter = _current()
    if number is not None:
        reporter.passes(number, total)
        name = f"pass {number}{f'/{total}' if total else ''}: {name}"
    reporter.stage(name)
    yield


def read(rows: int, share: float | None) -> None:
    """A pass has read ``rows`` of the log, ``share`` of it (clipped to 1)."""
    _current().read(rows, None if share is None else min(share, 1.0))


def advance(rows: int, tokens: int) -> None:
    """The pass that writes or counts has done ``rows`` rows and ``tokens`` tokens."""
    _current().advance(rows, tokens)
