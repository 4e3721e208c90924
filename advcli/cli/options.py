"""The command line's options: those every command shares (inputs, --col, --json, ...), and
those made from their one declaration: a method's parameters (:data:`advcli.methods.PARAMETERS`),
the fields of the options dataclasses (``CriticOptions``, ``ShardOptions``, ``ReportOptions``,
declared with :func:`advcli.params.option`), and ``--from`` with what some frameworks' logs need.
Each group is added to a command's signature, and its values reach the command as one object.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from advcli import progress
from advcli.core.conventions import CONVENTIONS
from advcli.errors import UsageError, did_you_mean
from advcli.methods import PARAMETERS
from advcli.params import OPTION, OptionHelp, Param, number_kind
from advcli.presets import PRESETS, SHARED_WITH_METHODS, PresetOptions
from advcli.presets.base import FROM

InputsArgument = Annotated[
    list[str], typer.Argument(help="Parquet or JSONL files, directories or globs; - for stdin.")
]


Col = Annotated[
    Optional[list[str]],  # noqa: UP045 (typer needs Optional on Python 3.10)
    typer.Option("--col", help="Map a role to a column: --col reward=score (repeatable)."),
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
OutFile = Annotated[
    str,
    typer.Option(
        "--out",
        "-o",
        help="Output .parquet or .jsonl file; - for standard output (JSONL, or Arrow IPC with "
        "--format arrow).",
    ),
]


Format = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--format", help="parquet or jsonl (default: from --out); arrow with --out -."),
]


Force = Annotated[bool, typer.Option(help="Replace an existing output.")]


Nonfinite = Annotated[
    str,
    typer.Option(help="A NaN or infinity bound for a JSONL output: error, or null (counted)."),
]


_RAY = "Beyond one machine (Ray)"


Engine = Annotated[
    str,
    typer.Option(
        rich_help_panel=_RAY,
        help="local, or ray: one task per input Parquet file (or row range of a large one) on a "
        "Ray cluster; other logs (JSONL, --from dumps) are read once into Ray's object store "
        "(annotate, score: --out is then a folder of parts and a manifest; score takes a GPU a "
        "task where the cluster has GPUs; shard writes the same shards from here; needs the "
        "ray extra).",
    ),
]


RayAddress = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        rich_help_panel=_RAY,
        help="The cluster's head (host:port; default: RAY_ADDRESS, else a local Ray on every "
        "core).",
    ),
]


ZeroVarianceTol = Annotated[
    float, typer.Option(min=0.0, help="A group is zero-variance when max - min <= this.")
]


NearTie = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option(
        min=0.0,
        help="A group is a near-tie when its reward std is below this "
        "(default: 0.05 x the log's reward range).",
    ),
]


METHOD_PARAMETERS = (
    "advcli methods lists the methods; advcli methods NAME shows one's parameters, which this "
    "command takes as flags (--lam 0.9)."
)
"""Where a command that runs a method sends its --help reader for the method parameters, which
its --help leaves out (every method's would fill several screens)."""


_CONVENTIONS = (
    ", ".join([*CONVENTIONS][:-1]) + f" or {[*CONVENTIONS][-1]} defaults (default: the "
    "framework's own with --from, else advcli's; seed is advcli's former name)."
)


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


def _injected(
    after: str,
    options: list[inspect.Parameter],
    gather: Callable[[dict[str, Any]], dict[str, Any]],
    gives: tuple[str, ...],
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add ``options`` to a command after its option ``after``; ``gather`` turns their values
    into the keyword arguments ``gives`` that the command takes instead (left out of the
    command line)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        names = {o.name for o in options}
        own = [p for p in signature.parameters.values() if p.name not in gives]
        at = [p.name for p in own].index(after) + 1

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            values = {name: kwargs.pop(name) for name in names}
            command(**kwargs, **gather(values))

        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own[:at], *options, *own[at:]]
        )
        return wrapper

    return decorate


