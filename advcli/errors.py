"""The one exception family of advcli.

Every error a user can cause is an :class:`AdvcliError`. The CLI turns it into a single line on
stderr and the exit code below, in one place (``advcli.cli.runner``); no other module prints errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from difflib import get_close_matches


class AdvcliError(Exception):
    """Base class: a message for the user and the process exit code."""

    exit_code = 1


class DataError(AdvcliError):
    """The input data is wrong: a value, a length, a missing column. Exit code 1."""

    exit_code = 1


class SchemaError(DataError):
    """A column is missing, of the wrong type, or ambiguous. Exit code 1."""


class RowError(DataError):
    """A problem with one row, found where its file and column are not known (a method, a
    critic). The engine, which knows both, raises it again as ``file: row R, column 'C': ...``.

    ``roles`` are the roles whose column names the problem; the first the log has is named.
    ``column`` names a column that plays no role (one a method's option named) instead.
    """

    def __init__(
        self, row: int, roles: tuple[str, ...], problem: str, *, column: str | None = None
    ):
        super().__init__(f"row {row}: {problem}")
        self.row = row
        self.roles = roles
        self.problem = problem
        self.column = column


class DependencyError(AdvcliError):
    """A dependency is missing or older than advcli needs. Exit code 1."""

    exit_code = 1


class PluginError(AdvcliError):
    """An installed estimator plugin cannot be used: it fails to load or clashes with another
    method. Exit code 1."""

    exit_code = 1


class UsageError(AdvcliError):
    """The command line is wrong: an unknown method, conflicting options. Exit code 2."""

    exit_code = 2


class ContradictsLog(UsageError):
    """An option the user gave contradicts what the log's own logged advantages say (TRL's
    ``--group-size``). Exit code 2; ``check`` counts it as a difference (4)."""


class OutputError(AdvcliError):
    """An output cannot be written: it exists, or it is one of the inputs. Exit code 2."""

    exit_code = 2


class ThresholdExceeded(AdvcliError):
    """``audit --fail-above`` found more zero-variance rollouts than allowed. Exit code 3."""

    exit_code = 3


class AdvantagesDiffer(AdvcliError):
    """``check`` found rows whose logged advantages differ beyond ``--tol``. Exit code 4."""

    exit_code = 4


class StdoutClosed(AdvcliError):
    """The reader of ``--out -`` stopped (``| head``): the command stops quietly, as Unix
    tools do, with 141 (128 + SIGPIPE)."""

    exit_code = 141


def where(
    file: str | None, row: int | None = None, column: str | None = None, *, line: bool = False
) -> str:
    """Format a location prefix: ``file: row 3, column 'reward'`` (``line 4`` for JSONL)."""
    parts = []
    if row is not None:
        parts.append(f"{'line' if line else 'row'} {row}")
    if column is not None:
        parts.append(f"column '{column}'")
    head = file or "<input>"
    return f"{head}: {', '.join(parts)}" if parts else head


def no_rows(files: str) -> DataError:
    """The error for an input without a single row."""
    return DataError(f"{files}: the input has no rows. Hint: check the file")


def file_list(files: Iterable[str], shown: int = 3) -> str:
    """Files for a message: all of them when few, else their folder and count, the first and
    the last (a log of 300 step files stays one short line).

    >>> file_list(["run/step_1.jsonl", "run/step_2.jsonl", "run/step_3.jsonl", "run/step_4.jsonl"])
    'run/ (4 files: step_1.jsonl … step_4.jsonl)'
    """
    names = list(files)
    if len(names) <= shown:
        return ", ".join(names)
    folder = os.path.commonpath(names) if all(n.startswith("/") for n in names) or all(
        not n.startswith("/") for n in names) else ""  # fmt: skip
    if folder in names:  # one file's path is every path's prefix
        folder = os.path.dirname(folder)
    cut = len(folder) + 1 if folder else 0
    where = f"{folder}/ " if folder else ""
    return f"{where}({len(names)} files: {names[0][cut:]} … {names[-1][cut:]})"


def columns_found(names: Iterable[str]) -> str:
    """``Columns found: a, b`` (``none`` for a log without columns), for messages."""
    return f"Columns found: {', '.join(names) or 'none'}"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to a mistyped ``name`` (its case aside, by difflib's
    ratio, at least 0.75), or None."""
    by_lower = {c.lower(): c for c in choices}
    close = get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'grpo'?`` for :func:`closest`; empty when none is close.

    >>> did_you_mean("grpoo", ["grpo", "rloo"])
    " Did you mean 'grpo'?"
    """
    found = closest(name, choices)
    return f" Did you mean {found!r}?" if found else ""
