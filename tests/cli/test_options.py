"""Each command's options declared once, as its dataclass in :mod:`advcli.commands`: every field
a keyword of the command's Python function and, unless it is for Python alone, an option of
the command line (a group's fields each an option); and no keyword or option besides them, the
method parameters and what only shows a result."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import typer

import advcli
from advcli.cli.app import app
from advcli.commands.annotate import AnnotateCommand
from advcli.commands.audit import AuditCommand
from advcli.commands.check import CheckCommand
from advcli.commands.report import ReportCommand
from advcli.commands.schema import SchemaCommand
from advcli.commands.score import ScoreCommand
from advcli.commands.shard import ShardCommand
from advcli.errors import UsageError
from advcli.methods import PARAMETERS
from advcli.params import OPTION, OptionHelp
from advcli.presets import PresetOptions

COMMANDS: dict[str, type] = {
    "annotate": AnnotateCommand,
    "audit": AuditCommand,
    "check": CheckCommand,
    "report": ReportCommand,
    "schema": SchemaCommand,
    "score": ScoreCommand,
    "shard": ShardCommand,
}
PYTHON_ALONE = {"batch_rows", "bucket_tokens", "worst"}  # memory and speed; check's listing
SHOWING = {"inputs", "as_json", "quiet", "progress_mode", "list_", "fail_above", "fail_on", "help"}
"""The command line's own: the inputs, and what shows the result or sets the exit code."""


def flags(cls: type) -> set[str]:
    """The first flag of every option the fields of ``cls`` declare, a group's fields each."""
    found = set()
    for f in dataclasses.fields(cls):
        shown: OptionHelp | None = f.metadata.get(OPTION)
        if shown is None:
            continue
        if shown.nested is not None:
            found |= flags(shown.nested)
        else:
            found.add(shown.name_flag(f.name).split("/")[0])
    return found


def cli_flags(name: str) -> set[str]:
    """The first flag of every option of the command ``name`` but the method parameters (hidden
    flags; gdpo's reward columns and weights are --from's options too) and the command line's
    own."""
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {
        p.opts[0]
        for p in command.params
        if p.name not in SHOWING and not (p.name in PARAMETERS and p.hidden)
    }


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_field_is_a_keyword_and_an_option_and_nothing_else(name: str) -> None:
    cls = COMMANDS[name]
    names = [f.name for f in dataclasses.fields(cls)]
    signature = inspect.signature(getattr(advcli, name))
    keywords = [p.name for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    assert keywords == ["inputs", *[n for n in keywords[1:] if n in names]]
    assert sorted(keywords[1:]) == sorted(names)
    takes_params = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    assert takes_params == ("method" in names)
    assert PYTHON_ALONE & set(names) == {
        f.name for f in dataclasses.fields(cls) if OPTION not in f.metadata
    }
    assert cli_flags(name) == flags(cls)


def test_the_option_groups_keep_their_flags() -> None:
    assert {"--critic", "--shift", "--max-len-truncate"} <= flags(AnnotateCommand)
    assert {"--from", "--reward-columns", "--merge-repeated-prompts"} <= flags(AuditCommand)
    assert "--zero-variance-tol" in flags(AuditCommand)  # audit(tol=...)
    assert flags(PresetOptions) <= flags(SchemaCommand)


def call(name: str, **keywords: Any) -> str:
    try:
        getattr(advcli, name)("sample_data/rollouts.parquet", **keywords)
    except UsageError as exc:
        return str(exc)
    raise AssertionError("not refused")


def test_an_unknown_keyword_is_refused_in_one_line_naming_the_near_one() -> None:
    said = call("audit", tols=0.1)
    assert said.startswith("audit() takes no keyword 'tols'. Did you mean 'tol'?")
    assert "\n" not in said


def test_a_required_keyword_left_out_is_refused() -> None:
    assert call("annotate", out="never.parquet") == "annotate() needs the keyword 'method'"


def test_a_declared_range_holds_from_python_too() -> None:
    said = call("audit", near_tie=-1.0)  # named as Python callers spell it
    assert said.endswith("-1.0: expected a number >= 0") and "near" in said


def test_a_command_that_runs_a_method_refuses_what_is_neither_option_nor_parameter() -> None:
    said = call("annotate", out="never.parquet", method="grpo", forse=True)
    assert said.startswith("annotate() takes no keyword 'forse'. Did you mean 'force'?")
