"""The registry of methods: every estimator ``--method`` can name, and their parameters.

Each family lives in one module and declares its methods and the parameters they introduce:

- :mod:`advcli.methods.group`: outcome baselines (grpo, rloo, opo, gpg, sppo, batch-mean, ...);
- :mod:`advcli.methods.gdpo`: several reward columns, normalised apart and summed (gdpo);
- :mod:`advcli.methods.quantile`: the quantile baseline (quantile, QAE);
- :mod:`advcli.methods.focal`: GRPO weighted by the group's success rate (focal-grpo, F-GRPO);
- :mod:`advcli.methods.agents`: baselines scoped by agent role (hierarchical-grpo, rae);
- :mod:`advcli.methods.steps`: per-step credit for agents (gigpo, step-reinforce, ...);
- :mod:`advcli.methods.length`: GRPO with prime-rl's length penalty (grpo-length);
- :mod:`advcli.methods.process`: step rewards (grpo-process);
- :mod:`advcli.methods.temporal`: per-token estimators (mc, td, gae, reinforce-pp, remax, ...);
- :mod:`advcli.methods.distill`: on-policy distillation (opd);
- :mod:`advcli.methods.signals`: what every method takes (``--kl-coef``, ``--opd-coef``);
- :mod:`advcli.methods.base`: the :class:`Method` protocol they follow.

To add an estimator, write its class in its family's module (or a module of its own, declaring
the parameters it introduces in its ``parameters``) and :func:`register` an instance below; or,
outside advcli, in a package of your own that names the class under the entry-point group
``advcli.methods`` (:func:`load_plugins`). The ``--method`` choices, the options of
``annotate``, ``shard --param``, the required-column checks, ``schema``'s list of what a log
can run and the README's method table all come from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advcli import installed
from advcli.core.conventions import CONVENTIONS, DEFAULT, canonical
from advcli.errors import PluginError, UsageError, did_you_mean
from advcli.io.schema import role_shown
from advcli.methods import (
    agents,
    distill,
    focal,
    gdpo,
    group,
    ktae,
    length,
    process,
    quantile,
    signals,
    steps,
    temporal,
)
from advcli.methods.base import Method, Plan, TokenPass, sum_rows
from advcli.params import Param, Params

if TYPE_CHECKING:
    from advcli.io.schema import Roles

REGISTRY: dict[str, Method[Any]] = {}
"""Every method, by name, in the order ``--help`` lists them."""

PARAMETERS: dict[str, Param] = {}
"""Every run parameter, by name, in the order ``--help`` lists them."""

__all__ = [
    "PARAMETERS",
    "PLUGINS",
    "REGISTRY",
    "Method",
    "Plan",
    "TokenPass",
    "check_convention",
    "default_values",
    "get",
    "load_plugins",
    "missing_roles",
    "register",
    "resolve",
    "sum_rows",
    "takes",
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
    for param in method.takes:
        known = PARAMETERS.setdefault(param.name, param)
        if known is not param:
            raise ValueError(f"{method.name}: another parameter is called {param.name!r}")
    REGISTRY[method.name] = method


# The built-in methods, after the parameters in the order their families declare them.
# KL and distillation apply to every method.
PARAMETERS.update(
    {p.name: p for p in (*group.PARAMETERS, *temporal.PARAMETERS, *signals.PARAMETERS)}
)
FAMILIES = (group, quantile, focal, ktae, agents, steps, gdpo, length, process, temporal, distill)
for _method in (m for family in FAMILIES for m in family.METHODS):
    register(_method)

PLUGINS = "advcli.methods"
"""The entry-point group of third-party estimators."""


def load_plugins() -> None:
    """Register the estimators of installed packages: each entry point of the group
    :data:`PLUGINS` names a :class:`Method` subclass (or an instance), e.g. in the package's
    ``pyproject.toml``::

        [project.entry-points."advcli.methods"]
        scaled-mean = "advcli_toy:ScaledMean"

    A plugin that fails to load, or clashes with a method or parameter, is a
    :class:`PluginError` naming it."""
    for point in installed.entry_points(PLUGINS):
        where = f"plugin {point.name!r} ({point.value}, entry point group {PLUGINS})"
        try:
            loaded = point.load()
            method = loaded() if isinstance(loaded, type) else loaded
        except Exception as exc:  # whatever a third party's import raises
            raise PluginError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        if not isinstance(method, Method):
            raise PluginError(f"{where} is not an advcli Method: {type(method).__name__}")
        try:
            register(method)
        except ValueError as exc:
            raise PluginError(f"{where}: {exc}") from None


load_plugins()


KNOWN_AS = {
    "ppo": "gae",
    "reinforce++": "reinforce-pp",
    "reinforce-plus-plus": "reinforce-pp",
    "reinforce-plus-plus-baseline": "reinforce-pp-baseline",
    "dapo": "grpo",
}
"""The methods' names in the frameworks' configs (verl's ``adv_estimator``), for a hint."""


def get(name: str) -> Method[Any]:
    """The method called ``name``; a :class:`UsageError` listing them all otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = KNOWN_AS.get(name.lower().replace("_", "-"))
        hint = f" Did you mean {known!r}?" if known else did_you_mean(name, REGISTRY)
        msg = f"unknown method {name!r}.{hint} Methods: {', '.join(REGISTRY)}"
        raise UsageError(msg) from None


def missing_roles(method: Method[Any], roles: Roles) -> list[str]:
    """The columns ``method`` needs that a log with ``roles`` lacks."""
    return [role_shown(role) for role in method.roles if roles[role] is None]


def without_tokens() -> str:
    """What runs on a log without token ids, for a hint."""
    names = [name for name, m in REGISTRY.items()
             if "input_ids" not in m.needs(p := resolve(m)) or m.without_tokens(p)]  # fmt: skip
    return (
        f"{', '.join(names[:-1])} and {names[-1]} need none, without options that sum over tokens"
    )


def verdict(missing: list[str]) -> str:
    """ "yes", or what is missing: ``needs input_ids, values``."""
    critic = " (or `critic`)" if missing == ["values"] else ""
    return f"needs {', '.join(missing)}{critic}" if missing else "yes"


def what_runs(roles: Roles) -> dict[str, str]:
    """For every method, whether a log with ``roles`` can run it: "yes", or what it lacks."""
    return {name: verdict(missing_roles(m, roles)) for name, m in REGISTRY.items()}


def resolve(
    method: str | Method[Any], convention: str | None = None, **given: Any
) -> Params[Method[Any]]:
    """The parameters of a run of ``method`` (a method, or its name): exactly those it takes
    (:attr:`Method.takes`).

    Each is the value given (None: not given), else the method's default under the convention
    (None: advcli's own), else the convention's, else the parameter's own. A parameter given
    that the method does not take is refused (it would be recorded but not applied); the
    convention's values for names the method does not take are dropped. Checks choices and
    ranges."""
    chosen = method if isinstance(method, Method) else get(method)
    convention = check_convention(convention)
    unknown = [name for name in given if name not in PARAMETERS]
    if unknown:
        names = ", ".join(f"`{name}`" for name in PARAMETERS)
        hint = did_you_mean(unknown[0], PARAMETERS)
        msg = f"unknown parameter {unknown[0]!r}.{hint} Parameters: {names}"
        raise UsageError(msg)
    takes = {param.name for param in chosen.takes}
    foreign = [name for name, value in given.items() if value is not None and name not in takes]
    if foreign:
        names = ", ".join(f"`{name}`" for name in PARAMETERS if name in takes)
        msg = f"`{foreign[0]}` does not apply to {chosen.name}; it takes: {names}"
        raise UsageError(msg)
    defaults = default_values(chosen, convention)
    values: dict[str, Any] = {}
    for name, default in defaults.items():
        value = PARAMETERS[name].coerce(given.get(name))
        values[name] = default if value is None else value
    taken = [PARAMETERS[name] for name in values]
    # each value on its own (the choices first), then what the values say together
    for param in [p for p in taken if p.choices] + [p for p in taken if not p.choices]:
        if problem := param.kind_problem(values[param.name]):
            raise UsageError(problem)
    for param in taken:
        if param.check is not None and (problem := param.check(values[param.name], values)):
            raise UsageError(problem)
    return Params(chosen, convention, values)


def default_values(method: Method[Any], convention: str) -> dict[str, Any]:
    """What each parameter ``method`` takes is where none is given, in ``--help``'s order:
    the method's default under ``convention`` (a name), else the convention's, else the
    parameter's own."""
    conv = CONVENTIONS[convention]
    method_defaults = method.defaults(conv)
    takes = {param.name for param in method.takes}
    values: dict[str, Any] = {}
    for name, param in PARAMETERS.items():  # in --help's order, whatever the method's
        if name not in takes:
            continue
        if param.conventional:
            values[name] = method_defaults.get(name, getattr(conv, name, param.default))
        else:
            values[name] = param.coerce(param.default)
    return values


def check_convention(convention: str | None) -> str:
    """The name of ``convention`` (None: advcli's own), its alias resolved; a
    :class:`UsageError` listing them all if it is none of them."""
    name = canonical(convention or DEFAULT)
    if name not in CONVENTIONS:
        hint = did_you_mean(name, CONVENTIONS)
        msg = f"unknown convention {name!r}.{hint} Conventions: {', '.join(CONVENTIONS)}"
        raise UsageError(msg)
    return name


def takes(method: str, name: str) -> bool:
    """Whether ``method`` takes the parameter ``name``."""
    return any(param.name == name for param in get(method).takes)
