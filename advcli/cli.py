"""The ``advcli`` command line: a thin layer over :mod:`advcli.pipeline`.

Every :class:`~advcli.errors.AdvcliError` becomes one line on stderr and its exit code here, in
:func:`main`: 0 ok, 1 bad data, 2 bad usage, 3 audit threshold exceeded.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import orjson
import typer

from advcli import __version__, pipeline, render
from advcli import shard as sharding
from advcli._malloc import tune_allocator
from advcli.errors import AdvcliError, ThresholdExceeded
from advcli.params import METHODS, Params

app = typer.Typer(
    name="advcli",
    help="Offline advantages for logged LLM reinforcement-learning rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Inputs = Annotated[
    list[str], typer.Argument(help="Parquet or JSONL files, directories or globs; - for stdin.")
]
Col = Annotated[
    Optional[list[str]],  # noqa: UP045 (typer needs Optional on Python 3.10)
    typer.Option("--col", help="Map a role to a column: --col reward=score (repeatable)."),
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No summary or progress on stderr.")]
Format = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--format", help="parquet or jsonl (default: from --out)."),
]
Force = Annotated[bool, typer.Option(help="Replace an existing output.")]


# Help panels that group annotate's many options.
_GROUP = "Group and batch baselines"
_TEMPORAL = "Temporal estimators"
_CRITIC = "Critic (ONNX)"

# Critic options, shared by `score` and `annotate --critic`.
CriticPath = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--critic",
        rich_help_panel=_CRITIC,
        help="ONNX critic: score values (annotate: when the log has none).",
    ),
]
Device = Annotated[
    str, typer.Option(rich_help_panel=_CRITIC, help="auto (CUDA when it works), cuda or cpu.")
]
BatchTokens = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        rich_help_panel=_CRITIC,
        help="Padded tokens per critic batch (default 4096, measured on the CPU).",
    ),
]
Shift = Annotated[
    bool,
    typer.Option(
        "--shift/--no-shift",
        rich_help_panel=_CRITIC,
        help="values[t] = output[t-1] (causal heads).",
    ),
]
MaxLen = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        rich_help_panel=_CRITIC,
        help="Longest row the critic takes (default: the model's static length).",
    ),
]
MaxLenTruncate = Annotated[
    str,
    typer.Option(
        rich_help_panel=_CRITIC,
        help="A longer row: error, or left (score its last --max-len tokens).",
    ),
]
InputName = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(rich_help_panel=_CRITIC, help="The model's token-id input."),
]
MaskName = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(rich_help_panel=_CRITIC, help="The model's attention-mask input."),
]
OutputName = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(rich_help_panel=_CRITIC, help="The model's value output."),
]


def _critic_options(
    path, device, batch_tokens, shift, max_len, truncate, inp, mask, outp
) -> pipeline.CriticOptions | None:
    if path is None:
        return None
    return pipeline.CriticOptions(
        path=path,
        device=device,
        batch_tokens=batch_tokens,
        shift=shift,
        max_len=max_len,
        truncate=truncate,
        input_name=inp,
        mask_name=mask,
        output_name=outp,
    )


def _report(title: str, result: dict, *, as_json: bool, quiet: bool) -> None:
    if as_json:
        _print_json(result)
    if not quiet:
        render.summary(title, result)


def _print_json(obj: object) -> None:
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    sys.stdout.write(orjson.dumps(obj, option=option).decode() + "\n")


@app.command()
def schema(inputs: Inputs, col: Col = None, as_json: Json = False) -> None:
    """Show the detected column roles, types, row count and token statistics."""
    with render.Activity(quiet=False) as activity, activity.stage("reading the log"):
        info = pipeline.describe(inputs, col, progress=activity.progress)
    if as_json:
        _print_json(info)
    else:
        render.schema_report(", ".join(info["files"]), info)


@app.command()
def annotate(
    inputs: Inputs,
    out: Annotated[str, typer.Option("--out", "-o", help="Output .parquet or .jsonl file.")],
    method: Annotated[str, typer.Option(help=f"One of: {', '.join(METHODS)}.")],
    convention: Annotated[
        str, typer.Option(help="seed, verl, trl, openrlhf or torchrl defaults.")
    ] = "seed",
    scale: Annotated[
        str, typer.Option(rich_help_panel=_GROUP, help="grpo: group, batch or none (Dr. GRPO).")
    ] = "group",
    std_ddof: Annotated[
        int | None, typer.Option(rich_help_panel=_GROUP, help="ddof of the group std.")
    ] = None,  # noqa: UP045
    eps: Annotated[
        float | None, typer.Option(rich_help_panel=_GROUP, help="eps of std + eps.")
    ] = None,  # noqa: UP045
    eps_placement: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(rich_help_panel=_GROUP, help="add (std + eps) or max (max(std, eps))."),
    ] = None,
    singleton: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(rich_help_panel=_GROUP, help="Groups of one: zero, raw, error or drop."),
    ] = None,
    zero_variance: Annotated[
        str,
        typer.Option(
            rich_help_panel=_GROUP, help="keep (flagged, advantage 0) or drop zero-variance groups."
        ),
    ] = "keep",
    zero_variance_tol: Annotated[
        float,
        typer.Option(
            rich_help_panel=_GROUP, help="A group is zero-variance when max - min <= this."
        ),
    ] = 1e-9,
    batch_size: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            rich_help_panel=_GROUP,
            help="Rollouts per completion-ordered batch (batch-mean, whitening).",
        ),
    ] = None,
    partial: Annotated[
        str, typer.Option(rich_help_panel=_GROUP, help="A trailing short batch: drop or keep.")
    ] = "drop",
    gamma: Annotated[
        float, typer.Option(rich_help_panel=_TEMPORAL, help="Discount per action step.")
    ] = 1.0,
    lam: Annotated[
        str,
        typer.Option(rich_help_panel=_TEMPORAL, help="GAE lambda, or 'adaptive' (needs --alpha)."),
    ] = "0.95",
    alpha: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            rich_help_panel=_TEMPORAL, help="Adaptive lambda: clamp(1 - 1/(alpha * l), 0, 1)."
        ),
    ] = None,
    lam_critic: Annotated[
        float,
        typer.Option(rich_help_panel=_TEMPORAL, help="Lambda of the returns (critic targets)."),
    ] = 1.0,
    observations: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            rich_help_panel=_TEMPORAL,
            help="skip (not time steps) or step (zero-reward, zero-value steps).",
        ),
    ] = None,
    segments: Annotated[
        str,
        typer.Option(rich_help_panel=_TEMPORAL, help="Segmented rollouts: compaction or chain."),
    ] = "compaction",
    whiten: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(rich_help_panel=_TEMPORAL, help="none or batch (token-weighted, per batch)."),
    ] = None,
    whiten_ddof: Annotated[
        int | None, typer.Option(rich_help_panel=_TEMPORAL, help="ddof of whitening.")
    ] = None,  # noqa: UP045
    strict: Annotated[
        bool,
        typer.Option(
            rich_help_panel=_TEMPORAL, help="A reward on a non-action token is an error, not moved."
        ),
    ] = False,
    col: Col = None,
    fmt: Format = None,
    force: Force = False,
    quiet: Quiet = False,
    as_json: Json = False,
    critic: CriticPath = None,
    device: Device = "auto",
    batch_tokens: BatchTokens = None,
    shift: Shift = True,
    max_len: MaxLen = None,
    max_len_truncate: MaxLenTruncate = "error",
    input_name: InputName = None,
    mask_name: MaskName = None,
    output_name: OutputName = None,
) -> None:
    """Write the log back with per-token advantages and group statistics."""
    params = Params(
        method=method,
        convention=convention,
        scale=scale,
        std_ddof=std_ddof,
        eps=eps,
        eps_placement=eps_placement,
        singleton=singleton,
        zero_variance=zero_variance,
        zero_variance_tol=zero_variance_tol,
        batch_size=batch_size,
        partial=partial,
        gamma=gamma,
        lam=lam,
        alpha=alpha,
        lam_critic=lam_critic,
        observations=observations,
        segments=segments,
        whiten=whiten,
        whiten_ddof=whiten_ddof,
        strict=strict,
    )
    opts = _critic_options(
        critic, device, batch_tokens, shift, max_len, max_len_truncate,
        input_name, mask_name, output_name,
    )  # fmt: skip
    with render.Activity(quiet) as activity:
        result = pipeline.annotate(
            inputs,
            out,
            params,
            col=col,
            fmt=fmt,
            force=force,
            stage=activity.stage,
            progress=activity.progress,
            critic=opts,
        )
    _report(f"annotate: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
def score(
    inputs: Inputs,
    critic: Annotated[str, typer.Option("--critic", help="The ONNX critic.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output .parquet or .jsonl file.")],
    device: Device = "auto",
    batch_tokens: BatchTokens = None,
    shift: Shift = True,
    max_len: MaxLen = None,
    max_len_truncate: MaxLenTruncate = "error",
    input_name: InputName = None,
    mask_name: MaskName = None,
    output_name: OutputName = None,
    col: Col = None,
    fmt: Format = None,
    force: Force = False,
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Add a `values` column scored by an ONNX critic (CUDA when available, else CPU)."""
    opts = _critic_options(
        critic, device, batch_tokens, shift, max_len, max_len_truncate,
        input_name, mask_name, output_name,
    )  # fmt: skip
    with render.Activity(quiet) as activity, activity.stage("scoring"):
        result = pipeline.score(
            inputs, out, opts, col=col, fmt=fmt, force=force, progress=activity.progress
        )
    _report(f"score: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
def audit(
    inputs: Inputs,
    col: Col = None,
    as_json: Json = False,
    list_: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--list", help="Print the prompt ids of zero-variance or singleton groups."),
    ] = None,
    fail_above: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Exit with status 3 when the zero-variance share of rollouts is above."),
    ] = None,
    zero_variance_tol: Annotated[float, typer.Option(help="max - min <= this.")] = 1e-9,
) -> None:
    """Report zero-variance and singleton groups: what carries no group signal."""
    if list_ not in (None, "zero-variance", "singleton"):
        msg = f"expected zero-variance or singleton, saw {list_!r}"
        raise typer.BadParameter(msg, param_hint="--list")
    with render.Activity(quiet=False) as activity, activity.stage("reading the log"):
        report, sources, rows, stats = pipeline.run_audit(
            inputs, col=col, tol=zero_variance_tol, progress=activity.progress
        )
    if list_:
        flags = stats.zero_variance if list_ == "zero-variance" else stats.singleton
        for key in pipeline.group_keys(rows, flags):
            sys.stdout.write(f"{key}\n")
    elif as_json:
        _print_json(report.__dict__ | {"files": sources.files})
    else:
        render.audit_report(", ".join(sources.files), report)
    if fail_above is not None and report.zero_variance_rollout_share > fail_above:
        msg = (
            f"zero-variance groups hold {report.zero_variance_rollout_share:.1%} of the "
            f"rollouts, above --fail-above {fail_above:g}"
        )
        raise ThresholdExceeded(msg)


