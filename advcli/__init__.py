"""advcli: offline advantages for logged LLM reinforcement-learning rollouts.

The public API, one function per command (see :mod:`advcli.api`)::

    import advcli

    advcli.annotate("logs/", "gae.parquet", method="gae", gamma=0.99)
    advcli.annotate_table(table, method="grpo")  # a pyarrow Table in, annotated out
    advcli.audit("logs/").report
    advcli.schema("logs/")                     # what `advcli schema` shows (or advcli.describe)
    advcli.describe_method("gae")              # `advcli methods gae`; list_methods(): them all
    advcli.report("logs/", "report.html", method="grpo")  # needs advcli[report]
    advcli.score("logs/", "scored.parquet", "critic.onnx")
    advcli.shard("logs/", "shards/", method="grpo")
    advcli.verify("shards/")
    with advcli.reporting(reporter):            # progress to an advcli.Reporter of yours
        advcli.annotate("logs/", "grpo.parquet", method="grpo")

Each returns a typed result (``AnnotateResult``, ``ScoreResult``, ...; ``audit`` an ``Audit``):
read its fields (``summary.rows_written``), or ``as_dict()`` for what ``--json`` prints.

The functions load on first use: ``import advcli.critic`` alone needs neither polars nor orjson.
A dependency older than advcli needs is then a :class:`advcli.errors.DependencyError` naming it.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from advcli._version import __version__

if TYPE_CHECKING:
    from advcli.api import (
        AnnotateResult,
        Audit,
        CheckResult,
        CriticOptions,
        Description,
        MethodDescription,
        MethodLine,
        MethodList,
        MethodParameter,
        Reporter,
        ReportOptions,
        ReportResult,
        ScoreResult,
        ShardOptions,
        ShardResult,
        Verification,
        annotate,
        annotate_table,
        audit,
        check,
        describe,
        describe_method,
        list_methods,
        report,
        reporting,
        schema,
        score,
        shard,
        verify,
    )

__all__ = [
    "AnnotateResult",
    "Audit",
    "CheckResult",
    "CriticOptions",
    "Description",
    "MethodDescription",
    "MethodLine",
    "MethodList",
    "MethodParameter",
    "ReportOptions",
    "ReportResult",
    "Reporter",
    "ScoreResult",
    "ShardOptions",
    "ShardResult",
    "Verification",
    "__version__",
    "annotate",
    "annotate_table",
    "audit",
    "check",
    "describe",
    "describe_method",
    "list_methods",
    "report",
    "reporting",
    "schema",
    "score",
    "shard",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        if "advcli.api" not in sys.modules:  # first use: are the dependencies recent enough?
            importlib.import_module("advcli.versions").check()
        found = getattr(importlib.import_module("advcli.api"), name)
        if isinstance(found, types.FunctionType):
            found = _in_python_words(found)
        globals()[name] = found  # looked up once
        return found
    raise AttributeError(f"module 'advcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)  # what tab completion offers: the API


def _in_python_words(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, whose errors name its keyword arguments where the command line's name
    its options (``force=True``, not ``--force``)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except importlib.import_module("advcli.errors").AdvcliError as exc:
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (python_words(exc.args[0]), *exc.args[1:])
            raise

    return wrapper


_KEYWORDS = {"from": "from_"}


def python_words(message: str) -> str:
    """A message for a Python caller: ``--force`` as ``force=True``, ``--col R=C`` as
    ``col=['R=C']``, any other ``--option-name`` as its keyword ``option_name``.

    >>> python_words("Hint: pass --force, or --col reward=score, or drop --batch-rows")
    "Hint: pass force=True, or col=['reward=score'], or drop batch_rows"
    >>> python_words("--from 'verll': unknown framework")
    "from_='verll': unknown framework"
    """
    message = message.replace("--force", "force=True")
    message = re.sub(r"--col ([^\s=]+=[^\s,.;:)]+)", r"col=['\1']", message)

    def keyword(match: re.Match[str]) -> str:
        name = match.group(1)
        given = f"={match.group(2)}" if match.group(2) else ""
        return _KEYWORDS.get(name, name.replace("-", "_")) + given

    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)(?: ('[^']*'))?", keyword, message)
