"""Hints that converge: on every dump a framework's own code wrote (``tests/fixtures/real``),
the command a user starts with, then every option its refusal or warnings name applied (the
user's own value where a hint is bare: only they know it), ends at the framework's own numbers
within three rounds, or, where the dump lacks what it would take, at a refusal saying so.

A message's options are read as a user would: ``--flag VALUE`` where a value follows that the
option takes, bare otherwise; a placeholder (``N``, ``NAME``, ``COLUMN``) fails the test. An
exit-0 run whose numbers are not the framework's must say so in a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer

from advcli.cli.app import app
from tests.conftest import run

REAL = Path(__file__).parent.parent / "fixtures" / "real"


@dataclass(frozen=True)
class Case:
    """A dump, read as a user would first read it, and how to tell its framework's numbers.

    ``truth``: ``logged`` (the summary says the framework's logged advantages are
    reproduced), ``rows:KEY`` (truth.json's rows, in order, hold the advantage under KEY), or
    ``tokens`` (truth.json's rows hold slime's per-token advantages). ``ends``: where the dump
    lacks what it would take, the refusal the run must end at (part of its text)."""

    path: str
    preset: str
    start: tuple[str, ...] = ("--method", "grpo")
    truth: str = "logged"
    ends: str | None = None
    knows: dict[str, str] = field(default_factory=dict)


def trl(case: str, **more: Any) -> Case:
    """A TRL run: the user knows its num_generations, reward functions and weights."""
    truth = json.loads((REAL / "trl" / case / "truth.json").read_text())
    names, weights = truth["reward_functions"], truth["settings"]["reward_weights"]
    knows = {
        "--group-size": str(truth["settings"]["num_generations"]),
        "--reward-columns": ",".join(names),
        "--reward-weights": ",".join(f"{n}={w:g}" for n, w in zip(names, weights, strict=True)),
    }
    return Case(f"trl/{case}", "trl", knows=knows, **more)


CASES = [
    *[trl(c) for c in ("default", "g8", "repeated_prompt", "log_extra", "none_rewards",
                       "conversational", "grad_accum", "eval", "scale_batch", "scale_none",
                       "normalize_then_sum", "weights", "batch_weights_none", "all_zero",
                       "eval_n1", "g4_for_check", "gdpo_weights")],
    *[Case(f"nemo-rl/{c}", "nemo-rl") for c in (
        "default", "near_constant", "no_loo", "overlong_filtered", "std_off", "validation",
        "reinforce_pp", "reinforce_pp_no_baseline", "reinforce_pp_overlong", "no_loo_no_norm",
        "dynamic_sampling", "dynamic_sampling_partial_groups", "reward_scaling",
        "clip_advantages")],
    Case("nemo-rl/rollout_identity", "nemo-rl", knows={"--group-size": "4"}),
    *[Case(f"prime-rl/{c}", "prime-rl") for c in (
        "default", "stream", "stream_failed_episode", "stream_superseded", "stream_batch_cut",
        "stream_retried_episode")],
    *[Case(f"open-instruct/{c}", "open-instruct") for c in (
        "default", "n3_float_edge", "shards", "standard", "tools")],
    *[Case(f"{fw}-train/{c}", fw, knows={"--kl-coef": "0.05"}) for fw, c in (
        ("slime", "default"), ("slime", "reinforce_plus_plus_kl"), ("miles", "default"),
        ("miles", "context_parallel"), ("miles", "tensor_parallel_copies"),
        ("miles", "reinforce_plus_plus_kl"))],
    *[Case(f"verl/{c}/rollout", "verl", truth="rows:grpo_advantage") for c in (
        "legacy", "legacy_dict_scores", "v1", "v1_compaction", "dapo_dict_logged",
        "dapo_float_logged", "dapo_float_unlogged", "dapo_dict_extra_keys",
        "v1_dapo_dict_logged", "recipe_dapo_filter_groups")],
    Case("verl/validation/validation", "verl", truth="rows:grpo_advantage"),
    Case("verl/legacy_repeated_prompt/rollout", "verl", ends="share the prompt"),
    Case("verl/dapo_dict_unlogged/rollout", "verl", ends="math_dapo's dict"),
    Case("verl/recipe_dapo_dict_logged/rollout", "verl", ends="not the lines' own"),
    *[Case(f"skyrl/{c}/dumped_evals", "skyrl", truth="rows:grpo_advantage") for c in (
        "default", "singleton", "token_rewards", "binary", "multi_turn")],
    Case("skyrl/repeated_prompt/dumped_evals", "skyrl", ends="share the prompt"),
    Case("skyrl/step_wise/dumped_evals", "skyrl", ends="a step-wise dump"),
    *[Case(f"slime/{c}", "slime", ("--method", "grpo", "--reward-key", "score"),
           truth="rows:advantage") for c in (
        "default", "mixed_compaction", "multi_turn", "dict_reward", "truncated")],
    Case("slime/reinforce_pp_baseline", "slime", ("--method", "reinforce-pp-baseline"),
         truth="tokens"),
    Case("slime/reinforce_pp_baseline_multi_turn", "slime",
         ("--method", "reinforce-pp-baseline"), truth="tokens"),
    Case("slime/reinforce_pp", "slime", ("--method", "reinforce-pp"), truth="tokens"),
    Case("slime/reinforce_pp_multi_turn_gamma", "slime",
         ("--method", "reinforce-pp", "--gamma", "0.9"), truth="tokens"),
    Case("roll/default", "roll", truth="rows:grpo_advantage"),
]  # fmt: skip
"""Every dump of the suite with the framework's own advantages, but: nemo-gym's (rewards
only), AReaL's, tinker's, verl's actor batch and prime-rl's length-penalty groups (their own
tests compare what they hold), and prime-rl's ``stream_multi_annotation``, whose script wrote
advantages prime-rl did not, to test the fold."""

WORDS = {"and", "or", "with", "to", "reproduces", "gives", "reads", "names", "the", "is", "as"}
"""Words that follow a bare option in a message."""

PLACEHOLDER = re.compile(r"^(?:[a-z_]+=)?(?:[A-Z][A-Z_]*|<[^>]*>|\.\.\.)(?:,.*)?$")


def options() -> dict[str, bool]:
    """Every option of ``annotate``, and whether it takes a value (a flag does not)."""
    command = typer.main.get_command(app).commands["annotate"]  # type: ignore[attr-defined]
    found = {}
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                found[name] = not getattr(param, "is_flag", False)
    return found


TAKES_VALUE = options()


def hints(message: str) -> list[tuple[str, str | None]]:
    """The options ``message`` names: ``(flag, value)``, value None where it is bare."""
    found = []
    tokens = message.replace("(", " ").replace(")", " ").split()
    for i, token in enumerate(tokens):
        flag = token.rstrip(".,;:")
        if not re.fullmatch(r"--[a-z][a-z0-9-]*", flag):
            continue
        assert flag in TAKES_VALUE, f"the message names {flag}, no option of annotate: {message}"
        value = None
        if TAKES_VALUE[flag] and flag == token and i + 1 < len(tokens):
            following = tokens[i + 1].rstrip(".,;")
            if following not in WORDS and not following.startswith("--"):
                value = following
        assert value is None or not PLACEHOLDER.match(value), (
            f"a placeholder in a hint ({flag} {value}): {message}"
        )
        found.append((flag, value))
    return found


def applied(args: list[str], hint: tuple[str, str | None], case: Case) -> list[str]:
    """``args`` with one hint applied: its value replaces the option's (``--col``: the same
    role's), a bare one takes the user's own value, a flag is set."""
    flag, value = hint
    if TAKES_VALUE[flag] and value is None:
        assert flag in case.knows, f"a bare {flag}, which the user of {case.path} cannot answer"
        value = case.knows[flag]
    out = []
    i = 0
    while i < len(args):
        same = args[i] == flag and (flag != "--col" or args[i + 1].split("=")[0] ==
                                    str(value).split("=")[0])  # fmt: skip
        if same:
            i += 2 if TAKES_VALUE[flag] else 1
            continue
        out.append(args[i])
        i += 1
    return [*out, flag, *([value] if value is not None and TAKES_VALUE[flag] else [])]


def exact(case: Case, out: Path, summary: dict) -> bool:
    """Whether the run wrote the framework's own numbers."""
    if case.truth == "logged":
        return summary.get("logged_advantages", "").startswith("reproduces")
    truth = json.loads((REAL / "/".join(case.path.split("/")[:2]) / "truth.json").read_text())
    truth = truth["rows"]
    table = pq.read_table(out)
    if table.num_rows != len(truth):
        return False
    if case.truth == "tokens":
        for ours, want in zip(table.column("advantages").to_pylist(), truth, strict=True):
            n, mask = want["response_length"], np.asarray(want["loss_mask"], bool)
            got = np.asarray(ours[len(ours) - n :])[mask]
            if not np.allclose(got, np.asarray(want["advantages"])[mask], rtol=0, atol=2e-6):
                return False
        return True
    key = case.truth.removeprefix("rows:")
    ours = [v[-1] if isinstance(v, list) else v for v in table.column("advantage").to_pylist()]
    return bool(np.abs(np.array(ours) - [t[key] for t in truth]).max() <= 2e-6)


@pytest.mark.parametrize("case", CASES, ids=[c.path.removesuffix("/rollout").removesuffix(
    "/dumped_evals") for c in CASES])  # fmt: skip
def test_following_the_hints_reaches_the_frameworks_numbers(tmp_path: Path, case: Case) -> None:
    args = list(case.start)
    out = tmp_path / "out.parquet"
    for _ in range(4):  # the first run, and three rounds of hints
        proc = run("annotate", str(REAL / case.path), "--from", case.preset, *args,
                   "--out", str(out), "--json", "--force")  # fmt: skip
        stderr = proc.stderr.decode()
        if proc.returncode == 0:
            summary = json.loads(proc.stdout)
            if exact(case, out, summary):
                assert case.ends is None, f"{case.path}: exact, where a refusal was expected"
                return
            messages = summary["warnings"]
            assert any("differ" in m for m in messages), (
                f"{case.path} {args}: exit 0, not the framework's numbers, and no warning says "
                f"so: {messages}"
            )
        else:
            if case.ends is not None and case.ends in stderr:
                assert len(stderr.strip().splitlines()) == 1, stderr
                return
            messages = [stderr]
        found = [h for m in messages for h in hints(m)]
        assert found, f"{case.path} {args}: no option named to follow: {messages}"
        for hint in found:
            args = applied(args, hint, case)
    raise AssertionError(f"{case.path}: not the framework's numbers after three rounds: {args}")
