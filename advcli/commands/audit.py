"""``advcli audit``: the health of a log: what carries no group signal (zero-variance, near-tie
and singleton groups), and the staleness, lengths, entropy, mismatch and advisories sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advcli import presets
from advcli.commands import fields
from advcli.core.mismatch_frameworks import METRICS
from advcli.errors import UsageError
from advcli.params import Range, check_fields, command_options, option, takes_options
from advcli.presets import PresetOptions
from advcli.run import correcting, health, jobs
from advcli.run.accounting import Audit
from advcli.run.health import ENTROPY_THRESHOLD
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
    # not ``method``: a command with one takes every method's parameters, and audit's own
    # --zero-variance-tol is one of them
    advantage_method: str = field(
        default="grpo",
        metadata=option(
            "The method whose advantages the staleness section splits by lag "
            "(advcli methods lists them).",
            flag="--method",
        ),
    )
    by: str | None = field(
        default=None, metadata=option("step: each figure per trainer step too (a table).")
    )
    entropy_threshold: float = field(
        default=ENTROPY_THRESHOLD,
        metadata=option(
            "Entropy (nats) above which an action token counts as high-entropy.",
            range=Range(0),
        ),
    )
    correction: str | None = fields.correction(
        "The mismatch section: what this correction of the trainer's log-probs against the "
        "sampler's weights and masks: "
    )
    correction_bounds: str | None = fields.correction_bounds()
    convention: str | None = field(
        default=None,
        metadata=option(
            "verl, trl, nemo-rl or miles: the mismatch section adds that framework's own metrics "
            "under its names, and a correction computes as it does (default: --from's framework)."
        ),
    )
    engine: str = fields.engine()
    ray_address: str | None = fields.ray_address()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the result

    def __post_init__(self) -> None:
        check_fields(self)
        if self.by not in (None, "step"):
            raise UsageError(f"`by` {self.by!r}: expected step")
        if self.convention is not None and self.convention not in METRICS:
            msg = f"`convention` {self.convention!r}: expected one of {', '.join(METRICS)}"
            raise UsageError(msg)


def framework_of(preset: str | None) -> str | None:
    """The framework whose mismatch metrics a ``--from`` log reports (None: none of the four)."""
    if preset is None:
        return None
    flavour = correcting.FLAVOUR_OF.get(presets.get(preset).convention)
    return flavour if flavour in METRICS else None


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
                   method=options.advantage_method, engine=engine, ray_address=ray_address,
                   batch_rows=batch_rows)  # fmt: skip
    log = job.open()
    convention = options.convention or framework_of(from_)
    correction = correcting.correction_of(options.correction, options.correction_bounds,
                                          convention)  # fmt: skip
    return health.audit_health(log, tol=tol, near_tie=near_tie, plan=lambda: job.plan(log),
                               entropy_threshold=options.entropy_threshold,
                               by_step=options.by == "step", correction=correction,
                               convention=convention, batch_rows=batch_rows,
                               count=job.ray.count if job.ray is not None else None)  # fmt: skip
