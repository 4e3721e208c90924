"""Run parameters: declared once, parsed from text, resolved once into an immutable whole."""

from __future__ import annotations

import pickle

import pytest

from advcli.errors import UsageError
from advcli.methods import PARAMETERS, REGISTRY, resolve
from advcli.params import UndeclaredParameter, parse_assignments


def test_text_is_parsed_by_the_declared_type():
    got = parse_assignments(
        ["gamma=0.99", "batch-size=8", "--strict=yes", "lam=adaptive", "scale=none"], PARAMETERS
    )
    assert got == {
        "gamma": 0.99,
        "batch_size": 8,
        "strict": True,
        "lam": "adaptive",
        "scale": "none",
    }


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("gamma=x", "--param 'gamma=x': expected a number. Hint: --param gamma=0.5"),
        ("batch_size=1.5", "expected an integer"),
        ("strict=maybe", "expected true or false"),
        ("nope=1", "--param 'nope=1': no parameter 'nope'. Parameters: baseline, scale, std-ddof,"),
        ("lamm=1", "--param 'lamm=1': no parameter 'lamm'. Did you mean 'lam'? Parameters: "),
        ("std_dof=1", "no parameter 'std_dof'. Did you mean 'std-ddof'? Parameters: "),
        ("gamma", "--param 'gamma': expected KEY=VALUE. Hint: --param gamma=0.99"),
    ],
)
def test_bad_assignments_are_usage_errors(item, needle):
    with pytest.raises(UsageError) as caught:
        parse_assignments([item], PARAMETERS)
    assert needle in str(caught.value)


def test_resolution_takes_the_method_then_the_convention_then_the_default():
    p = resolve("gae", "verl")
    assert (p.whiten, p.whiten_ddof, p.observations) == ("batch", 1, "skip")
    assert p.lam == 0.95 and p.alpha is None
    assert resolve("reinforce-pp", "seed").whiten == "batch"  # the method's own default
    assert resolve("grpo", "verl").std_ddof == 1  # the convention's
    assert resolve("gae", "verl", whiten="none").as_dict()["gamma"] == 1.0  # the parameter's
    assert resolve("grpo", "verl", eps=1).as_dict()["eps"] == 1.0  # float, given
    assert set(p.as_dict()) == {"method", "convention", *(q.name for q in REGISTRY["gae"].takes)}


def test_a_run_holds_exactly_what_its_method_takes():
    """grpo records no gamma, gae no eps: an output's metadata lists what was applied."""
    grpo, gae = resolve("grpo", "verl"), resolve("gae", "verl")
    assert "gamma" not in grpo.as_dict() and "eps" not in gae.as_dict()
    assert "zero_std" in grpo and "std_ddof" in resolve("opo")  # reads that change numbers
    assert "kl_coef" in grpo and "kl_coef" not in resolve("gdpo", reward_columns="a")
    with pytest.raises(UndeclaredParameter, match="grpo read the parameter 'gamma'"):
        grpo.gamma  # noqa: B018


@pytest.mark.parametrize(
    ("method", "given", "message"),
    [
        ("grpo", {"gamma": 0.5}, "--gamma does not apply to grpo; it takes: --baseline, --scale"),
        ("mc", {"lam": 0.9}, "--lam does not apply to mc; it takes: --batch-size, --gamma"),
        ("remax", {"whiten": "batch"}, "--whiten does not apply to remax"),
        ("gdpo", {"kl_coef": 0.1}, "--kl-coef does not apply to gdpo"),
    ],
)
def test_a_parameter_the_method_does_not_take_is_refused(method, given, message):
    with pytest.raises(UsageError) as err:
        resolve(method, reward_columns="a" if method == "gdpo" else None, **given)
    assert str(err.value).startswith(message)
    assert resolve(method, reward_columns="a" if method == "gdpo" else None,
                   **dict.fromkeys(given)).method == method  # None: not given  # fmt: skip


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"gamma": 1.5}, "--gamma 1.5: expected a number in [0, 1]"),
        ({"lam": "x"}, "--lam 'x': expected a number in [0, 1] or 'adaptive'"),
        ({"lam": 2}, "--lam 2.0: expected a number in [0, 1] or 'adaptive'"),
        ({"lam": "adaptive"}, "--lam adaptive needs --alpha A > 0 (VAPO uses 0.05, SAO 1.5)"),
        ({"scale": "foo"}, "--scale 'foo': expected one of group, batch, none"),
        ({"std_ddof": 2}, "--std-ddof and --whiten-ddof take 0 (population) or 1 (sample)"),
        ({"batch_size": 0}, "--batch-size 0: expected a positive integer"),
        ({"eps": -1}, "--eps -1.0: expected a number >= 0"),
        ({"speed": 3}, "unknown parameter 'speed'. Parameters: --baseline, --scale"),
    ],
)
def test_bad_values_name_the_option(given, message):
    method = "gae" if set(given) <= {q.name for q in REGISTRY["gae"].takes} else "grpo"
    with pytest.raises(UsageError) as err:
        resolve(method, **given)
    assert str(err.value).startswith(message)


def test_unknown_method_and_convention_list_the_choices():
    with pytest.raises(UsageError, match="unknown method 'x'. Methods: grpo, rloo, dr-grpo, opo"):
        resolve("x")
    with pytest.raises(UsageError, match="unknown convention 'x'. Conventions: advcli, verl"):
        resolve("grpo", "x")


def test_params_are_immutable_hashable_and_picklable():
    p = resolve("gae", gamma=0.9)
    with pytest.raises(AttributeError):
        p.gamma = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        p._values["gamma"] = 0.5
    with pytest.raises(AttributeError):
        p.no_such_parameter  # noqa: B018
    assert pickle.loads(pickle.dumps(p)) == p and hash(p) == hash(resolve("gae", gamma=0.9))


def test_seed_is_advclis_former_name():
    assert resolve("grpo", "seed") == resolve("grpo", "advcli") == resolve("grpo")
    assert resolve("grpo", "seed").convention == "advcli"
