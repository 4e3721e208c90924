"""``advcli report``: one self-contained HTML page of a log's groups, rewards and advantages
(the numbers: :mod:`advcli.reports`)."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

from advcli import methods, progress
from advcli.commands import fields
from advcli.io.outputs import check_output
from advcli.io.writers import write_bytes
from advcli.params import command_options, options_of, takes_options
from advcli.presets import PresetOptions
from advcli.reports import ReportOptions, compare
from advcli.reports.collect import Gathered, gather
from advcli.results import ReportResult
from advcli.run import correcting, jobs
from advcli.run.logs import BATCH_ROWS, LogPaths, input_paths


@dataclass(frozen=True)
class ReportCommand:
    """The options of ``advcli report``: its flags, and the keywords of :func:`report`."""

    out: str | os.PathLike[str] = field(
        metadata=fields.out_option("Output .html file; - for standard output.")
    )
    method: str | None = fields.method(
        "Show this method's advantages (default: those an annotated log holds)."
    )
    convention: str | None = fields.convention()
    col: list[str] | None = fields.col()
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    force: bool = fields.force()
    correction: str | None = fields.correction(
        "Show each action token's weight and mask beside its δ in the token view: "
    )
    correction_bounds: str | None = fields.correction_bounds()
    options: ReportOptions | None = field(default=None, metadata=options_of(ReportOptions))
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the page


@takes_options(ReportCommand, params=True)
def report(inputs: LogPaths, out: str | os.PathLike[str], **keywords: Any) -> ReportResult:
    """``advcli report``: one self-contained HTML page (``out``) of the log's groups, rewards
    and advantages (``method``'s, or those an annotated log holds); with both log-prob streams
    the token view shows each action token's δ, and ``correction``'s weight and mask. Needs
    ``advcli[report]``.
    The keywords are :class:`ReportCommand`'s, then the method's parameters."""
    given, params = command_options(
        ReportCommand, "report", {"out": out, **keywords}, methods.PARAMETERS
    )
    method, convention, col, force = given.method, given.convention, given.col, given.force
    options, from_, preset_options = given.options, given.from_, given.preset_options
    batch_rows = given.batch_rows
    from advcli.reports import page

    started = time.perf_counter()
    out = os.fspath(out)
    options = options or ReportOptions()
    if params.get("zero_variance_tol") is not None:  # the page's test, and the method's
        options = dataclasses.replace(options, tol=params["zero_variance_tol"])
        if method is None or not methods.takes(method, "zero_variance_tol"):  # the page's alone
            params = {k: v for k, v in params.items() if k != "zero_variance_tol"}
    page.bokeh()  # the extra is missing: say so before reading anything
    if options.compare is not None or options.steps is not None or options.label is not None:
        compare.check_options(options.compare, options.steps, options.label)
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   method=method, convention=convention, params=params, batch_rows=batch_rows,
                   correction=given.correction, correction_bounds=given.correction_bounds,
                   tokenizer=options.tokenizer, keep_ids=True)  # fmt: skip
    check_output(out, job.files, force=force)
    log = job.open()
    if job.correction is not None:  # refused here too when no method runs
        log.require({"input_ids"}, what="`correction`")
        correcting.require_streams(log.roles, log.source.schema.names, log.source.sources)
    run = job.plan(log) if job.method is not None else None
    p = job.params
    if p is not None and "reward_columns" in p and p.reward_columns:
        components = [c.strip() for c in p.reward_columns.split(",")]
    elif job.reading.preset is not None:
        components = job.reading.preset.reward_components(log.source.schema, job.reading.options)
    else:
        components = []
    comparing = options.compare is not None or options.steps is not None
    # the staleness by lag reads a method's advantages: this one's, else grpo's (as audit's)
    staleness_job = dataclasses.replace(job, correction=None) if job.method is not None else (
        jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                 method="grpo", batch_rows=batch_rows))  # fmt: skip
    gathered = gather(log, options, run=run, reward_components=components,
                      batch_rows=batch_rows, hash_prompts=comparing, correction=job.correction,
                      plan=lambda: staleness_job.plan(log))  # fmt: skip
    payload = gathered.payload
    if comparing:
        payload["compare"] = _comparison(gathered, job, options, batch_rows, force=force, out=out)
    with progress.stage("writing the page"):
        html = page.render(payload, page.heading(payload["files"])).encode()
        write_bytes(out, html, force=force)
    groups = payload["groups"]
    return ReportResult(
        output=out,
        bytes=len(html),
        rollouts=payload["overview"]["rollouts"],
        groups=groups["total"],
        groups_listed=groups["listed"],
        detail_groups=len(payload["details"]),
        advantages_from=payload["advantages_from"],
        seconds=round(time.perf_counter() - started, 3),
        warnings=payload["warnings"],
    )


def _comparison(
    gathered: Gathered,
    job: jobs.Job,
    options: ReportOptions,
    batch_rows: int,
    *,
    force: bool,
    out: str,
) -> dict[str, Any]:
    """The Compare section of ``report``: the log beside each ``--compare``'s (read as the
    job reads its log, its own page's detail left out), or some of its ``--steps``."""
    if options.steps is not None:
        sides = compare.step_sides(gathered, options.steps, options.label)
        return compare.comparison(sides, options.bins, batch_rows)
    assert options.compare is not None
    lean = dataclasses.replace(options, detail_groups=0, sample_groups=1, token_budget=0)
    others = []
    for paths in options.compare:
        other = dataclasses.replace(job, paths=tuple(input_paths(paths)), correction=None)
        check_output(out, other.files, force=force)
        log = other.open()
        run = other.plan(log) if other.method is not None else None
        others.append(gather(log, lean, run=run, batch_rows=batch_rows, hash_prompts=True))
    sides = compare.log_sides([gathered, *others], options.label)
    return compare.comparison(sides, options.bins, batch_rows)