@app.command()
def shard(
    inputs: Inputs,
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder (must not exist).")],
    method: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=f"Raw logs: one of {', '.join(METHODS)}. Annotated logs keep theirs."),
    ] = None,
    convention: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Raw logs: seed, verl, trl, openrlhf or torchrl defaults."),
    ] = None,
    param: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--param",
            help="Raw logs: any other annotate option as KEY=VALUE, e.g. --param gamma=0.99 "
            "(repeatable).",
        ),
    ] = None,
    rows_per_shard: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(help="Rows per shard (instead of --tokens-per-shard)."),
    ] = None,
    tokens_per_shard: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(help=f"Tokens per shard (default {sharding.DEFAULT_TOKENS_PER_SHARD:,})."),
    ] = None,
    keep: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--keep", help="Also write this column, e.g. old_logprobs (repeatable)."),
    ] = None,
    drop_zero_variance: Annotated[
        bool, typer.Option(help="Leave out rollouts of zero-variance groups.")
    ] = False,
    drop_singletons: Annotated[bool, typer.Option(help="Leave out groups of one.")] = False,
    shuffle: Annotated[bool, typer.Option(help="A global, seeded, deterministic shuffle.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of --shuffle.")] = 0,
    keep_groups: Annotated[
        bool, typer.Option(help="Keep a group's rollouts adjacent and in one shard.")
    ] = False,
    pack: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(help="Pack rollouts first-fit-decreasing into rows of at most N tokens."),
    ] = None,
    truncate: Annotated[
        bool, typer.Option(help="Cut rollouts longer than --pack N to N tokens (counted).")
    ] = False,
    loss_weights: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            help="Add loss_weight: token-mean, seq-mean-token-mean or seq-mean-token-sum."
        ),
    ] = None,
    split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Hold out prompts by hash: val=0.02 writes DIR/train and DIR/val."),
    ] = None,
    col: Col = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Write annotated rollouts as training-ready Parquet shards with a manifest."""
    opts = sharding.ShardOptions(
        rows_per_shard=rows_per_shard,
        tokens_per_shard=tokens_per_shard,
        keep=list(keep or []),
        drop_zero_variance=drop_zero_variance,
        drop_singletons=drop_singletons,
        shuffle=shuffle,
        seed=seed,
        keep_groups=keep_groups,
        pack=pack,
        truncate=truncate,
        loss_weights=loss_weights,
        split=split,
    )
    with render.Activity(quiet) as activity:
        result = sharding.shard(
            inputs,
            out,
            opts,
            method=method,
            convention=convention,
            param=param,
            col=col,
            force=force,
            stage=activity.stage,
        )
    _report(f"shard: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
def verify(
    folder: Annotated[str, typer.Argument(help="A folder written by advcli shard.")],
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Re-read every shard: checksums, schema, row and token counts against the manifest."""
    result = sharding.verify(folder)
    if as_json:
        _print_json(result)
    if not quiet:
        render.summary(f"verify: {folder}", result)


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"advcli {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True)
    ] = False,
) -> None:
    """Offline advantages for logged LLM reinforcement-learning rollouts."""


def main() -> None:
    """Entry point: run the app, turning every error into one line and an exit code.

    Typer reports usage errors itself (exit code 2); advcli's own errors are printed here.
    """
    tune_allocator()
    try:
        app()
    except AdvcliError as exc:
        sys.stderr.write(f"advcli: error: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("advcli: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # a bug: still one line, unless the user asks for the traceback
        if os.environ.get("ADVCLI_DEBUG"):
            raise
        sys.stderr.write(
            f"advcli: internal error: {type(exc).__name__}: {exc} "
            "(set ADVCLI_DEBUG=1 for the traceback, and please report it)\n"
        )
        sys.exit(70)
