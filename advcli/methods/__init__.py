"""The registry of methods: every estimator ``--method`` can name, and their parameters.

Each family lives in one module and declares its methods and the parameters they introduce:

- :mod:`advcli.methods.group`: outcome baselines (grpo, rloo, batch-mean);
- :mod:`advcli.methods.temporal`: per-token estimators (mc, td, gae, reinforce-pp, ...);
- :mod:`advcli.methods.base`: the :class:`Method` protocol they follow.

To add an estimator, write its class in its family's module (or a new one), and add its instance
below (and a new module's ``PARAMETERS``): the ``--method`` choices, the options of ``annotate``,
``shard --param``, the required-column checks, ``schema``'s list of what a log can run and the
README's method table all come from here.
"""

from __future__ import annotations

from typing import Any

from advcli.core.conventions import CONVENTIONS
from advcli.errors import UsageError
from advcli.methods import group, temporal
from advcli.methods.base import Method, Plan, TokenPass
from advcli.params import Param, Params

REGISTRY: dict[str, Method[Any]] = {m.name: m for m in (*group.METHODS, *temporal.METHODS)}
"""Every method, by name, in the order ``--help`` lists them."""

PARAMETERS: dict[str, Param] = {p.name: p for p in (*group.PARAMETERS, *temporal.PARAMETERS)}
"""Every run parameter, by name, in the order ``--help`` lists them."""

__all__ = ["PARAMETERS", "REGISTRY", "Method", "Plan", "TokenPass", "get", "resolve"]


def get(name: str) -> Method[Any]:
    """The method called ``name``; a :class:`UsageError` listing them all otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        msg = f"unknown method {name!r}. Methods: {', '.join(REGISTRY)}"
        raise UsageError(msg) from None


def resolve(method: str, convention: str = "seed", **given: Any) -> Params:
    """Every parameter of a run: given (None: not given), else the method's default under the
    convention, else the convention's, else the parameter's own. Checks choices and ranges."""
    chosen = get(method)
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
    return Params(method, convention, values)
