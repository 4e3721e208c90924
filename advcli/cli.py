"""The ``advcli`` command line: a thin layer over :mod:`advcli.api`.

Every :class:`~advcli.errors.AdvcliError` becomes one line on stderr and its exit code here, in
:func:`main`: 0 ok, 1 bad data, 2 bad usage, 3 audit threshold exceeded, 4 logged advantages
that ``check`` does not reproduce. The options of a
method's parameters are made from their declarations (:data:`advcli.methods.PARAMETERS`).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import inspect
import os
import signal
import sys
import traceback
import typing
import warnings
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, Optional

import numpy as np
import orjson
import typer
import typer.core
import typer.main
from polars.exceptions import PanicException as _Panic

from advcli import __version__, api, render
from advcli._malloc import tune_allocator
from advcli.core.conventions import CONVENTIONS
from advcli.critic.scorer import CriticOptions
from advcli.errors import AdvantagesDiffer, AdvcliError, ThresholdExceeded, UsageError
from advcli.io.interrupts import STOPS, handle_termination, terminated_by
from advcli.methods import PARAMETERS, REGISTRY
from advcli.params import Param
from advcli.presets import PRESETS, PresetOptions
from advcli.shards import DEFAULT_TOKENS_PER_SHARD, ShardOptions

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
Nonfinite = Annotated[
    str,
    typer.Option(help="A NaN or infinity bound for a JSONL output: error, or null (counted)."),
]
_RAY = "Beyond one machine (Ray)"
Engine = Annotated[
    str,
    typer.Option(
        rich_help_panel=_RAY,
        help="local, or ray: one task per input Parquet file (or row range of a large one) on a "
        "Ray cluster; other logs (JSONL, --from dumps) are read once into Ray's object store "
        "(annotate, score: --out is then a folder of parts and a manifest; score takes a GPU a "
        "task where the cluster has GPUs; shard writes the same shards from here; needs the "
        "ray extra).",
    ),
]
RayAddress = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        rich_help_panel=_RAY,
        help="The cluster's head (host:port; default: RAY_ADDRESS, else a local Ray on every "
        "core).",
    ),
]
ZeroVarianceTol = Annotated[
    float, typer.Option(help="A group is zero-variance when max - min <= this.")
]
NearTie = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option(
        min=0.0,
        help="A group is a near-tie when its reward std is below this "
        "(default: 0.05 x the log's reward range).",
    ),
]


_CRITIC = "Critic (ONNX)"  # the help panel of the critic options
_CONVENTIONS = (
    ", ".join([*CONVENTIONS][:-1]) + f" or {[*CONVENTIONS][-1]} defaults (default: the "
    "framework's own with --from, else advcli's; seed is advcli's former name)."
)

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
        help="The value of token t is the output at t-1 (causal heads).",
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
    path: str | None,
    device: str,
    batch_tokens: int | None,
    shift: bool,
    max_len: int | None,
    truncate: str,
    inp: str | None,
    mask: str | None,
    outp: str | None,
) -> CriticOptions | None:
    if path is None:
        return None
    return CriticOptions(
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
    """A command's result: JSON on stdout (and nothing on stderr: its warnings are in it), or
    a summary (unless quiet) and the warnings on stderr."""
    warnings = result.pop("warnings", [])
    if as_json:
        _print_json({**result, "warnings": warnings})
        return
    if not quiet:
        render.summary(title, result)
    _warn(warnings)


def _print_json(obj: object) -> None:
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    sys.stdout.write(orjson.dumps(obj, option=option).decode() + "\n")


def _option(param: Param) -> inspect.Parameter:
    """The typer option of one method parameter."""
    kind: Any = param.kind if param.cli_default is not None else Optional[param.kind]  # noqa: UP045
    option = typer.Option(rich_help_panel=param.panel, help=param.help)
    return inspect.Parameter(
        param.name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=param.cli_default,
        annotation=Annotated[kind, option],
    )


def _injected(
    after: str, options: list[inspect.Parameter], gather: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add ``options`` to a command after its option ``after``; ``gather`` turns their values
    into the keyword arguments the command takes instead (left out of the command line)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        names = {o.name for o in options}
        taken = set(gather(dict.fromkeys(names)))
        own = [p for p in signature.parameters.values() if p.name not in taken]
        at = [p.name for p in own].index(after) + 1

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            values = {name: kwargs.pop(name) for name in names}
            command(**kwargs, **gather(values))

        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own[:at], *options, *own[at:]]
        )
        return wrapper

    return decorate


def with_method_parameters(after: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """An option for every method parameter (:data:`advcli.methods.PARAMETERS`), after the
    option ``after``; the command gets them as one dict, ``params`` (None: not given)."""
    options = [_option(p) for p in PARAMETERS.values() if p.name not in SHARED_WITH_PRESETS]
    return _injected(after, options, lambda values: {"params": values})


SHARED_WITH_PRESETS = ("reward_columns", "reward_weights")
"""Method parameters that are also options of the presets (TRL's reward columns are GDPO's):
one ``--reward-columns`` serves both, through :class:`PresetOptions`."""


def _shared_params(options: PresetOptions | None) -> dict[str, Any]:
    """The method parameters given as preset options (``--reward-columns`` for gdpo)."""
    if options is None:
        return {}
    weights = ",".join(f"{name}={w!r}" for name, w in options.reward_weights.items())
    return {
        "reward_columns": ",".join(options.reward_columns) if options.reward_columns else None,
        "reward_weights": weights or None,
    }


_FROM = "Logs as a framework wrote them"


def _keyword(name: str, kind: Any, decls: tuple[str, ...], help_text: str) -> inspect.Parameter:
    option = typer.Option(*decls, rich_help_panel=_FROM, help=help_text)
    return inspect.Parameter(
        name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=None,
        annotation=Annotated[kind, option],
    )


_PRESET_OPTIONS = [
    _keyword("from_", Optional[str], ("--from",),  # noqa: UP045
             f"Read the log as this framework writes it: {', '.join(PRESETS)}."),
    _keyword("reward_columns", Optional[str], (),  # noqa: UP045
             "trl: the reward functions' columns, comma separated (default: found from TRL's "
             "logged advantages among the float columns after completion); gdpo: the reward "
             "columns it normalises."),
    _keyword("reward_weights", Optional[str], (),  # noqa: UP045
             "trl, gdpo: their weights, e.g. acc=1,fmt=0.5 (default 1 each)."),
    _keyword("group_size", Optional[int], (),  # noqa: UP045
             "trl: rollouts per prompt, num_generations (default: found from TRL's logged "
             "advantages; no safe guess otherwise)."),
    _keyword("reward_key", Optional[str], (),  # noqa: UP045
             "slime, miles: the reward to take from a dict reward."),
    _keyword("merge_repeated_prompts", Optional[bool], ("--merge-repeated-prompts",),  # noqa: UP045
             "verl legacy: score the rows of a step that share a prompt text as one group "
             "(verl scored each dataset row apart; its legacy dump has no uid to tell them)."),
]  # fmt: skip


def _presets(values: dict[str, Any], methods: bool) -> dict[str, Any]:
    """``preset`` and ``preset_options`` from the ``--from`` options."""
    preset = values.pop("from_")
    given = [f"--{k.replace('_', '-')}" for k, v in values.items() if v is not None]
    if methods:  # --reward-columns and --reward-weights are gdpo's too
        given = [flag for flag in given if flag[2:].replace("-", "_") not in SHARED_WITH_PRESETS]
    if given and preset is None:
        msg = f"{given[0]} applies to a framework's log: add --from (e.g. --from trl)"
        raise UsageError(msg)
    weights: dict[str, float] = {}
    for item in (values["reward_weights"] or "").split(",") if values["reward_weights"] else []:
        name, sep, weight = item.partition("=")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            msg = f"--reward-weights {item!r}: expected NAME=WEIGHT. Hint: acc=1,fmt=0.5"
            raise UsageError(msg) from None
        if not sep:
            raise UsageError(f"--reward-weights {item!r}: expected NAME=WEIGHT. Hint: acc=1")
    columns = values["reward_columns"]
    options = PresetOptions(
        reward_columns=[c.strip() for c in columns.split(",")] if columns else None,
        reward_weights=weights,
        group_size=values["group_size"],
        reward_key=values["reward_key"],
        merge_repeated_prompts=bool(values["merge_repeated_prompts"]),
    )
    return {"preset": preset, "preset_options": options}


def with_preset_options(
    after: str, *, methods: bool = False
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--from`` and the options some frameworks' logs need; the command gets ``preset`` and
    ``preset_options``. ``methods``: the command runs a method, which may read some of them."""
    return _injected(after, _PRESET_OPTIONS, lambda values: _presets(values, methods))


