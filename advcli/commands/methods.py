"""``advcli methods``: the registered methods, a line each, or one method's parameters (with
their defaults under each convention), its formula and the columns it needs and writes."""

from __future__ import annotations

import inspect
from typing import Any

from advcli import methods
from advcli.core.conventions import CONVENTIONS, DEFAULT
from advcli.io.schema import role_shown
from advcli.methods import Method
from advcli.results import MethodDescription, MethodLine, MethodList, MethodParameter


def needs(method: Method[Any]) -> list[str]:
    """The columns ``method`` needs: its roles, then what else (columns an option names)."""
    roles = [role_shown(role) for role in method.roles]
    return [*roles, *([method.also_needs] if method.also_needs else [])]


def list_methods() -> MethodList:
    """Every registered method (plugins' too) with the advantage it computes and its needs."""
    return MethodList(
        [MethodLine(name, m.summary, needs(m)) for name, m in methods.REGISTRY.items()]
    )


def describe_method(name: str) -> MethodDescription:
    """The method called ``name``: its formula, columns and parameters; an unknown name is a
    :class:`~advcli.errors.UsageError` listing the methods."""
    method = methods.get(name)
    by_convention = {conv: methods.default_values(method, conv) for conv in CONVENTIONS}
    own = {param.name for param in method.parameters}
    parameters = []
    for param_name, default in by_convention[DEFAULT].items():
        param = methods.PARAMETERS[param_name]
        differs = {
            conv: values[param_name]
            for conv, values in by_convention.items()
            if values[param_name] != default
        }
        parameters.append(
            MethodParameter(
                flag=param.flag,
                name=param.name,
                type=param.kind.__name__,
                choices=list(param.choices),
                default=default,
                by_convention=differs,
                help=param.help,
                shared=param.name not in own,
            )
        )
    parameters.sort(key=lambda p: p.shared)  # its own first, then the modifiers
    own_doc = type(method).__dict__.get("__doc__")  # its own, not a base class's
    return MethodDescription(
        name=method.name,
        summary=method.summary,
        definition=inspect.cleandoc(own_doc) if own_doc else "",
        needs=needs(method),
        outputs=list(getattr(method, "outputs", ())),  # a plugin may not declare them
        parameters=parameters,
    )
