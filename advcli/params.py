"""Run parameters, each declared once as a :class:`Param`.

A method module declares the parameters it introduces (name, type, default, help, choices, a
check); the registry (:mod:`advcli.methods`) gathers them, and everything else is derived from
that one declaration: the flags of the commands that run a method (:mod:`advcli.cli.options`),
``shard --param KEY=VALUE``, the keyword arguments the public API accepts (its ``**params``,
checked against the declarations when resolved), and the ``params`` recorded in every output's
metadata. Each command's own options are declared the same way, as the fields of its options
dataclass (``AnnotateCommand``, ..., holding groups such as ``CriticOptions``), with
:func:`option` on each: the command line's options and the Python function's keywords
(:func:`takes_options`, :func:`command_options`) are both made from it.

A run's parameters are resolved once into an immutable :class:`Params` holding exactly those the
method takes: a parameter the user did not give takes the method's default, else the
convention's (``--convention``), else its own; one the method does not take is refused when the
user gave it, and dropped when only a convention or a preset has a value for it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
import stat
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from advcli.errors import UsageError, did_you_mean

Check = Callable[[Any, Mapping[str, Any]], "str | None"]
T = TypeVar("T")
R = TypeVar("R")
INT64 = 1 << 63  # an integer option beyond int64 cannot index or count anything


@dataclass(frozen=True)
class Range:
    """The values a number parameter or option takes, declared with it: always finite (and an
    integer within int64), from ``low`` to ``high`` where given, an end left out where it is
    ``open``: ``Range(0, 1)`` is [0, 1], ``Range(0, low_open=True)`` is > 0."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        """Whether a finite ``value`` lies within."""
        low, high = self.low, self.high
        if low is not None and (value <= low if self.low_open else value < low):
            return False
        return high is None or (value < high if self.high_open else value <= high)

    def expected(self, integer: bool, finite: bool = False) -> str:
        """What the range takes, as "a number in [0, 1)" or "a positive integer" (``finite``:
        "a finite number ...", said to an infinity or NaN)."""
        noun = "an integer" if integer else "a finite number" if finite else "a number"
        low, high = self.low, self.high
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{noun} in {left}{low:g}, {high:g}{right}"
        if integer and low == 1 and not self.low_open:
            return "a positive integer"
        if low is not None:
            return f"{noun} {'>' if self.low_open else '>='} {low:g}"
        if high is not None:
            return f"{noun} {'<' if self.high_open else '<='} {high:g}"
        return "an integer" if integer else "a finite number"

    def problem(self, name: str, value: Any, integer: bool) -> str | None:
        """What is wrong with ``value`` for the option ``name`` (written as given: `` `gamma` ``
        in a library message), or None: not a number (an integer for ``integer``), not finite,
        beyond int64 or out of the range."""
        if not _is_number(value, integer):
            return f"{name} {value!r}: expected {self.expected(integer)}"
        if integer and not -INT64 <= int(value) < INT64:
            return f"{name} {value}: too large (at most {INT64 - 1})"
        if not math.isfinite(value):
            return f"{name} {value}: expected {self.expected(integer, finite=True)}"
        if not self.holds(value):
            return f"{name} {value}: expected {self.expected(integer)}"
        return None


def _is_number(value: Any, integer: bool) -> bool:
    """Whether ``value`` is a number (an integer for ``integer``; numpy's too), not a bool."""
    kind = numbers.Integral if integer else numbers.Real
    return isinstance(value, kind) and not isinstance(value, bool)


ANY = Range()
"""Every finite number: the range of a number parameter that declares none."""


@dataclass(frozen=True)
class Param:
    """One run parameter: ``--name-with-dashes`` on the command line, ``name`` in Python.

    ``kind`` is the type the command line reads (int, float, str or bool). ``conventional``
    parameters have no default on the command line: the method or the convention fills them.
    ``parse`` turns a given value (text, or a number from Python) into the parameter's value
    where ``kind`` alone does not (``--lam 0.9``, ``--lam adaptive``); ``range`` is what a
    number takes (every number is finite, an integer within int64, whichever way it is given);
    ``check(value, values)`` returns the problem with a resolved value that the other
    parameters make (``values`` holds every parameter of the run), or None.
    """

    name: str
    kind: type
    default: Any
    help: str
    panel: str
    choices: tuple[str, ...] = ()
    conventional: bool = False
    parse: Callable[[Any], Any] | None = None
    check: Check | None = None
    range: Range = ANY

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def cli_default(self) -> Any:
        """The default shown on the command line (None: filled in at resolution)."""
        return None if self.conventional else self.default

    def from_text(self, text: str) -> Any:
        """The value of ``KEY=VALUE`` text (``shard --param``)."""
        if self.kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        return self.kind(text)

    @property
    def expected(self) -> str:
        """What :meth:`from_text` takes, for an error message."""
        return {int: "an integer", float: "a number", bool: "true or false"}.get(self.kind, "text")

    def coerce(self, value: Any) -> Any:
        """A given value as this parameter's type (an int for a float, text from the CLI)."""
        if value is None:
            return None
        if self.parse is not None:
            return self.parse(value)
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def kind_problem(self, value: Any) -> str | None:
        """What is wrong with a value whatever the other parameters: not one of the choices,
        not a number of the declared range; or None (None, a value not given, too)."""
        if value is None:
            return None
        if self.choices and value not in self.choices:
            return f"`{self.name}` {value!r}: expected one of {', '.join(self.choices)}"
        parsed_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if self.kind in (int, float) or parsed_number:  # (--lam: a number, or 'adaptive')
            return self.range.problem(f"`{self.name}`", value, integer=self.kind is int)
        return None


class UndeclaredParameter(AttributeError):
    """A method read a parameter it does not declare: a bug in the method, not in the input."""


class Named(Protocol):
    """What the parameters need of their method: its name (a registered ``Method`` has one;
    the methods sit above this module, which names none of them)."""

    @property
    def name(self) -> str: ...


EstimatorT = TypeVar("EstimatorT", bound=Named)


class Params(Generic[EstimatorT]):
    """The parameters of one run, resolved: read them as attributes (``p.gamma``).

    They hold exactly the parameters the method takes (its own and the shared ones it accepts,
    :attr:`advcli.methods.Method.takes`); reading any other raises
    :class:`UndeclaredParameter`, so a method cannot depend on a value it does not declare.
    ``name in p`` says whether the method takes ``name``. ``estimator`` is the method itself,
    so that code holding the parameters never looks it up by name again; ``method`` is its
    name. Immutable; ``as_dict()`` is what outputs record as their ``params``.
    """

    __slots__ = ("_values", "convention", "estimator", "method")

    estimator: EstimatorT
    method: str
    convention: str

    def __init__(self, estimator: EstimatorT, convention: str, values: Mapping[str, Any]):
        object.__setattr__(self, "estimator", estimator)
        object.__setattr__(self, "method", estimator.name)
        object.__setattr__(self, "convention", convention)
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            if name.startswith("__"):  # copy and pickle probe for hooks
                raise AttributeError(name) from None
            msg = f"{self.method} read the parameter {name!r}, which it does not declare"
            raise UndeclaredParameter(msg) from None

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Params are immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return Params, (self.estimator, self.convention, dict(self._values))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Params) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.as_dict().items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Params({inner})"

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "convention": self.convention, **self._values}