def with_method_parameters(after: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """An option for every method parameter (:data:`advcli.methods.PARAMETERS`), after the
    option ``after``; the command gets those given on the command line as one dict,
    ``params`` (an option left at its default is not given: the method may not take it)."""
    options = [_option(p) for p in PARAMETERS.values() if p.name not in SHARED_WITH_METHODS]
    context = inspect.Parameter(
        _CONTEXT, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=typer.Context
    )  # typer passes the command's context to it: where each value came from

    def gather(values: dict[str, Any]) -> dict[str, Any]:
        return {"params": _given(values)}

    return _injected(after, [*options, context], gather, ("params",))


_CONTEXT = "method_parameters_context"


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The options among ``values`` that the command line gave (the context, under
    :data:`_CONTEXT`, knows where each came from)."""
    ctx = values.pop(_CONTEXT)
    return {
        name: value
        for name, value in values.items()
        if getattr(ctx.get_parameter_source(name), "name", None) != "DEFAULT"
    }


def _preset_options() -> list[inspect.Parameter]:
    """``--from``, then an option for every field of :class:`PresetOptions`; a list or dict
    field is text there (``a,b``; ``a=1,b=0.5``), read by :func:`_presets`."""
    hints = typing.get_type_hints(PresetOptions)
    options = [
        _keyword(
            "from_",
            ("--from",),
            Optional[str],  # noqa: UP045
            f"Read the log as this framework writes it: {', '.join(PRESETS)}.",
        )
    ]
    for f in dataclasses.fields(PresetOptions):
        shown: OptionHelp = f.metadata[OPTION]
        kind = next(
            (k for k in (bool, int) if k in (hints[f.name], *typing.get_args(hints[f.name]))), str
        )
        options.append(
            _keyword(
                f.name,
                (shown.flag,) if shown.flag else (),
                Optional[kind],  # noqa: UP045
                shown.help,
            )
        )
    return options


def _keyword(name: str, decls: tuple[str, ...], kind: Any, help_text: str) -> inspect.Parameter:
    option = typer.Option(*decls, rich_help_panel=FROM, help=help_text)
    return inspect.Parameter(
        name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=None,
        annotation=Annotated[kind, option],
    )


_PRESET_OPTIONS = _preset_options()


def _presets(values: dict[str, Any], runs_method: bool) -> dict[str, Any]:
    """``preset`` and ``preset_options`` from the ``--from`` options."""
    preset = values.pop("from_")
    given = [f"--{k.replace('_', '-')}" for k, v in values.items() if v is not None]
    if runs_method:  # --reward-columns and --reward-weights are gdpo's too
        given = [flag for flag in given if flag[2:].replace("-", "_") not in SHARED_WITH_METHODS]
    if given and preset is None:
        msg = f"{given[0]} applies to a framework's log: add --from (e.g. --from trl)"
        raise UsageError(msg)
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
    options = PresetOptions(
        reward_columns=[c.strip() for c in columns.split(",")] if columns else None,
        reward_weights=weights,
        group_size=values["group_size"],
        reward_key=values["reward_key"],
        merge_repeated_prompts=bool(values["merge_repeated_prompts"]),
    )
    return {"preset": preset, "preset_options": options}


def with_preset_options(
    after: str, *, runs_method: bool = False
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--from`` and the options some frameworks' logs need; the command gets ``preset`` and
    ``preset_options``. ``runs_method``: the command runs a method, which may read some."""

    def gather(values: dict[str, Any]) -> dict[str, Any]:
        return _presets(values, runs_method)

    return _injected(after, _PRESET_OPTIONS, gather, ("preset", "preset_options"))


def _typer_type(hint: Any, optional: bool) -> Any:
    """A field's type as typer reads it: ``Optional[X]`` for ``X | None`` or an option whose
    default is None (typer needs Optional on Python 3.10), else ``X``."""
    if type(None) in typing.get_args(hint):
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        optional = True
    return Optional[hint] if optional else hint  # noqa: UP045


def _field_options(cls: type, prefix: str) -> list[tuple[str, dataclasses.Field[Any]]]:
    """The fields of ``cls`` that are options (:func:`advcli.params.option`), each with the
    name its keyword takes in the command (``prefix`` keeps them apart from the others)."""
    return [(prefix + f.name, f) for f in dataclasses.fields(cls) if OPTION in f.metadata]


def with_options(
    cls: type, after: str, name: str, *, absent_without: str | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """An option for every field of the options dataclass ``cls`` that declares one, after the
    option ``after``; the command gets ``cls(...)`` of their values as ``name``. A field without
    a default is a required option, unless it is ``absent_without``: then, not given, the
    command gets None (``annotate`` without ``--critic``)."""
    hints = typing.get_type_hints(cls)
    fields = _field_options(cls, f"{name}__")
    options = []
    for keyword, f in fields:
        shown: OptionHelp = f.metadata[OPTION]
        hint = hints[f.name]
        default: Any = ...  # typer: required
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING or f.name == absent_without:
            default = None
        flag, number = shown.name_flag(f.name), number_kind(hint)
        declared = functools.partial(shown.range.problem, flag, integer=number is int)
        option = typer.Option(flag, help=shown.help, rich_help_panel=shown.panel,
                              callback=_refused(declared) if number else None)  # fmt: skip
        kind = _typer_type(hint, optional=default is None)
        options.append(
            inspect.Parameter(
                keyword,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=Annotated[kind, option],
            )
        )

    def gather(values: dict[str, Any]) -> dict[str, Any]:
        given = {f.name: values[keyword] for keyword, f in fields}
        if absent_without is not None and given[absent_without] is None:
            return {name: None}
        for _, f in fields:  # a list option given no value: the field's own default
            if given[f.name] is None and f.default_factory is not dataclasses.MISSING:
                given[f.name] = f.default_factory()
        return {name: cls(**given)}

    return _injected(after, options, gather, (name,))
