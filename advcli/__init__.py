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
    advcli.prompts("logs/", from_="verl", band="0.2,0.8", out="band.jsonl")  # each prompt's history
    with advcli.reporting(reporter):            # progress to an advcli.Reporter of yours
        advcli.annotate("logs/", "grpo.parquet", method="grpo")

Each returns a typed result (``AnnotateResult``, ``ScoreResult``, ...; ``audit`` an ``Audit``):
read its fields (``summary.rows_written``), or ``as_dict()`` for what ``--json`` prints.

The functions load on first use: ``import advcli.critic`` alone needs neither polars nor orjson.
A dependency older than advcli needs is then a :class:`advcli.errors.DependencyError` naming it.
"""

from __future__ import annotations

import importlib
import sys
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
        PromptsResult,
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
        prompts,
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
    "PromptsResult",
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
    "prompts",
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
        globals()[name] = found  # looked up once
        return found
    raise AttributeError(f"module 'advcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)  # what tab completion offers: the API
