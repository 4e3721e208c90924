"""Help that fits a screen: every command's --help at most 120 lines 100 columns wide, the
method parameters out of it (their flags still taken) and a pointer to ``advcli methods``."""

from __future__ import annotations

import typer

from advcli.cli.app import app
from advcli.commands.fields import METHOD_PARAMETERS
from advcli.methods import PARAMETERS
from tools.docs import command_help

COMMANDS = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
RUN_METHODS = ("annotate", "check", "report", "shard")


def test_every_help_fits_120_lines_at_100_columns():
    lines = {name: command_help([name]).count("\n") for name in COMMANDS}
    lines["advcli"] = command_help([]).count("\n")
    assert "methods" in lines and set(RUN_METHODS) <= set(lines)
    assert max(lines.values()) <= 120, lines


def test_a_command_that_runs_a_method_takes_its_parameters_as_hidden_flags():
    group = typer.main.get_command(app)
    for name in RUN_METHODS:
        command = group.commands[name]  # type: ignore[attr-defined]
        options = {p.name: p for p in command.params}
        shown = command_help([name])
        rows = [line.strip("│ *") for line in shown.splitlines()]
        assert " ".join(METHOD_PARAMETERS.split()) in " ".join(shown.replace("│", "").split())
        for param in PARAMETERS.values():
            if param.name in ("reward_columns", "reward_weights"):  # --from's options too
                continue
            assert options[param.name].hidden and param.flag in options[param.name].opts
            assert not any(row.startswith(f"{param.flag} ") for row in rows)
