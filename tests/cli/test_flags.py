"""The library's messages spelled for the command line: each rule of :mod:`advcli.cli.flags`."""

from __future__ import annotations

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
