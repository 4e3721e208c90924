"""The registry of methods: every estimator ``--method`` can name, and their parameters.

Each family lives in one module and declares its methods and the parameters they introduce:

- :mod:`advcli.methods.group`: outcome baselines (grpo, rloo, opo, gpg, sppo, batch-mean, ...);
- :mod:`advcli.methods.gdpo`: several reward columns, normalised apart and summed (gdpo);
- :mod:`advcli.methods.process`: step rewards (grpo-process);
- :mod:`advcli.methods.temporal`: per-token estimators (mc, td, gae, reinforce-pp, remax, ...);
- :mod:`advcli.methods.distill`: on-policy distillation (opd);
- :mod:`advcli.methods.signals`: what every method takes (``--kl-coef``, ``--opd-coef``);
- :mod:`advcli.methods.base`: the :class:`Method` protocol they follow.

To add an estimator, write its class in its family's module (or a module of its own, declaring
the parameters it introduces in its ``parameters``) and :func:`register` an instance below. The
``--method`` choices, the options of ``annotate``, ``shard --param``, the required-column checks,
``schema``'s list of what a log can run and the README's method table all come from here.
"""

from __future__ import annotations

from typing import Any

from advcli.core.conventions import CONVENTIONS, DEFAULT, canonical
from advcli.errors import UsageError
from advcli.io.schema import Roles
from advcli.methods import distill, gdpo, group, process, signals, temporal
from advcli.methods.base import Method, Plan, TokenPass, sum_rows
from advcli.params import Param, Params

REGISTRY: dict[str, Method[Any]] = {}
"""Every method, by name, in the order ``--help`` lists them."""

PARAMETERS: dict[str, Param] = {}
"""Every run parameter, by name, in the order ``--help`` lists them."""

__all__ = [
    "PARAMETERS",
    "REGISTRY",
    "Method",
    "Plan",
    "TokenPass",
    "get",
    "missing_roles",
    "register",
    "resolve",
    "sum_rows",
    "verdict",
    "what_runs",
]


def register(method: Method[Any]) -> None:
    """Make ``method`` available to ``--method`` and every command, with its parameters.

    A parameter is known by its name: a method may reuse another's (the same object), but a
    different parameter under a known name is an error.
    """
    if method.name in REGISTRY:
        raise ValueError(f"a method called {method.name!r} is registered already")
    for param in method.all_parameters:
        known = PARAMETERS.setdefault(param.name, param)
        if known is not param:
            raise ValueError(f"{method.name}: another parameter is called {param.name!r}")
    REGISTRY[method.name] = method


# The built-in methods, after the parameters in the order their families declare them.
# KL and distillation apply to every method.
PARAMETERS.update(
    {p.name: p for p in (*group.PARAMETERS, *temporal.PARAMETERS, *signals.PARAMETERS)}
)
for _method in (*group.METHODS, *gdpo.METHODS, *process.METHODS, *temporal.METHODS,
                *distill.METHODS):  # fmt: skip
    register(_method)


def get(name: str) -> Method[Any]:
    """The method called ``name``; a :class:`UsageError` listing them all otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        msg = f"unknown method {name!r}. Methods: {', '.join(REGISTRY)}"
        raise UsageError(msg) from None


def missing_roles(method: Method[Any], roles: Roles) -> list[str]:
    """The columns ``method`` needs that a log with ``roles`` lacks."""
    return [role for role in method.roles if roles[role] is None]


def without_tokens() -> str:
    """What runs on a log without token ids, for a hint."""
    names = [name for name, m in REGISTRY.items() if "input_ids" not in m.roles]
    return (
        f"{', '.join(names[:-1])} and {names[-1]} need none, without options that sum over tokens"
    )


def verdict(missing: list[str]) -> str:
    """ "yes", or what is missing: ``needs input_ids, values``."""
    critic = " (or --critic)" if missing == ["values"] else ""
    return f"needs {', '.join(missing)}{critic}" if missing else "yes"


def what_runs(roles: Roles) -> dict[str, str]:
    """For every method, whether a log with ``roles`` can run it: "yes", or what it lacks."""
    return {name: verdict(missing_roles(m, roles)) for name, m in REGISTRY.items()}


def resolve(method: str, convention: str | None = None, **given: Any) -> Params:
    """Every parameter of a run: given (None: not given), else the method's default under the
    convention (None: advcli's own), else the convention's, else the parameter's own. Checks
    choices and ranges."""
    chosen = get(method)
    convention = canonical(convention or DEFAULT)
    if convention not in CONVENTIONS:
        msg = f"unknown convention {convention!r}. Conventions: {', '.join(CONVENTIONS)}"
        raise UsageError(msg)
    unknown = [name for name in given if name not in PARAMETERS]
    if unknown:
        flags = ", ".join(p.flag for p in PARAMETERS.values())
        msg = f"unknown parameter {unknown[0]!r}. Parameters: {flags}"
        raise UsageError(msg)
    conv = CONVENTIONS[convention]
    method_defaults = chosen.defaults(conv)
    values: dict[str, Any] = {}
    for name, param in PARAMETERS.items():
        value = param.coerce(given.get(name))
        if value is None and param.conventional:
            value = method_defaults.get(name, getattr(conv, name, param.default))
        elif value is None:
            value = param.coerce(param.default)
        values[name] = value
    ordered = [p for p in PARAMETERS.values() if p.choices] + [
        p for p in PARAMETERS.values() if not p.choices
    ]
    for param in ordered:
        problem = param.problem(values[param.name], values)
        if problem:
            raise UsageError(problem)
    if values["kl_coef"] and not chosen.takes_kl:
        msg = (
            f"--kl-coef: {method} puts no KL penalty in its rewards. Hint: use a method that "
            "does (grpo, rloo, gae, reinforce-pp, ...), or drop --kl-coef"
        )
        raise UsageError(msg)
    return Params(method, convention, values)
