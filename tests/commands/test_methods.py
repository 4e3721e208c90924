"""``advcli methods``: every method a line, one method's parameters, defaults and formula."""

from __future__ import annotations

import json
import os

import pytest

import advcli
from advcli.errors import UsageError
from advcli.methods import REGISTRY
from tests.conftest import run

WIDE = {**os.environ, "COLUMNS": "100"}


def test_the_list_holds_every_registered_method_with_its_formula_and_needs():
    found = advcli.list_methods()
    assert [line.name for line in found.methods] == list(REGISTRY)
    grpo = found.methods[0]
    assert grpo.summary.startswith("(R − mean_g) / (std_g + eps)")
    assert grpo.needs == ["prompt_id", "reward"]
    gdpo = next(line for line in found.methods if line.name == "gdpo")
    assert gdpo.needs == [
        "prompt_id",
        "the `--reward-columns`; input_ids with `--aggregation verl`",
    ]


def test_one_method_shows_its_parameters_with_each_conventions_defaults():
    gigpo = advcli.describe_method("gigpo")
    params = {p.flag: p for p in gigpo.parameters}
    step_weight = params["--step-weight"]
    assert (step_weight.name, step_weight.type, step_weight.default) == (
        "step_weight",
        "float",
        1.0,
    )
    assert step_weight.by_convention == {} and not step_weight.shared
    assert params["--step-gamma"].by_convention == {"roll": 0.95}
    assert params["--implementation"].choices == ["verl-agent", "trinity", "roll"]
    assert params["--kl-coef"].shared and params["--kl-coef"].default == 0.0
    assert "--lam" not in params  # gae's, not gigpo's
    assert [p.shared for p in gigpo.parameters] == sorted(p.shared for p in gigpo.parameters)
    assert gigpo.needs == ["prompt_id", "state"]
    assert "verl-agent ``compute_gigpo_outcome_advantage``" in gigpo.definition
    assert gigpo.outputs[:2] == ["advantages", "advantage"]


def test_a_conventional_default_is_the_conventions_own():
    eps = next(p for p in advcli.describe_method("grpo").parameters if p.name == "eps")
    assert eps.default == 1e-6
    assert eps.by_convention["trl"] == 1e-4 and eps.by_convention["openrlhf"] == 1e-9
    assert "verl" not in eps.by_convention  # the same as advcli's


def test_an_unknown_method_names_the_nearest():
    with pytest.raises(UsageError, match="unknown method 'gipgo'. Did you mean 'gigpo'"):
        advcli.describe_method("gipgo")


def test_the_command_prints_what_the_api_returns():
    listed = run("methods", "--json")
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == advcli.list_methods().as_dict()
    one = run("methods", "gae", "--json")
    assert json.loads(one.stdout) == json.loads(json.dumps(advcli.describe_method("gae").as_dict()))


def test_the_command_shows_a_methods_flags_as_text():
    shown = run("methods", "gigpo", env=WIDE)
    text = shown.stdout.decode()
    assert shown.returncode == 0
    assert "  --step-weight NUMBER  default 1.0\n" in text
    assert "  --step-gamma NUMBER  default 1.0 (roll: 0.95)\n" in text
    assert "  --whiten-rewards / --no-whiten-rewards  default False\n" in text
    assert text.startswith("gigpo: A^E + ω·A^S")
    listed = run("methods", env=WIDE).stdout.decode()
    assert listed.startswith("grpo ") and "\nopd " in listed
    assert "advcli methods NAME shows a method's parameters" in listed
    bad = run("methods", "nope")
    assert bad.returncode == 2 and b"unknown method 'nope'" in bad.stderr