def _one_line(key: object) -> str:
    """A prompt id on one line (a prompt's text may span several: then as a JSON string)."""
    text = str(key)
    return orjson.dumps(text).decode() if "\n" in text or "\r" in text else text


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        sys.stderr.write(f"advcli: warning: {warning}\n")


@app.command()
@with_preset_options(after="col")
def schema(
    inputs: Inputs,
    col: Col = None,
    as_json: Json = False,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Show the detected column roles, types, row count and token statistics."""
    with render.Activity(quiet=False) as activity, activity.stage("reading the log"):
        info = api.describe(
            inputs, col=col, preset=preset, preset_options=preset_options,
            progress=activity.progress,
        )  # fmt: skip
    if as_json:
        _print_json(info)
    else:
        render.schema_report(", ".join(info["files"]), info)
        _warn(info["warnings"])


@app.command()
@with_preset_options(after="col", methods=True)
@with_method_parameters(after="convention")
def annotate(
    inputs: Inputs,
    out: Annotated[str, typer.Option("--out", "-o", help="Output .parquet or .jsonl file.")],
    method: Annotated[str, typer.Option(help=f"One of: {', '.join(REGISTRY)}.")],
    convention: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=_CONVENTIONS),
    ] = None,
    col: Col = None,
    fmt: Format = None,
    force: Force = False,
    nonfinite: Nonfinite = "error",
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
    engine: Engine = "local",
    ray_address: RayAddress = None,
    params: dict[str, Any] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Write the log back with per-token advantages and group statistics."""
    opts = _critic_options(
        critic, device, batch_tokens, shift, max_len, max_len_truncate,
        input_name, mask_name, output_name,
    )  # fmt: skip
    with render.Activity(quiet) as activity:
        result = api.annotate(
            inputs,
            out,
            method=method,
            convention=convention,
            col=col,
            fmt=fmt,
            force=force,
            nonfinite=nonfinite,
            stage=activity.stage,
            progress=activity.progress,
            critic=opts,
            preset=preset,
            preset_options=preset_options,
            engine=engine,
            ray_address=ray_address,
            **(params or {}),
            **_shared_params(preset_options),
        )
    _report(f"annotate: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
@with_preset_options(after="col", methods=True)
@with_method_parameters(after="convention")
def check(
    inputs: Inputs,
    method: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Default: the framework's own (grpo)."),
    ] = None,
    convention: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Default: the framework's own (--from trl: trl, nemo-rl, prime-rl)."),
    ] = None,
    tol: Annotated[
        float, typer.Option(help="Largest absolute difference that counts as the same.")
    ] = 1e-5,
    col: Col = None,
    as_json: Json = False,
    params: dict[str, Any] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Recompute the advantages a framework logged (TRL, NeMo-RL, prime-rl) and compare."""
    if preset is None:
        msg = (
            "check compares with a framework's own advantages: add --from trl, nemo-rl or prime-rl"
        )
        raise UsageError(msg)
    with render.Activity(quiet=False) as activity:
        result = api.check(
            inputs, preset=preset, preset_options=preset_options, method=method,
            convention=convention, tol=tol, col=col, stage=activity.stage, **(params or {}),
            **_shared_params(preset_options),
        )  # fmt: skip
    warnings = result.pop("warnings")
    if as_json:
        _print_json({**result, "warnings": warnings})
    else:
        render.check_report(result)
        _warn(warnings)
    if not result["ok"]:
        msg = (
            f"{result['rows_beyond_tol']} of {result['rows']} rows (in "
            f"{result['groups_beyond_tol']} groups) differ from the logged advantages by more "
            f"than --tol {tol:g}"
        )
        if result.get("reproduced_by"):
            msg += f". Hint: {result['reproduced_by']} reproduces them"
        raise AdvantagesDiffer(msg)


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
    nonfinite: Nonfinite = "error",
    engine: Engine = "local",
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Add a `values` column scored by an ONNX critic (CUDA when available, else CPU)."""
    opts = _critic_options(
        critic, device, batch_tokens, shift, max_len, max_len_truncate,
        input_name, mask_name, output_name,
    )  # fmt: skip
    assert opts is not None
    with render.Activity(quiet) as activity, activity.stage("scoring"):
        result = api.score(
            inputs, out, opts, col=col, fmt=fmt, force=force, nonfinite=nonfinite,
            engine=engine, ray_address=ray_address, progress=activity.progress,
        )  # fmt: skip
    _report(f"score: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
@with_preset_options(after="col")
def audit(
    inputs: Inputs,
    col: Col = None,
    as_json: Json = False,
    list_: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--list",
            help="Print the prompt ids of zero-variance or singleton groups (--json: as a list).",
        ),
    ] = None,
    fail_above: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            min=0.0,
            max=1.0,
            help="Exit with status 3 when the zero-variance share of rollouts is above (0 to 1).",
        ),
    ] = None,
    zero_variance_tol: ZeroVarianceTol = 1e-9,
    near_tie: NearTie = None,
    engine: Engine = "local",
    ray_address: RayAddress = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Report zero-variance, near-tie and singleton groups: what carries no group signal."""
    if list_ not in (None, "zero-variance", "singleton"):
        msg = f"expected zero-variance or singleton, saw {list_!r}"
        raise typer.BadParameter(msg, param_hint="--list")
    with render.Activity(quiet=False) as activity, activity.stage("reading the log"):
        found = api.audit(
            inputs, col=col, tol=zero_variance_tol, near_tie=near_tie, preset=preset,
            engine=engine, ray_address=ray_address,
            preset_options=preset_options, progress=activity.progress,
        )  # fmt: skip
    report = found.report
    if list_ and as_json:
        _print_json(found.prompt_ids(list_))
    elif list_:
        for key in found.prompt_ids(list_):
            sys.stdout.write(f"{_one_line(key)}\n")
    elif as_json:
        _print_json(found.as_dict())
    else:
        render.audit_report(", ".join(found.files), report)
    if not as_json:
        _warn(found.warnings)
    if fail_above is not None and report.zero_variance_rollout_share > fail_above:
        msg = (
            f"zero-variance groups hold {report.zero_variance_rollout_share:.1%} of the "
            f"rollouts, above --fail-above {fail_above:g}"
        )
        raise ThresholdExceeded(msg)


_DETAIL = "What the page holds"


@app.command()
@with_preset_options(after="col", methods=True)
@with_method_parameters(after="convention")
def report(
    inputs: Inputs,
    out: Annotated[str, typer.Option("--out", "-o", help="Output .html file.")],
    method: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Show this method's advantages (default: those an annotated log holds)."),
    ] = None,
    convention: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=_CONVENTIONS),
    ] = None,
    col: Col = None,
    force: Force = False,
    quiet: Quiet = False,
    as_json: Json = False,
    near_tie: NearTie = None,
    sample_groups: Annotated[
        int,
        typer.Option(
            min=1, rich_help_panel=_DETAIL, help="Groups the table lists; beyond, a seeded sample."
        ),
    ] = 20_000,
    detail_groups: Annotated[
        int,
        typer.Option(
            min=0,
            rich_help_panel=_DETAIL,
            help="Groups whose rollouts and tokens the page holds (the worst always).",
        ),
    ] = 200,
    token_budget: Annotated[
        int,
        typer.Option(
            min=0,
            rich_help_panel=_DETAIL,
            help="Tokens the page holds in all, shared by those rollouts.",
        ),
    ] = 200_000,
    seed: Annotated[int, typer.Option(rich_help_panel=_DETAIL, help="Seed of the samples.")] = 0,
    params: dict[str, Any] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Write one self-contained HTML page of the log's groups, rewards and advantages."""
    params = params or {}
    options = api.ReportOptions(
        tol=params.get("zero_variance_tol") or 1e-9, near_tie=near_tie, sample_groups=sample_groups,
        detail_groups=detail_groups, token_budget=token_budget, seed=seed,
    )  # fmt: skip
    method_params = {**params, **_shared_params(preset_options)} if method else {}
    with render.Activity(quiet) as activity:
        result = api.report(
            inputs, out, method=method, convention=convention, col=col, force=force,
            options=options, preset=preset, preset_options=preset_options,
            stage=activity.stage, progress=activity.progress, **method_params,
        )  # fmt: skip
    _report(f"report: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
@with_preset_options(after="col")
def shard(
    inputs: Inputs,
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder (must not exist).")],
    method: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=f"Raw logs: one of {', '.join(REGISTRY)}. Annotated logs keep theirs."),
    ] = None,
    convention: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=f"Raw logs: {_CONVENTIONS}"),
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
        typer.Option(help=f"Tokens per shard (default {DEFAULT_TOKENS_PER_SHARD:,})."),
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
    engine: Engine = "local",
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    as_json: Json = False,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
) -> None:
    """Write annotated rollouts as training-ready Parquet shards with a manifest."""
    opts = ShardOptions(
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
        result = api.shard(
            inputs,
            out,
            opts,
            method=method,
            convention=convention,
            param=param,
            col=col,
            preset=preset,
            preset_options=preset_options,
            force=force,
            engine=engine,
            ray_address=ray_address,
            stage=activity.stage,
        )
    _report(f"shard: {out}", result, as_json=as_json, quiet=quiet)


@app.command()
def verify(
    folder: Annotated[
        str, typer.Argument(help="A folder written by advcli shard or annotate --engine ray.")
    ],
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Re-read every shard (or part): checksums, schema, row and token counts against the
    manifest."""
    _report(f"verify: {folder}", api.verify(folder), as_json=as_json, quiet=quiet)


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"advcli {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Offline advantages for logged LLM reinforcement-learning rollouts."""


_METAVARS = {int: "INT", float: "NUMBER", "integer": "INT", "float": "NUMBER"}  # else TEXT


def command() -> Any:
    """The command line as the click command typer makes of :data:`app`, with metavars that
    read as words (INT, NUMBER, TEXT; none for a flag)."""
    group = typer.main.get_command(app)
    for cmd in [group, *getattr(group, "commands", {}).values()]:
        help_option = cmd.get_help_option(typer.Context(cmd))  # made once, then kept
        for param in [*cmd.params, *([help_option] if help_option else [])]:
            if isinstance(param, typer.core.TyperArgument):
                param.metavar = param.name.upper().removesuffix("S")  # INPUT, FOLDER
                # no "<list[str]>" (typer 0.29) or "<str>" (0.28) beside it: the name says it
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
                if hasattr(param, "type"):  # typer 0.28 asks the click type
                    param.type = copy.copy(param.type)
                    param.type.get_metavar = lambda *_, **__: ""
            elif getattr(param, "is_flag", False):
                param.metavar = ""
            else:
                param.metavar = _METAVARS.get(_value_type(param), "TEXT")
        if cmd.callback is not None:
            cmd.callback = _ints_checked(cmd.callback)
    return group


def _ints_checked(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` refusing an integer option beyond int64 (nothing it counts or seeds can
    take one) in one line, before the command runs."""

    @functools.wraps(callback)
    def checked(**values: Any) -> Any:
        for name, value in values.items():
            wide = isinstance(value, int) and not -(1 << 63) <= value < 1 << 63
            if wide and not isinstance(value, bool):
                flag = "--" + name.rstrip("_").replace("_", "-")
                raise UsageError(f"{flag} {value}: too large (at most {(1 << 63) - 1})")
        return callback(**values)

    return checked


def main(args: list[str] | None = None) -> None:
    """Entry point: run the command line, turning every error into one line and an exit code
    (1 bad data, 2 bad usage, 3 audit threshold, 4 check mismatch, 70 a bug, 130 interrupted).
    """
    try:
        code = _run(args)
    except AdvcliError as exc:
        _fail(f"advcli: error: {exc}", exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        if os.environ.get("ADVCLI_DEBUG"):
            traceback.print_exc()
        _interrupted()
    except typer.TyperException as exc:  # bad flags or arguments, as typer found them
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `advcli`: the help, as is
            sys.stderr.write(exc.format_message() + "\n")
            sys.exit(0)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        message = (exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
        _fail(f"advcli: error: {message}{hint}", getattr(exc, "exit_code", 2))
    except (Exception, _Panic) as exc:  # a bug: one line, unless the user asks for the traceback
        if os.environ.get("ADVCLI_DEBUG"):
            raise
        _fail(
            f"advcli: internal error: {type(exc).__name__}: {exc} "
            "(set ADVCLI_DEBUG=1 for the traceback, and please report it)",
            70,
        )
    if code == 130:  # typer caught the interrupt itself
        _interrupted()
    for stop in (signal.SIGINT, *STOPS):  # the work is done: let the exit finish
        signal.signal(stop, signal.SIG_IGN)
    if isinstance(code, int) and code:
        sys.exit(code)


def _run(args: list[str] | None) -> Any:
    tune_allocator()
    warnings.filterwarnings("ignore")  # numbers are checked; no Python warning on a terminal
    np.seterr(all="ignore")
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a parent may mean to ignore it
        # Python's own handler, again after the imports: a native one may have replaced it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    handle_termination()
    # Not standalone, so that typer's own errors reach main's handlers; it returns an exit
    # code where it stopped early (0 after --help, 130 after Ctrl-C).
    return command().main(args=args, prog_name="advcli", standalone_mode=False)


def _interrupted() -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP: the unwinding has removed the temporaries; say so and leave
    at once with 130 or 128 + the signal (a normal exit would wait for, or crash in, native
    threads still writing)."""
    signum = terminated_by()
    for stop in (signal.SIGINT, *STOPS):
        signal.signal(stop, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    sys.stderr.write("advcli: interrupted\n" if signum is None else "advcli: terminated\n")
    sys.stderr.flush()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # e.g. the folder of a converted framework dump
    os._exit(130 if signum is None else 128 + signum)


def _value_type(param: Any) -> Any:
    """What an option takes: ``int`` for ``Optional[int]`` or ``list[int]`` (typer >= 0.29
    describes it by annotation), or the click type's name (``"integer"``, older typer)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return getattr(param.type, "name", None)
    args = [arg for arg in typing.get_args(descriptor.annotation) if arg is not type(None)]
    return args[0] if args else descriptor.annotation


def _fail(message: str, code: int) -> None:
    """One line on stderr (a message of several lines is joined), and the exit code."""
    sys.stderr.write(" ".join(message.split()) + "\n")
    sys.exit(code)
