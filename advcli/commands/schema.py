"""``advcli schema``: what a log holds, and what each command can do with it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from advcli import methods
from advcli.commands import fields
from advcli.errors import DataError
from advcli.io.file_sources import JsonlSource
from advcli.io.rollouts import extract_rows, has_text, row_columns
from advcli.io.schema import POLICY_STREAMS, Roles, describe_type
from advcli.params import command_options, option, takes_options
from advcli.presets import PresetOptions
from advcli.results import Description
from advcli.run import jobs
from advcli.run.accounting import token_counts
from advcli.run.logs import (
    BATCH_ROWS,
    LogPaths,
    group_warnings,
    input_paths,
)

SAMPLE_BYTES = 4 << 20  # schema reads a JSONL log's first 4 MB of lines unless --full


def sampled(source: JsonlSource, read: int, rows: int) -> str:
    """How much of the log a sample read: "the first 13,050 rows (4.2 MB of 525.3 MB, about
    1,633,000 rows in all); --full reads everything"."""
    size = source.plain_bytes  # None where a file is compressed
    whole = " of text"
    if size is not None:
        about = rows * size / read
        about = round(about, -3 if about > 1e4 else 0)
        whole = f" of {size / 1e6:.1f} MB, about {about:,.0f} rows in all"
    return f"the first {rows:,} rows ({read / 1e6:.1f} MB{whole}); `full=True` reads everything"


@dataclass(frozen=True)
class SchemaCommand:
    """The options of ``advcli schema``: its flags, and the keywords of :func:`schema`."""

    col: list[str] | None = fields.col()
    full: bool = field(
        default=False,
        metadata=option(
            "Read the whole log: a JSONL log of more than 4 MB of text is otherwise read as its "
            "first lines (about 4 MB; the counts are then the sample's, and it says so).",
            flag="--full",
        ),
    )
    from_: str | None = fields.from_()
    preset_options: PresetOptions | None = fields.preset_options()
    tokenizer: str | os.PathLike[str] | None = fields.tokenizer()
    max_retokenize_mismatch: float = fields.max_retokenize_mismatch()
    batch_rows: int = BATCH_ROWS  # rows read at a time: memory and speed, never the result


@takes_options(SchemaCommand, params=False)
def schema(inputs: LogPaths, **keywords: Any) -> Description:
    """``advcli schema``: column roles and types, rows and token statistics (streamed), and
    what each command can do with the log. Bad data does not stop it: each problem found is
    listed in ``problems``, with the file, row and column.

    A JSONL log of more than :data:`SAMPLE_BYTES` of text is read as its first lines, about
    that much (``sampled`` says how much; ``full=True`` reads it all): the columns and roles
    are the whole log's (from each file's first lines), the counts the sample's. The keywords
    are :class:`SchemaCommand`'s."""
    options, _ = command_options(SchemaCommand, "schema", keywords)
    col, from_, preset_options = options.col, options.from_, options.preset_options
    batch_rows, full = options.batch_rows, options.full
    job = jobs.job(input_paths(inputs), col=col, preset=from_, preset_options=preset_options,
                   batch_rows=batch_rows, tokenizer=options.tokenizer,
                   max_retokenize_mismatch=options.max_retokenize_mismatch)  # fmt: skip
    log = job.open()
    source, roles = log.source, log.roles
    sample = source if not full and isinstance(source, JsonlSource) else None
    if sample is not None:
        sample.sample(SAMPLE_BYTES)
        sample.keep_parsed()  # parsed once: the token counts read it back
    warnings = list(log.warnings) + ([log.reward_doubt] if log.reward_doubt else [])
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
        if sample is None or sample.sampled_bytes is None:  # (a sample's last group is cut
            # short: no group check)
            warnings += group_warnings(log, rows)
    except DataError as exc:
        problems.append(str(exc))
        info["rows"] = source.n_rows
    if roles["input_ids"] is None:
        made = "; `tokenizer` PATH makes them from it" if has_text(source.schema.names) else ""
        info.update(tokens=None, actions=f"no token ids: the log holds text, not tokens{made}")
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
    info["logprob_streams"] = logprob_streams(roles)
    needs = {"audit": ["prompt_id", "reward"], "shard": ["input_ids"], "score": ["input_ids"]}
    verdicts = {
        cmd: methods.verdict([r for r in rs if roles[r] is None]) for cmd, rs in needs.items()
    }
    info["can_run"] = {"audit": verdicts["audit"], **methods.what_runs(roles)}
    info["can_run"].update(shard=verdicts["shard"], score=verdicts["score"])
    if sample is not None and sample.sampled_bytes is not None:
        info["sampled"] = sampled(sample, sample.sampled_bytes, info["rows"])
        warnings.append(
            "a sample of the log was read: its group sizes are not checked (`full=True`)"
        )
    info["problems"] = problems
    info["warnings"] = warnings
    if log.looks_like is not None:
        info["looks_like"] = log.looks_like.name
    return Description(**info)


def logprob_streams(roles: Roles) -> dict[str, str | None] | None:
    """The column of each log-prob stream (None: the log has none), and the stream the KL
    penalty and distillation read: the trainer's where the log has it (None: neither)."""
    read = {"trainer_logprobs": "trainer", "logprobs": "sampler"}
    policy = next((read[r] for r in POLICY_STREAMS if roles[r] is not None), None)
    if policy is None:
        return None
    return {
        "sampler": roles["logprobs"],
        "trainer": roles["trainer_logprobs"],
        "kl_and_distillation_read": policy,
    }
