"""``advcli audit``: what carries no group signal in a log (zero-variance, near-tie and
singleton groups), counted in one streamed pass."""

from __future__ import annotations

from advcli import jobs
from advcli.accounting import Audit, audit_log
from advcli.core.group import ZERO_VARIANCE_TOL
from advcli.logs import BATCH_ROWS, LogPaths, input_paths
from advcli.presets import PresetOptions


def audit(
    inputs: LogPaths,
    *,
    col: list[str] | None = None,
    tol: float = ZERO_VARIANCE_TOL,
    near_tie: float | None = None,
    from_: str | None = None,
    preset_options: PresetOptions | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Audit:
    """``advcli audit``: zero-variance, near-tie and singleton accounting of one log
    (streamed). ``near_tie``: the group std below which a group is a near-tie (default 5% of
    the log's reward range); ``engine="ray"`` counts each file's tokens on a Ray cluster."""
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   engine=engine, ray_address=ray_address, batch_rows=batch_rows)  # fmt: skip
    return audit_log(job.open(), tol=tol, near_tie=near_tie, batch_rows=batch_rows,
                     count=job.ray.count if job.ray is not None else None)  # fmt: skip
