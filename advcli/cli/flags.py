"""The library's messages as the command line says them: options as ``--flag VALUE``.

Outside :mod:`advcli.cli`, a message (an error, a warning, a hint) names an option as its Python
keyword in backticks: with a value as Python source (`` `method='grpo'` ``, `` `force=True` ``,
`` `col=['reward=score']` ``, `` `from_='trl'` ``, `` `gamma=0.99` ``), or bare without one
("drop `` `critic` ``"). A Python caller reads it as it is. The command line shows every message
through :func:`on_command_line` (the error line in :mod:`advcli.cli.runner`, the warnings on
stderr and in ``--json``, in :mod:`advcli.cli.commands`), which spells each backticked option as
its flag:

- the keyword of an option is its flag's name in Python spelling (``--batch-tokens``:
  ``batch_tokens``; ``--from``, a Python keyword: ``from_``), for every option of every command
  (method parameters and the ``--from`` options among them) and every method parameter of
  :data:`advcli.methods.PARAMETERS` (those of a plugin included);
- no value: the bare flag (`` `critic` ``: ``--critic``); ``True``: the flag (``--force``);
  ``False``: its ``--no-`` form (``--no-shift``), where the option has one;
- a list: the flag once per item (`` `col=['a=b', 'c=d']` ``: ``--col a=b --col c=d``);
- text: as a shell takes it, quoted only where it is not one plain word (``--from verll``,
  ``--col 'reward=my score'``); a number: as the message writes it (``--gamma 0.99``).

Anything else in backticks (a column, a method's name, an option with a value it cannot spell)
is left as it is.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
import shlex
from dataclasses import dataclass
from typing import Any

import typer

_QUOTED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)(?:=([^`]+))?`")


@dataclass(frozen=True)
class Flag:
    """An option as the command line spells it: ``--shift``, and ``--no-shift`` where the
    option is a flag that has that form."""

    name: str
    is_flag: bool = False
    negative: str | None = None


def on_command_line(message: str, app: typer.Typer) -> str:
    """``message`` with every backticked option of ``app`` (or a method's parameter) spelled
    as its flag (see the module's rules): ``Hint: pass `force=True`, or
    `col=['reward=score']`, or drop `critic``` is ``Hint: pass --force, or --col reward=score,
    or drop --critic``; ``column `reward` has no value`` stays as it is."""
    known = flags(app)

    def spelled(match: re.Match[str]) -> str:
        return _spelled(match, known)

    return _QUOTED.sub(spelled, message)


SAYING_OPTIONS = ("found", "reproduced_by", "sampled", "prompts_removed")
"""The fields of a result that name options, as the library's messages do (besides its
warnings and what ``can_run`` says): the settings found from a framework's logged advantages,
those reproducing them, how to read a whole log where a sample was read, and the rows of
prompts ``--keep-prompts`` or ``--drop-prompts`` removed."""


def result_on_command_line(result: dict[str, Any], app: typer.Typer) -> dict[str, Any]:
    """``result`` (a command's, as a dict: what ``--json`` prints, what its summary shows)
    with the options in its warnings and :data:`SAYING_OPTIONS` spelled as flags."""
    said: dict[str, Any] = {
        k: on_command_line(v, app) for k in SAYING_OPTIONS if isinstance(v := result.get(k), str)
    }
    if isinstance(
        verdicts := result.get("can_run"), dict
    ):  # schema's: "needs values (or `critic`)"
        said["can_run"] = {k: on_command_line(v, app) for k, v in verdicts.items()}
    if "warnings" in result:
        said["warnings"] = [on_command_line(w, app) for w in result["warnings"]]
    return {**result, **said}


def _spelled(match: re.Match[str], known: dict[str, Flag]) -> str:
    flag = known.get(match.group(1))
    if flag is None:
        return match.group(0)
    if match.group(2) is None:
        return flag.name
    source = match.group(2)
    try:
        value = ast.literal_eval(source)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return match.group(0)
    if isinstance(value, list):
        items = [_with_value(flag, item, repr(item)) for item in value]
        spelled = [item for item in items if item is not None]
        return " ".join(spelled) if spelled and len(spelled) == len(items) else match.group(0)
    return _with_value(flag, value, source) or match.group(0)


def _with_value(flag: Flag, value: Any, source: str) -> str | None:
    """``flag`` given ``value`` (written ``source`` in the message), or None where the command
    line cannot say it."""
    if value is True:
        return flag.name if flag.is_flag else None
    if value is False:
        return flag.negative
    if isinstance(value, str):
        return f"{flag.name} {shlex.quote(value)}"
    if isinstance(value, (int, float)):
        return f"{flag.name} {source.strip()}"
    return None


def keyword_of(flag: str) -> str:
    """The Python keyword of the option ``flag``: ``--batch-tokens``: ``batch_tokens``,
    ``--from``: ``from_``."""
    name = flag.removeprefix("--").replace("-", "_")
    return f"{name}_" if keyword.iskeyword(name) else name


@functools.cache
def flags(app: typer.Typer) -> dict[str, Flag]:
    """Every option of ``app``'s commands and every method parameter, by its keyword (made
    once, when a message is first shown: ``--help`` never needs it)."""
    import typer.main

    from advcli.methods import PARAMETERS

    found: dict[str, Flag] = {}
    group = typer.main.get_command(app)
    for command in getattr(group, "commands", {}).values():
        for param in command.params:
            names = [opt for opt in param.opts if opt.startswith("--")]
            if names:
                negative = [opt for opt in param.secondary_opts if opt.startswith("--no-")]
                flag = Flag(names[0], getattr(param, "is_flag", False), next(iter(negative), None))
                found.setdefault(keyword_of(names[0]), flag)
    for param in PARAMETERS.values():  # a method's own, whichever commands list them
        is_flag = param.kind is bool
        no_form = f"--no-{param.flag.removeprefix('--')}" if is_flag else None
        found.setdefault(param.name, Flag(param.flag, is_flag, no_form))
    return found
