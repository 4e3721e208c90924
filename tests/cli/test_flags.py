"""The library's messages spelled for the command line: each rule of :mod:`advcli.cli.flags`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import advcli
from advcli.cli.app import app
from advcli.cli.flags import flags, keyword_of, on_command_line
from advcli.errors import OutputError
from tests.conftest import run


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("drop `critic`", "drop --critic"),  # no value: the bare flag
        ("choose another `out`", "choose another --out"),
        ("pass `force=True`", "pass --force"),  # True: the flag
        ("pass `shift=False`", "pass --no-shift"),  # False: its --no- form
        ("pass `force=False`", "pass --no-force"),
        ("pass `method='grpo'`", "pass --method grpo"),  # a plain word: unquoted
        ("`from_='verll'`: unknown framework", "--from verll: unknown framework"),
        ("`col=['reward=score']`", "--col reward=score"),  # a list: the flag per item
        ("`col=['reward=score', 'prompt_id=q']`", "--col reward=score --col prompt_id=q"),
        ("`col=['reward=my score']`", "--col 'reward=my score'"),  # not one word: quoted
        ("`label='a;b'`", "--label 'a;b'"),
        ("`gamma=0.99`", "--gamma 0.99"),  # a number: as written
        ("`tol=1e-05`", "--tol 1e-05"),
        ("`batch_tokens=16384`", "--batch-tokens 16384"),  # a keyword in Python spelling
        ("`group_size=4` or `reward_key='acc'`", "--group-size 4 or --reward-key acc"),
        ("`strict=False`", "--no-strict"),  # a method's boolean parameter
        ("`max_len_truncate='left'`", "--max-len-truncate left"),
    ],
)
def test_an_option_in_backticks_becomes_its_flag(message: str, shown: str) -> None:
    assert on_command_line(message, app) == shown


@pytest.mark.parametrize(
    "message",
    [
        "column `reward` has no value",  # not an option
        "`grpo` reproduces them",  # a method's name
        "`json=False`",  # a flag without a --no- form
        "`method=None`",  # a value the command line cannot say
        "`gamma=[0.5, None]`",
        "`col=[]`",
        "`method=grpo`",  # not Python source
        "``, `=1`",
        "--force as it is",  # already a flag (a message not yet in Python terms)
    ],
)
def test_anything_else_is_left_as_it_is(message: str) -> None:
    assert on_command_line(message, app) == message


def test_every_option_of_every_command_has_a_keyword() -> None:
    known = flags(app)
    assert known["from_"].name == "--from"
    assert known["out"].name == "--out"  # its long form, not -o
    assert known["critic"].name == "--critic"  # the critic's path, a field's own flag
    assert known["lam"].name == "--lam"  # a method parameter
    assert known["merge_repeated_prompts"].is_flag  # a --from option
    assert known["rows_per_shard"].name == "--rows-per-shard"  # an options dataclass' field
    assert known["keep"].name == "--keep"
    assert known["json"].negative is None


def test_a_keyword_is_its_flag_in_python_spelling() -> None:
    assert keyword_of("--batch-tokens") == "batch_tokens"
    assert keyword_of("--from") == "from_"
    assert keyword_of("--out") == "out"


def test_one_message_said_each_way(tmp_path: Path, small_log: str) -> None:
    """The library's message names the keyword; the command line prints the flag."""
    out = tmp_path / "taken.parquet"
    out.write_text("taken")
    with pytest.raises(OutputError) as raised:
        advcli.annotate(small_log, out, method="grpo")
    assert str(raised.value) == f"{out}: already exists. Hint: pass `force=True` to replace it"
    proc = run("annotate", small_log, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        f"advcli: error: {out}: already exists. Hint: pass --force to replace it\n"
    )


ROOT = Path(advcli.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z]")
NOT_MESSAGES = ("help", "flag", "panel")
"""Keywords whose text is no message: an option's help (its flags named as ``--help`` shows
them) and a declared flag (``Param.flag``, ``OptionHelp``)."""
HELP_MAKERS = ("Param", "option", "method", "convention")
"""Calls whose arguments are an option's help (a method parameter's, an options field's, and
the shared fields' makers in ``commands/fields.py``: ``fields.method(HELP)``)."""
HELP_FIELDS = ("summary", "definition", "also_needs")
"""A method's own help (``advcli methods NAME``), naming its flags as the command line does."""
HELP_PAGES = ("render.py", "commands/fields.py")
"""Modules that draw the command line's pages (a method's flags with their ``--no-`` form), or
declare the options every command shares, their help texts as ``--help`` shows them."""
FRAMEWORKS_OWN = {
    ("presets/slime.py", "--save-debug-rollout-data DIR/{rollout_id}.pt, or --dump-details DIR"),
    (
        "presets/slime.py",
        " is not there. Hint: give the --dump-details folder, or put the rollout dump beside it",
    ),
    ("presets/open_instruct.py", "grpo_fast --save_traces --rollouts_save_path DIR"),
    ("presets/text.py", "openrlhf.cli.batch_inference --eval_task rm (through v0.9)"),
    ("presets/text.py", "the --output_path JSONL"),
}
"""A framework's own flags, quoted as such: the command lines that write its dumps."""


def _called(call: ast.Call) -> str:
    """The name a call calls: ``option`` of ``option(...)`` and of ``fields.option(...)``."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _messages(tree: ast.Module) -> list[ast.Constant]:
    """The text of ``tree`` that may reach a user as a message: every string, less docstrings
    (of a module, class, function or attribute: a string alone as a statement) and help."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        within: list[ast.AST] = []
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            within = [node.value]  # a docstring
        elif isinstance(node, ast.keyword) and node.arg in NOT_MESSAGES:
            within = [node.value]
        elif isinstance(node, ast.Call) and _called(node) in HELP_MAKERS:
            within = list(node.args)
        elif isinstance(node, ast.Assign) and any(
            getattr(target, "id", "") in HELP_FIELDS for target in node.targets
        ):
            within = [node.value]
        skipped.update(id(inner) for part in within for inner in ast.walk(part))
    return [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skipped
    ]  # fmt: skip


def test_no_library_message_spells_a_flag() -> None:
    """Outside :mod:`advcli.cli`, messages name options as Python keywords (the command line
    spells them as flags): no ``--flag`` in the library's strings."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith("cli/") or where in HELP_PAGES:
            continue
        for text in _messages(ast.parse(path.read_text())):
            said = str(text.value)  # (a str: _messages keeps no other constant)
            if FLAG.search(said) and (where, said) not in FRAMEWORKS_OWN:
                found.append(f"{where}:{text.lineno}: {text.value!r}")
    assert found == []
