"""The command line's options: those that only show a result (inputs, --json, --quiet,
--progress), and those made from their one declaration: the fields of each command's options
dataclass (``AnnotateCommand``, ..., declared with :func:`advcli.params.option` in the
command's module, :mod:`advcli.commands`), the groups of options some of them hold
(``CriticOptions``, ``ShardOptions``, ``ReportOptions``, ``PresetOptions``), and a method's
parameters (:data:`advcli.methods.PARAMETERS`). They are added to a command's signature when
the command is made (only the one that runs: :mod:`advcli.cli.runner`), and reach it as the
keywords of its Python function.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from advcli import progress
from advcli.errors import UsageError, did_you_mean
from advcli.methods import PARAMETERS
from advcli.params import OPTION, OptionHelp, Param, number_kind
from advcli.presets import SHARED_WITH_METHODS, PresetOptions

InputsArgument = Annotated[
    list[str], typer.Argument(help="Parquet or JSONL files, directories or globs; - for stdin.")
]


Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No summary or progress on stderr.")]


def _progress_mode(value: str) -> str:
    if value not in progress.MODES:
        hint = did_you_mean(value, progress.MODES)
        raise UsageError(f"--progress {value}: expected one of {', '.join(progress.MODES)}.{hint}")
    return value


ProgressMode = Annotated[
    str,
    typer.Option(
        "--progress",
        callback=_progress_mode,
        envvar="ADVCLI_PROGRESS",
        help="Progress on stderr: bar (one live line), plain (a line per pass over the log and "
        "about every 30 s, for batch jobs' logs), none, or auto: the bar on a terminal, else "
        "plain lines once the work has lasted 10 s.",
    ),
]


def _refused(problem: Callable[[Any], str | None]) -> Callable[[Any], Any]:
    """A typer callback refusing a value where ``problem`` names one: the declared range,
    checked as the command line is read (before the generic check of every number option)."""

    def callback(value: Any) -> Any:
        if value is not None and (found := problem(value)):
            raise UsageError(found)
        return value

    return callback


def _option(param: Param) -> inspect.Parameter:
    """The typer option of one method parameter."""
    kind: Any = param.kind if param.cli_default is not None else Optional[param.kind]  # noqa: UP045
    # hidden: every method's parameters would fill a screen; `advcli methods NAME` shows them
    option = typer.Option(
        rich_help_panel=param.panel,
        help=param.help,
        callback=_refused(param.kind_problem),
        hidden=True,
    )
    return inspect.Parameter(
        param.name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=param.cli_default,
        annotation=Annotated[kind, option],
    )


class _Deferred:
    """A command whose options its options dataclass makes, once the command is made (its
    signature asked for): ``advcli --help`` imports no command's module."""

    def __init__(self, command: Callable[..., None], make: Callable[[], Callable[..., None]]):
        functools.update_wrapper(self, command)
        self._make = make

    @functools.cached_property
    def _made(self) -> Callable[..., None]:
        return self._make()

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self._made)

    def __call__(self, **values: Any) -> None:
        self._made(**values)


def with_options(spec: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The options of the command's options dataclass ``spec`` (``module:Class``), after its
    first parameter (the inputs), and, where it has a ``method``, an option for every method
    parameter (hidden: ``advcli methods NAME`` shows them). The command gets the values of the
    dataclass's fields as one dict, ``options`` (the keywords of its Python function), and the
    method parameters the command line gave as another, ``params``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        def make() -> Callable[..., None]:
            module, _, name = spec.partition(":")
            return _with_fields(command, getattr(importlib.import_module(module), name))

        return _Deferred(command, make)

    return decorate


def _with_fields(command: Callable[..., None], cls: type) -> Callable[..., None]:
    """``command`` with the options of ``cls``'s fields (see :func:`with_options`)."""
    groups = [_Group.of(cls, f) for f in dataclasses.fields(cls) if OPTION in f.metadata]
    runs_method = "method" in {f.name for f in dataclasses.fields(cls)}
    method_options = _method_options() if runs_method else []
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name not in ("options", "params")]
    fields = [option for group in groups for option in group.options]

    @functools.wraps(command)
    def wrapper(**values: Any) -> None:
        params = _given({p.name: values.pop(p.name) for p in method_options})
        if "from_" in values:
            _refuse_without_from(values, runs_method)
        options: dict[str, Any] = {}
        for group in groups:
            options.update(group.value({p.name: values.pop(p.name) for p in group.options}))
        extra = {"params": params} if runs_method else {}
        command(**values, options=options, **extra)

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own[:1], *fields, *own[1:], *method_options]
    )
    return wrapper


@dataclasses.dataclass
class _Group:
    """The options of one field of a command's options dataclass: one option, or those of
    the options dataclass it holds (``nested``), and how their values make the field's."""

    options: list[inspect.Parameter]
    value: Callable[[dict[str, Any]], dict[str, Any]]

    @classmethod
    def of(cls, owner: type, f: dataclasses.Field[Any]) -> _Group:
        shown: OptionHelp = f.metadata[OPTION]
        if shown.nested is PresetOptions:
            return cls(_PRESET_OPTIONS, lambda values: {f.name: _preset_options(values)})
        if shown.nested is not None:
            return _nested(f.name, shown.nested, shown.absent_without)
        (option,) = _field_options(owner, [f], "")
        return cls([option], lambda values: values)


