"""advcli in Python: one function per command, and the same on a table in memory.

Each command's function lives in its own module (:mod:`advcli.commands`); the command line
(:mod:`advcli.cli`) calls the same functions. Each takes what the command takes, as keyword
arguments, and returns a typed result (:mod:`advcli.results`) whose ``as_dict()`` is what the
command prints with ``--json``::

    import advcli

    summary = advcli.annotate("logs/", "gae.parquet", method="gae", gamma=0.99, lam=0.95)
    summary.rows_written, summary.advantage_mean
    table = advcli.annotate_table(arrow_table, method="grpo", convention="verl")
    report = advcli.audit("logs/").report

A method's parameters (``gamma``, ``scale``, ``singleton``, ...) are the ``annotate`` options
with ``-`` written ``_``; ``None`` (or leaving one out) takes the method's and the convention's
default, and one the method does not take is refused. Errors are
:class:`~advcli.errors.AdvcliError` s, with the message the CLI prints. ``describe`` is
``schema`` under the name it had first.
"""

from __future__ import annotations

from advcli.commands.annotate import annotate, annotate_table
from advcli.commands.audit import audit
from advcli.commands.check import check
from advcli.commands.methods import describe_method, list_methods
from advcli.commands.prompts import prompts
from advcli.commands.report import report
from advcli.commands.schema import schema
from advcli.commands.score import score
from advcli.commands.shard import shard
from advcli.commands.verify import verify
from advcli.critic.options import CriticOptions
from advcli.progress import Reporter, reporting
from advcli.reports import ReportOptions
from advcli.results import (
    AnnotateResult,
    CheckResult,
    Description,
    MethodDescription,
    MethodLine,
    MethodList,
    MethodParameter,
    PromptsResult,
    ReportResult,
    ScoreResult,
    ShardResult,
    Verification,
)
from advcli.run.accounting import Audit
from advcli.shards import ShardOptions

describe = schema

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
