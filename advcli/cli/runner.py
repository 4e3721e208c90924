"""The process that runs the command line: every :class:`~advcli.errors.AdvcliError` becomes
one line on stderr and its exit code here, in :func:`main` (0 ok, 1 bad data, 2 bad usage, 3
audit threshold exceeded, 4 logged advantages that ``check`` does not reproduce, 70 a bug, 130
interrupted, 128 + N for signal N); Ctrl-C, SIGTERM and SIGHUP unwind and leave nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import inspect
import os
import signal
import sys
import traceback
import typing
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import typer
import typer.core
import typer.main

from advcli.cli.app import app
from advcli.cli.flags import on_command_line
from advcli.errors import AdvcliError, StdoutClosed, UsageError
from advcli.io import stdout
from advcli.io.interrupts import STOPS, leave, terminated_by, termination_handled
from advcli.params import ANY

_METAVARS = {int: "INT", float: "NUMBER", "integer": "INT", "float": "NUMBER"}  # else TEXT


def command(args: list[str] | None = None) -> Any:
    """The command line as the click command typer makes of :data:`app`, with metavars that
    read as words (INT, NUMBER, TEXT; none for a flag). Given the command line's ``args``,
    only the command they name is made with its options: the others by name and help alone
    (making every option of every command is a third of ``advcli --help``'s time)."""
    group = typer.main.get_command(app if args is None else _naming_only(args))
    for cmd in [group, *getattr(group, "commands", {}).values()]:
        help_option = cmd.get_help_option(typer.Context(cmd))  # made once, then kept
        for param in [*cmd.params, *([help_option] if help_option else [])]:
            if isinstance(param, typer.core.TyperArgument):
                param.metavar = param.name.upper().removesuffix("S")  # INPUT, FOLDER
                # no "<list[str]>" (typer 0.29) or "<str>" (0.28) beside it: the name says it
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
                if hasattr(param, "type"):  # typer 0.28 asks the click type
                    param.type = copy.copy(param.type)
                    param.type.get_metavar = lambda *_, **__: ""
            elif getattr(param, "is_flag", False):
                param.metavar = ""
            else:
                param.metavar = _METAVARS.get(_value_type(param), "TEXT")
        if cmd.callback is not None:
            flags = {p.name: p.opts[0] for p in cmd.params if p.name and p.opts}
            cmd.callback = _checked(cmd.callback, flags)
    return group


def _naming_only(args: list[str]) -> typer.Typer:
    """:data:`app` with every command but the one ``args`` name (the first word that is no
    option) by name and help alone."""
    named = next((arg for arg in args if not arg.startswith("-")), None)
    listed = copy.copy(app)
    listed.registered_commands = [
        info if _name(info) == named else _listed(info)
        for info in app.registered_commands
        if info.callback is not None
    ]
    return listed


def _name(info: Any) -> str:
    """The name of a registered command."""
    return info.name or typer.main.get_command_name(info.callback.__name__)


def _listed(info: Any) -> Any:
    """A command's registration with its name and help, without options: one that does not
    run (:func:`_naming_only` keeps in full the one that does)."""

    def no_options() -> None:
        raise AssertionError("a command listed for --help ran")

    listed = copy.copy(info)
    listed.name = _name(info)
    listed.help = info.help or inspect.getdoc(info.callback)
    listed.callback = no_options
    return listed


def _checked(callback: Callable[..., Any], flags: dict[str, str]) -> Callable[..., Any]:
    """``callback`` refusing, in one line before the command runs, a number option that
    nothing can take (``flags``: its flag by keyword): an integer beyond int64, a NaN or an
    infinity (the ranges each option declares are checked where its values meet); and standard
    output that is one of its inputs (what it prints would go into the log it reads)."""

    @functools.wraps(callback)
    def checked(**values: Any) -> Any:
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if problem := ANY.problem(flags.get(name, name), value, isinstance(value, int)):
                raise UsageError(problem)
        if values.get("inputs"):
            _refuse_stdout_input(values["inputs"], values.get("from_"))
        return callback(**values)

    return checked


def _refuse_stdout_input(inputs: list[str], preset: str | None) -> None:
    """Refuse standard output where it is one of the files ``inputs`` name (read as
    ``--from preset`` reads them); inputs that cannot be read are left to the command."""
    if stdout.regular_file() is None:  # a terminal, a pipe: no file to compare (the usual case)
        return
    from advcli import presets
    from advcli.io import outputs
    from advcli.run import jobs
    from advcli.run.logs import input_paths

    try:
        reading = jobs.Reading(preset=presets.get(preset) if preset else None)
        files = reading.files(input_paths(inputs))
    except (AdvcliError, OSError):
        return
    outputs.refuse_stdout_input(files)


def main(args: list[str] | None = None) -> None:
    """Entry point: run the command line, turning every error into one line and an exit code
    (1 bad data, 2 bad usage, 3 audit threshold, 4 check mismatch, 70 a bug, 130 interrupted,
    141 the reader of ``--out -`` stopped). A message that standard error cannot take (a full
    disk, ``2>&-``) is dropped: the exit code is the run's own.
    """
    with stdout.stderr_guarded():
        _main(args)


def _main(args: list[str] | None) -> None:
    try:
        code = _run(args)
    except StdoutClosed:  # a reader of --out - stopped early (`| head`)
        _stdout_closed()
    except AdvcliError as exc:
        _fail(f"advcli: error: {on_command_line(str(exc), app)}", exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        if os.environ.get("ADVCLI_DEBUG"):
            traceback.print_exc()
        _interrupted()
    except typer.TyperException as exc:  # bad flags or arguments, as typer found them
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `advcli`: the help, as is
            sys.stderr.write(exc.format_message() + "\n")
            sys.exit(0)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        message = (exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
        _fail(f"advcli: error: {message}{hint}", getattr(exc, "exit_code", 2))
    except (Exception, _polars_panic()) as exc:  # a bug: one line, unless asked for the traceback
        if os.environ.get("ADVCLI_DEBUG"):
            raise
        _fail(
            f"advcli: internal error: {type(exc).__name__}: {exc} "
            "(set ADVCLI_DEBUG=1 for the traceback, and please report it)",
            70,
        )
    if code == 130:  # typer caught the interrupt itself
        _interrupted()
    for stop in (signal.SIGINT, *STOPS):  # the work is done: let the exit finish
        signal.signal(stop, signal.SIG_IGN)
    if isinstance(code, int) and code:
        sys.exit(code)


def _polars_panic() -> type[BaseException]:
    """polars' PanicException (a panic in its Rust code, not an Exception) once polars is
    loaded; else Exception again (no need to import polars to catch what it never raised)."""
    polars = sys.modules.get("polars")
    return polars.exceptions.PanicException if polars is not None else Exception


def _run(args: list[str] | None) -> Any:
    warnings.filterwarnings("ignore")  # numbers are checked; no Python (or numpy) warning
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a parent may mean to ignore it
        # Python's own handler, again after the imports: a native one may have replaced it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Not standalone, so that typer's own errors reach main's handlers; it returns an exit
    # code where it stopped early (0 after --help, 130 after Ctrl-C).
    with stdout.guarded(), termination_handled():
        given = sys.argv[1:] if args is None else args
        return command(given).main(args=given, prog_name="advcli", standalone_mode=False)


def _stdout_closed() -> NoReturn:
    """Standard output's reader went away: nothing more can be written there; leave quietly
    with 141 (128 + SIGPIPE), stdout pointed at /dev/null so that the exit's flush is quiet."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    os._exit(141)


def _interrupted() -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP: the unwinding has removed the temporaries; say so and leave
    at once with 130 or 128 + the signal (a normal exit would wait for, or crash in, native
    threads still writing)."""
    signum = terminated_by()
    for stop in (signal.SIGINT, *STOPS):
        signal.signal(stop, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    sys.stderr.write("advcli: interrupted\n" if signum is None else "advcli: terminated\n")
    sys.stderr.flush()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # e.g. the folder of a converted framework dump
    os._exit(130 if signum is None else 128 + signum)


def _value_type(param: Any) -> Any:
    """What an option takes: ``int`` for ``Optional[int]`` or ``list[int]`` (typer >= 0.29
    describes it by annotation), or the click type's name (``"integer"``, older typer)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return getattr(param.type, "name", None)
    args = [arg for arg in typing.get_args(descriptor.annotation) if arg is not type(None)]
    return args[0] if args else descriptor.annotation


def _fail(message: str, code: int) -> None:
    """One line on stderr (a message of several lines is joined), and the exit code (at once
    where a request to object storage went unanswered: see :func:`leave`)."""
    sys.stderr.write(" ".join(message.split()) + "\n")
    leave(code)
