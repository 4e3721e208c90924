"""``advcli schema``: what a log holds, and what each command can do with it."""

from __future__ import annotations

from typing import Any

from advcli import jobs, methods
from advcli.accounting import token_counts
from advcli.errors import DataError
from advcli.io.rollouts import extract_rows, row_columns
from advcli.io.schema import describe_type
from advcli.logs import (
    BATCH_ROWS,
    Inputs,
    group_warnings,
    input_paths,
)
from advcli.presets import PresetOptions
from advcli.results import Description


def describe(
    inputs: Inputs,
    *,
    col: list[str] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Description:
    """``advcli schema``: column roles and types, rows and token statistics (streamed), and
    what each command can do with the log. Bad data does not stop it: each problem found is
    listed in ``problems``, with the file, row and column."""
    job = jobs.job(input_paths(inputs), col=col, preset=preset, preset_options=preset_options,
                   batch_rows=batch_rows)  # fmt: skip
    log = job.open()
    source, roles = log.source, log.roles
    warnings = list(log.warnings)
    role_of = {column: role for role, column in roles.columns.items() if column}
    info: dict[str, Any] = {
        "files": source.sources.files,
        "columns": {
            f.name: (describe_type(f.type), role_of.get(f.name, "passthrough"))
            for f in source.schema
        },
        "missing_roles": [role for role, column in roles.columns.items() if column is None],
    }
    problems = []
    try:
        rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
        info.update(
            rows=rows.n_rows,
            rollouts=rows.n_rollouts,
            segmented=rows.segmented,
            groups=len(rows.group_keys) if rows.group_keys is not None else None,
        )
        warnings += group_warnings(rows, roles)
    except DataError as exc:
        problems.append(str(exc))
        info["rows"] = source.n_rows
    if roles["input_ids"] is None:
        info.update(tokens=None, actions="no token ids: the log holds text, not tokens")
    else:
        try:
            counts = token_counts(source, roles, values=True, batch_rows=batch_rows)
            info.update(
                tokens=int(counts.tokens.sum()),
                action_tokens=int(counts.actions.sum()),
                tokens_per_row_min=int(counts.tokens.min()),
                tokens_per_row_mean=float(counts.tokens.mean()),
                tokens_per_row_max=int(counts.tokens.max()),
            )
        except DataError as exc:
            problems.append(str(exc))
        info["actions"] = {
            "action_mask": f"column '{roles['action_mask']}'",
            "spans": f"spans in column '{roles['spans']}'",
            "all": "no mask and no spans: every token is treated as an action",
        }[roles.mask_source]
    needs = {"audit": ["prompt_id", "reward"], "shard": ["input_ids"], "score": ["input_ids"]}
    verdicts = {
        cmd: methods.verdict([r for r in rs if roles[r] is None]) for cmd, rs in needs.items()
    }
    info["can_run"] = {"audit": verdicts["audit"], **methods.what_runs(roles)}
    info["can_run"].update(shard=verdicts["shard"], score=verdicts["score"])
    info["problems"] = problems
    info["warnings"] = warnings
    if log.looks_like is not None:
        info["looks_like"] = log.looks_like.name
    return Description(**info)
