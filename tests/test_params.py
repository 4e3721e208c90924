"""Run parameters: declared once, parsed from text, resolved once into an immutable whole."""

from __future__ import annotations

import dataclasses
import pickle
import typing

import pytest

from advcli.critic.options import CriticOptions
from advcli.errors import UsageError
from advcli.methods import PARAMETERS, REGISTRY, resolve
from advcli.params import (
    ANY,
    OPTION,
    Param,
    UndeclaredParameter,
    number_kind,
    parse_assignments,
)
from advcli.presets import PresetOptions
from advcli.reports import ReportOptions
from advcli.shards.options import ShardOptions, check_options
from tests.conftest import SAMPLE, run

NUMBERS = [p for p in PARAMETERS.values() if p.kind in (int, float) or p.range is not ANY]
"""Every parameter that takes a number (--lam too: a number or 'adaptive')."""


def _taker(param: Param) -> str:
    """A method that takes ``param``."""
    return next(name for name, m in REGISTRY.items() if param in m.takes)


def _run_of(param: Param) -> dict[str, str]:
    """What a run of a method that takes ``param`` needs besides it."""
    return {"reward_columns": "a"} if _taker(param) == "gdpo" else {}


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
        ("gamma=x", "`param` 'gamma=x': expected a number. Hint: `param=['gamma=0.5']`"),
        ("batch_size=1.5", "expected an integer"),
        ("strict=maybe", "expected true or false"),
        ("nope=1", "`param` 'nope=1': no parameter 'nope'. Parameters: baseline, scale, std-ddof,"),
        ("lamm=1", "`param` 'lamm=1': no parameter 'lamm'. Did you mean 'lam'? Parameters: "),
        ("std_dof=1", "no parameter 'std_dof'. Did you mean 'std-ddof'? Parameters: "),
        ("gamma", "`param` 'gamma': expected KEY=VALUE. Hint: `param=['gamma=0.99']`"),
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
        ("grpo", {"gamma": 0.5}, "`gamma` does not apply to grpo; it takes: `baseline`, `scale`"),
        ("mc", {"lam": 0.9}, "`lam` does not apply to mc; it takes: `batch_size`, `gamma`"),
        ("remax", {"whiten": "batch"}, "`whiten` does not apply to remax"),
        ("gdpo", {"kl_coef": 0.1}, "`kl_coef` does not apply to gdpo"),
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
        ({"gamma": 1.5}, "`gamma` 1.5: expected a number in [0, 1]"),
        ({"lam": "x"}, "`lam` 'x': expected a number in [0, 1] or 'adaptive'"),
        ({"lam": 2}, "`lam` 2.0: expected a number in [0, 1]"),
        ({"lam": "adaptive"}, "`lam='adaptive'` needs `alpha` A > 0 (VAPO uses 0.05, SAO 1.5)"),
        ({"scale": "foo"}, "`scale` 'foo': expected one of group, batch, none"),
        ({"std_ddof": 2}, "`std_ddof` 2: expected an integer in [0, 1]"),
        ({"batch_size": 0}, "`batch_size` 0: expected a positive integer"),
        ({"eps": -1}, "`eps` -1.0: expected a number >= 0"),
        ({"speed": 3}, "unknown parameter 'speed'. Parameters: `baseline`, `scale`"),
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
        p.gamma = 0.5
    with pytest.raises(TypeError):
        p._values["gamma"] = 0.5
    with pytest.raises(AttributeError):
        p.no_such_parameter  # noqa: B018
    assert pickle.loads(pickle.dumps(p)) == p and hash(p) == hash(resolve("gae", gamma=0.9))


def test_seed_is_advclis_former_name():
    assert resolve("grpo", "seed") == resolve("grpo", "advcli") == resolve("grpo")
    assert resolve("grpo", "seed").convention == "advcli"


