"""``advcli audit``: what carries no group signal in a log (zero-variance, near-tie and
singleton groups), counted in one streamed pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advcli.commands import fields
from advcli.params import check_fields, command_options, takes_options
from advcli.presets import PresetOptions
from advcli.run import jobs
from advcli.run.accounting import Audit, audit_log
from advcli.run.logs import BATCH_ROWS, LogPaths, input_paths


@dataclass(frozen=True)
class AuditCommand:
    """The options of ``advcli audit`` that reach the count (its flags, and the keywords of
    :func:`audit`); what it prints (``--list``) and its exit (``--fail-above``) are the CLI's."""

    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    tol: float = fields.zero_variance_tol()
    near_tie: float | None = fields.near_tie()
    engine: str = fields.engine()
    ray_address: str | None = fields.ray_address()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the result

    def __post_init__(self) -> None:
        check_fields(self)


@takes_options(AuditCommand, params=False)
def audit(inputs: LogPaths, **keywords: Any) -> Audit:
    """``advcli audit``: zero-variance, near-tie and singleton accounting of one log
    (streamed); the keywords are :class:`AuditCommand`'s. ``near_tie``: the group std below
    which a group is a near-tie (default 5% of the log's reward range); ``engine="ray"``
    counts each file's tokens on a Ray cluster."""
    options, _ = command_options(AuditCommand, "audit", keywords)
    col, from_, preset_options = options.col, options.from_, options.preset_options
    engine, ray_address, batch_rows = options.engine, options.ray_address, options.batch_rows
    tol, near_tie = options.tol, options.near_tie
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   engine=engine, ray_address=ray_address, batch_rows=batch_rows)  # fmt: skip
    return audit_log(job.open(), tol=tol, near_tie=near_tie, batch_rows=batch_rows,
                     count=job.ray.count if job.ray is not None else None)  # fmt: skip
