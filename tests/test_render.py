"""What advcli shows a person holds the user's text as it is: file, column and id names with
rich markup ("[/x]" is a name, not a closing tag) or emoji codes are shown literally."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from advcli import progress
from advcli.render import Activity
from tests.conftest import SAMPLE, rollout, run, write_parquet

MARKUP = "[/x][bold]:smile:"  # a closing tag, an opening one and an emoji code; "[" is a folder


def _log(folder: Path) -> str:
    """A log named with markup, whose prompt-id column and an extra column are too."""
    rows = []
    for prompt, rewards in (("a", [1.0, 0.0, 0.0]), ("b", [1.0, 0.0, 1.0])):
        for reward in rewards:
            row = rollout(prompt, reward)
            row["[/id]"] = row.pop("prompt_id")
            row["[bold]:smile:"] = "extra"
            rows.append(row)
    (folder / "[").mkdir()
    write_parquet(folder / f"{MARKUP}.parquet", rows)
    return f"{MARKUP}.parquet"


def _trl_log(folder: Path) -> str:
    """TRL's completions in a folder named with markup, its reward columns renamed with it."""
    (folder / MARKUP).mkdir(parents=True)
    for path in sorted((SAMPLE / "trl" / "completions").glob("*.parquet")):
        table = pq.read_table(path).replace_schema_metadata(None)
        names = {"accuracy_reward": "[/acc]", "format_reward": "[bold]fmt"}
        pq.write_table(table.rename_columns([names.get(n, n) for n in table.column_names]),
                       folder / MARKUP / path.name)  # fmt: skip
    return MARKUP


MAPPED = ["--col", "prompt_id=[/id]"]
COMMANDS = {  # the command line, and what it must show and write
    "schema": (["schema", "LOG", *MAPPED], [f"schema: {MARKUP}.parquet", "[/id]", "[bold]:smile:"],
               None),
    "audit": (["audit", "LOG", *MAPPED], [f"audit: {MARKUP}.parquet"], None),
    "annotate": (["annotate", "LOG", *MAPPED, "--method", "grpo", "--out", "[/y][b].parquet"],
                 ["annotate: [/y][b].parquet"], "[/y][b].parquet"),
    "report": (["report", "LOG", *MAPPED, "--method", "grpo", "--out", "[/y][b].html"],
               ["report: [/y][b].html"], "[/y][b].html"),
    "shard": (["shard", "LOG", *MAPPED, "--method", "grpo", "--out", "[/y][b]:smile:"],
              ["shard: [/y][b]:smile:"], "[/y][b]:smile:/_advcli_manifest.parquet"),
    "check": (["check", "LOG", "--from", "trl"], ["--reward-columns [/acc],[bold]fmt"], None),
    "prompts": (["prompts", "LOG", *MAPPED, "--success", "1", "--out", "[/y][b].jsonl"],
                [f"{MARKUP}.parquet", "[/y][b].jsonl"], "[/y][b].jsonl"),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_names_holding_markup_are_shown_as_they_are(tmp_path, command):
    args, shown, written = COMMANDS[command]
    log = _trl_log(tmp_path) if command == "check" else _log(tmp_path)
    (tmp_path / "[").mkdir(exist_ok=True)
    proc = run(*[log if a == "LOG" else a for a in args], cwd=tmp_path)
    text = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0, text
    assert all(name in text for name in shown), text
    assert "😄" not in text
    if written is not None:
        assert (tmp_path / written).is_file()


def test_a_pass_named_with_markup_is_shown_as_it_is_on_the_bar():
    text = io.StringIO()
    console = Console(file=text, force_terminal=True, width=200)
    with Activity(quiet=False, mode="bar", console=console), progress.stage(MARKUP):
        progress.read(3, 0.5)
    assert MARKUP in text.getvalue()


def test_templated_prompts_are_shown_by_what_tells_them_apart():
    from advcli.render import PROMPT_SHOWN, _distinct_parts, log_name

    template = "system: you are a helpful math tutor. user: what is {}? answer after ####."
    shown = _distinct_parts([template.format("7 times 2"), template.format("12 plus 7")])
    assert shown == ["…7 times 2…", "…12 plus 7…"]
    assert _distinct_parts(["p-math", "p-easy"]) == ["p-math", "p-easy"]  # short: whole
    long = "x" * (PROMPT_SHOWN + 5)
    assert _distinct_parts([long]) == ["x" * (PROMPT_SHOWN - 1) + "…"]
    assert log_name(["a/b/1.jsonl", "a/b/2.jsonl"]) == "a/b (2 files)"
    assert log_name(["a/b/1.jsonl"]) == "a/b/1.jsonl"