def _field_options(
    cls: type, fields: list[dataclasses.Field[Any]], prefix: str, absent_without: str | None = None
) -> list[inspect.Parameter]:
    """The typer options of ``fields`` of ``cls``, each named ``prefix`` + the field's name. A
    field without a default is a required option, unless it is ``absent_without``."""
    hints = typing.get_type_hints(cls)
    options = []
    for f in fields:
        shown: OptionHelp = f.metadata[OPTION]
        hint = hints[f.name]
        default: Any = ...  # typer: required
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING or f.name == absent_without:
            default = None
        flag, number = shown.name_flag(f.name), number_kind(hint)
        declared = functools.partial(shown.range.problem, flag, integer=number is int)
        option = typer.Option(
            flag,
            *([shown.short] if shown.short else []),
            help=shown.help,
            rich_help_panel=shown.panel,
            hidden=shown.hidden,
            callback=_refused(declared) if number else None,
        )
        kind = _typer_type(hint, optional=default is None)
        options.append(
            inspect.Parameter(
                prefix + f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=Annotated[kind, option],
            )
        )
    return options


def _nested(name: str, cls: type, absent_without: str | None) -> _Group:
    """The options of the options dataclass ``cls`` that the field ``name`` holds; not given
    ``absent_without``, the field is None (``annotate`` without ``--critic``)."""
    fields = [f for f in dataclasses.fields(cls) if OPTION in f.metadata]
    prefix = f"{name}__"  # apart from the command's own options

    def value(values: dict[str, Any]) -> dict[str, Any]:
        given = {f.name: values[prefix + f.name] for f in fields}
        if absent_without is not None and given[absent_without] is None:
            return {name: None}
        for f in fields:  # a list option given no value: the field's own default
            if given[f.name] is None and f.default_factory is not dataclasses.MISSING:
                given[f.name] = f.default_factory()
        return {name: cls(**given)}

    return _Group(_field_options(cls, fields, prefix, absent_without), value)


def _method_options() -> list[inspect.Parameter]:
    """An option for every method parameter (:data:`advcli.methods.PARAMETERS`) but those
    a framework's reader shares, and the context that says which the command line gave."""
    options = [_option(p) for p in PARAMETERS.values() if p.name not in SHARED_WITH_METHODS]
    context = inspect.Parameter(
        _CONTEXT, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=typer.Context
    )  # typer passes the command's context to it: where each value came from
    return [*options, context]


_CONTEXT = "method_parameters_context"


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The method parameters among ``values`` that the command line gave (an option left at
    its default is not given: the method may not take it; the context, under
    :data:`_CONTEXT`, knows where each came from)."""
    if not values:
        return {}
    ctx = values.pop(_CONTEXT)
    return {
        name: value
        for name, value in values.items()
        if getattr(ctx.get_parameter_source(name), "name", None) != "DEFAULT"
    }


def _preset_text_options() -> list[inspect.Parameter]:
    """An option for every field of :class:`PresetOptions`; a list or dict field is text
    there (``a,b``; ``a=1,b=0.5``), read by :func:`_preset_options`."""
    hints = typing.get_type_hints(PresetOptions)
    options = []
    for f in dataclasses.fields(PresetOptions):
        shown: OptionHelp = f.metadata[OPTION]
        kind = next(
            (k for k in (bool, int) if k in (hints[f.name], *typing.get_args(hints[f.name]))), str
        )
        option = typer.Option(
            *((shown.flag,) if shown.flag else ()), rich_help_panel=shown.panel, help=shown.help
        )
        options.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=None,
                annotation=Annotated[Optional[kind], option],  # noqa: UP045
            )
        )
    return options


_PRESET_OPTIONS = _preset_text_options()


def _preset_options(values: dict[str, Any]) -> PresetOptions:
    """:class:`PresetOptions` of their options' text."""
    weights: dict[str, float] = {}
    for item in (values["reward_weights"] or "").split(",") if values["reward_weights"] else []:
        name, sep, weight = item.partition("=")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            msg = f"--reward-weights {item!r}: expected NAME=WEIGHT. Hint: acc=1,fmt=0.5"
            raise UsageError(msg) from None
        if not sep:
            raise UsageError(f"--reward-weights {item!r}: expected NAME=WEIGHT. Hint: acc=1")
    columns = values["reward_columns"]
    return PresetOptions(
        reward_columns=[c.strip() for c in columns.split(",")] if columns else None,
        reward_weights=weights,
        group_size=values["group_size"],
        reward_key=values["reward_key"],
        merge_repeated_prompts=bool(values["merge_repeated_prompts"]),
    )


def _refuse_without_from(values: dict[str, Any], runs_method: bool) -> None:
    """Refuse the options of a framework's log among the command line's ``values`` without
    ``--from``, but those a method reads too where the command ``runs_method``
    (--reward-columns and --reward-weights: gdpo's)."""
    given = [
        f"--{p.name.replace('_', '-')}"
        for p in _PRESET_OPTIONS
        if values[p.name] is not None and not (runs_method and p.name in SHARED_WITH_METHODS)
    ]
    if given and values["from_"] is None:
        msg = f"{given[0]} applies to a framework's log: add --from (e.g. --from trl)"
        raise UsageError(msg)


def _typer_type(hint: Any, optional: bool) -> Any:
    """A field's type as typer reads it: ``Optional[X]`` for ``X | None`` or an option whose
    default is None (typer needs Optional on Python 3.10), else ``X``; the first type of a
    union (``str`` of ``str | os.PathLike[str]``)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        optional = optional or type(None) in args
        hint = next(arg for arg in args if arg is not type(None))
    return Optional[hint] if optional else hint  # noqa: UP045