_PARAM_EXAMPLE = "`param=['gamma=0.99']`"


def parse_assignments(items: list[str] | None, params: Mapping[str, Param]) -> dict[str, Any]:
    """``["gamma=0.99", "strict=true"]`` (``shard --param``) as typed values of ``params``."""
    given: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        name = key.strip().lstrip("-").replace("-", "_")
        if not sep:
            raise UsageError(f"`param` {item!r}: expected KEY=VALUE. Hint: {_PARAM_EXAMPLE}")
        if name not in params:
            keys = [n.replace("_", "-") for n in params]
            msg = (
                f"`param` {item!r}: no parameter {key.strip()!r}."
                f"{did_you_mean(name.replace('_', '-'), keys)} Parameters: {', '.join(keys)}. "
                f"Hint: {_PARAM_EXAMPLE}"
            )
            raise UsageError(msg)
        try:
            given[name] = params[name].from_text(raw)
        except ValueError:
            example = {int: "1", float: "0.5", bool: "true"}.get(params[name].kind, "...")
            hint = [f"{key}={example}"]
            msg = f"`param` {item!r}: expected {params[name].expected}. Hint: `param={hint}`"
            raise UsageError(msg) from None
    return given


OPTION = "advcli_option"
"""The key of a field's metadata under which :func:`option` keeps how the command line shows it."""


@dataclass(frozen=True)
class OptionHelp:
    """How the command line shows one field of an options dataclass (a command's, such as
    ``AnnotateCommand``, or a group of its options, such as ``CriticOptions``): its help, its
    flag (default ``--field-name``) and ``short`` one, its panel, whether ``hidden``, and for a
    number, its range (:func:`check_fields` holds the field to it, from the command line and
    from Python alike). A field whose value is itself an options dataclass is ``nested``: its
    own fields are the options (all absent, None, where ``absent_without`` is not given). The
    CLI makes each option from it (:mod:`advcli.cli.options`): declared once, here."""

    help: str
    flag: str | None = None
    panel: str | None = None
    range: Range = ANY
    short: str | None = None
    hidden: bool = False
    nested: type | None = None
    absent_without: str | None = None

    def name_flag(self, name: str) -> str:
        """The flag of the field ``name``."""
        return self.flag or "--" + name.replace("_", "-")