@pytest.mark.parametrize("param", [p for p in NUMBERS if p.kind is not int], ids=lambda p: p.name)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_no_number_parameter_takes_a_nan_or_an_infinity(param, value):
    """The Python API: every float parameter of every method, as its declared range says."""
    with pytest.raises(UsageError) as err:
        resolve(_taker(param), **_run_of(param), **{param.name: value})
    assert str(err.value).startswith(f"`{param.name}` {value}: expected a finite number")


@pytest.mark.parametrize("param", [PARAMETERS[n] for n in ("eps", "lam", "entropy_kappa")],
                         ids=lambda p: p.name)  # fmt: skip
def test_a_nan_on_the_command_line_is_a_usage_error_naming_the_option(tmp_path, param):
    """--eps nan was blamed on the data (a NaN advantage at row 0); --eps inf gave advantages
    of 0: both ways of giving it, refused before the log is read (the rule is the one the
    Python API's test above checks on every parameter)."""
    method = ["--method", _taker(param), *(["--reward-columns", "a"] if _run_of(param) else [])]
    for given in ([param.flag, "inf"], ["--param", f"{param.name}=nan"]):
        command = "annotate" if given[0] != "--param" else "shard"
        proc = run(command, SAMPLE / "rollouts.jsonl", *method, *given, "--out", tmp_path / "o")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.decode().startswith(f"advcli: error: {param.flag} "), proc.stderr
        assert b"finite" in proc.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"eps": "0.1"}, "`eps` '0.1': expected a number >= 0"),
        ({"batch_size": 2.5}, "`batch_size` 2.5: expected a positive integer"),
        ({"batch_size": 1 << 63}, "`batch_size` 9223372036854775808: too large"),
        ({"f_norm": 0}, "`f_norm` 0.0: expected a number > 0"),
        ({"alpha": 0, "lam": "adaptive"}, "`alpha` 0.0: expected a number > 0"),
        ({"similarity": 1}, "`similarity` 1.0: expected a number in [0, 1)"),
    ],
)
def test_a_number_outside_its_declared_range_is_refused(given, message):
    param = PARAMETERS[next(iter(given))]
    with pytest.raises(UsageError) as err:
        resolve(_taker(param), **given)
    assert str(err.value).startswith(message)


def test_each_value_is_checked_before_what_the_values_say_together():
    """--ktae-beta-ig's check reads --ktae-alpha: a NaN there is named, not summed."""
    with pytest.raises(UsageError, match=r"^`ktae_alpha` nan: expected a finite number >= 0"):
        resolve("ktae", ktae_alpha=float("nan"), ktae_beta_ig=0.0)


OPTIONS = {CriticOptions: {"path": "c.onnx"}, ReportOptions: {}, ShardOptions: {},
           PresetOptions: {}}  # fmt: skip
"""The options dataclasses, and what each needs besides its number fields."""
FIELDS = [(cls, f) for cls in OPTIONS for f in dataclasses.fields(cls)
          if OPTION in f.metadata and number_kind(typing.get_type_hints(cls)[f.name])]  # fmt: skip


@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=lambda x: getattr(x, "name", ""))
@pytest.mark.parametrize("value", [float("nan"), -1, 1 << 63])
def test_every_number_option_of_the_options_dataclasses_has_a_declared_range(cls, field, value):
    """From Python as from the command line: ``report --seed -1`` was a bug (exit 70), and
    ``ReportOptions(seed=-1)`` the same; a NaN or an integer beyond int64 is no count."""
    shown = field.metadata[OPTION]
    kind = number_kind(typing.get_type_hints(cls)[field.name])
    if (value == -1 and shown.range.holds(-1)) or (value == 1 << 63 and kind is float):
        return  # a field that takes it
    with pytest.raises(UsageError) as err:
        made = cls(**OPTIONS[cls], **{field.name: value})
        if cls is ShardOptions:
            check_options(made)  # (mutable: checked before anything is read)
    assert str(err.value).startswith(f"`{field.name}` {value}")