def option(
    help: str,
    *,
    flag: str | None = None,
    panel: str | None = None,
    range: Range = ANY,
    short: str | None = None,
    hidden: bool = False,
) -> dict[str, OptionHelp]:
    """A field's metadata that makes it a command-line option: ``field(default=...,
    metadata=option("What it does."))``. A field without it is no option (a keyword of the
    Python API alone)."""
    return {OPTION: OptionHelp(help, flag, panel, range, short, hidden)}


def options_of(cls: type, *, absent_without: str | None = None) -> dict[str, OptionHelp]:
    """A field's metadata that makes the fields of the options dataclass ``cls`` options of the
    command (``annotate``'s ``critic``: the ``--critic`` options); ``absent_without``: the
    field whose option, not given, leaves the whole group None (``--critic``'s path)."""
    return {OPTION: OptionHelp("", nested=cls, absent_without=absent_without)}


def command_options(
    cls: type[T],
    command: str,
    keywords: Mapping[str, Any],
    parameters: Collection[str] = (),
) -> tuple[T, dict[str, Any]]:
    """The options dataclass ``cls`` of ``command`` made of the ``keywords`` it was called
    with, and the keywords left: a method's ``parameters`` where the command runs one (each
    resolved, and checked against the method, when the job is made). Any other keyword is
    refused, and so is a required field left out."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = [k for k in keywords if k not in names and k not in parameters]
    if unknown:
        known = [*names, *parameters]
        also = ", and a method's parameters (advcli.describe_method)" if parameters else ""
        msg = (
            f"{command}() takes no keyword {unknown[0]!r}.{did_you_mean(unknown[0], known)} "
            f"Keywords: {', '.join(names)}{also}"
        )
        raise UsageError(msg)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in keywords:
            raise UsageError(f"{command}() needs the keyword {f.name!r}")
    given = {k: v for k, v in keywords.items() if k in names}
    rest = {k: v for k, v in keywords.items() if k not in names}
    return cls(**given), rest


def takes_options(cls: type, *, params: bool) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a command's function, which takes ``**keywords``, the signature its options
    dataclass ``cls`` makes: its positional parameters, then each field of ``cls`` (a keyword
    unless positional already), then ``**params`` where it takes a method's parameters; so
    that ``help()`` and ``inspect.signature`` show what it takes."""

    def decorate(function: Callable[..., R]) -> Callable[..., R]:
        own = inspect.signature(function).parameters.values()
        positional = [p for p in own if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        keywords = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=_field_default(f),
                annotation=f.type,
            )
            for f in dataclasses.fields(cls)
            if f.name not in {p.name for p in positional}
        ]
        more = [inspect.Parameter("params", inspect.Parameter.VAR_KEYWORD)] if params else []
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [*positional, *keywords, *more],
            return_annotation=inspect.signature(function).return_annotation,
        )
        return function

    return decorate


def _field_default(f: dataclasses.Field[Any]) -> Any:
    """A field's default as a keyword shows it (a list's: None, its empty value)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return None
    return inspect.Parameter.empty


def check_fields(options: Any) -> None:
    """Refuse a number field of the options dataclass ``options`` outside its declared range
    (every number finite, an integer within int64), naming its keyword: a :class:`UsageError`.
    The dataclasses call it on creation (``__post_init__``)."""
    hints = typing.get_type_hints(type(options))
    for f in dataclasses.fields(options):
        shown: OptionHelp | None = f.metadata.get(OPTION)
        value, number = getattr(options, f.name), number_kind(hints[f.name])
        if shown is None or value is None or number is None:
            continue
        if problem := shown.range.problem(f"`{f.name}`", value, integer=number is int):
            raise UsageError(problem)


def number_kind(hint: Any) -> type | None:
    """int or float for a field typed so (or ``X | None``); None for any other type."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = (hint, *typing.get_args(hint)) if union else (hint,)
    return next((k for k in (int, float) if k in kinds), None)


def check_option_file(option: str, path: str, usual: str) -> None:
    """Refuse what the option ``option`` (its keyword: ``critic``) names unless it is a regular
    file, saying what it is instead: nothing, a folder (naming the ``usual`` file in it, where it
    holds one), or a FIFO or a device (read once, or never: no file to load)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"`{option}={path!r}`: no such file. Hint: give a {usual}") from None
    except OSError as exc:
        msg = f"`{option}={path!r}`: cannot open it ({exc.strerror or exc}). Hint: give a {usual}"
        raise UsageError(msg) from None
    if stat.S_ISDIR(mode):
        inside = os.path.join(path, usual)
        holds = os.path.isfile(inside)
        hint = f"`{option}={inside!r}`" if holds else f"give a {usual}"
        msg = f"`{option}={path!r}`: a folder{'' if holds else f' without a {usual}'}. Hint: {hint}"
        raise UsageError(msg)
    if not stat.S_ISREG(mode):
        what = "not a regular file (a FIFO, a device or a socket)"
        raise UsageError(f"`{option}={path!r}`: {what}. Hint: give a {usual}")
