"""The commands of ``advcli``: each a thin layer over :mod:`advcli.api` that shows its result.

Their options come from :mod:`advcli.cli.options`: made from each command's options dataclass
(:mod:`advcli.commands`), but for those that only show the result, declared here; the
process around them (errors as one line and an exit code, signals) is :mod:`advcli.cli.runner`.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Annotated, Any, Optional, TextIO

import orjson
import typer

from advcli import progress
from advcli._malloc import tune_allocator
from advcli._version import __version__
from advcli.cli.flags import on_command_line, result_on_command_line
from advcli.cli.options import InputsArgument, Json, ProgressMode, Quiet, with_options
from advcli.core.health import ADVISORY_NAMES
from advcli.errors import AdvantagesDiffer, ThresholdExceeded, file_list
from advcli.lazy_imports import pandas_unseen

if TYPE_CHECKING:
    from advcli.results import Result

app = typer.Typer(
    name="advcli",
    help="Offline advantages for logged LLM reinforcement-learning rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXAMPLES = {
    "schema": [
        "advcli schema sample_data/rollouts.parquet",
        "advcli schema sample_data/verl/rollout --from verl --json",
    ],
    "annotate": [
        "advcli annotate sample_data/rollouts.parquet --method grpo --out grpo.parquet",
        "advcli annotate sample_data/verl/rollout --from verl --method rloo --out rloo.parquet",
        "advcli annotate sample_data/rollouts.jsonl --method gae --lam 0.95 --out gae.jsonl",
    ],
    "check": ["advcli check sample_data/trl/completions --from trl"],
    "score": [
        "advcli score sample_data/rollouts.parquet --critic sample_data/critic.onnx "
        "--out scored.parquet",
    ],
    "audit": [
        "advcli audit sample_data/rollouts.parquet --fail-above 0.5",
        "advcli audit sample_data/rollouts.parquet --list zero-variance",
        "advcli audit sample_data/health.parquet --convention verl --correction token-mask",
    ],
    "report": ["advcli report sample_data/rollouts.parquet --method grpo --out report.html"],
    "prompts": [
        "advcli prompts sample_data/verl/rollout --from verl --success 1 --sort trend",
        "advcli prompts sample_data/trl/completions --from trl --success 2 --never-solved "
        "--out never.jsonl",
    ],
    "shard": ["advcli shard sample_data/rollouts.parquet --method grpo --out shards"],
    "verify": ["advcli verify shards"],
    "methods": ["advcli methods", "advcli methods gigpo", "advcli methods gae --json"],
}
"""Each command's examples, shown at the end of its ``--help``. They run on ``sample_data/``
as they are, in this order in one folder (``verify`` reads what ``shard`` wrote): a test
runs them all."""


def _examples(command: str) -> str:
    """A command's examples as typer's epilog, whose paragraphs each become a line."""
    return "\n".join(["Examples:", *(f"  {line}" for line in EXAMPLES[command])])


def _report(
    title: str, found: Result, *, as_json: bool, quiet: bool, out: str | None = None
) -> None:
    """A command's result: JSON on stdout (and nothing on stderr: its warnings are in it), or
    a summary (unless quiet) and the warnings on stderr. With ``--out -`` the output holds
    stdout: the JSON goes to stderr."""
    from advcli import render  # here, not at the top: --help needs none of it

    result = result_on_command_line(found.as_dict(), app)
    warnings = result.pop("warnings", [])
    if as_json:
        _print_json({**result, "warnings": warnings}, sys.stderr if out == "-" else None)
        return
    if not quiet:
        render.summary(title, result)
    _warn(warnings)


def _print_json(obj: object, stream: TextIO | None = None) -> None:
    if isinstance(obj, dict):
        obj = result_on_command_line(obj, app)
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    (stream or sys.stdout).write(orjson.dumps(obj, option=option).decode() + "\n")


def _one_line(key: object) -> str:
    """A prompt id on one line (a prompt's text may span several: then as a JSON string)."""
    text = str(key)
    return orjson.dumps(text).decode() if "\n" in text or "\r" in text else text


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        sys.stderr.write(f"advcli: warning: {on_command_line(warning, app)}\n")


def _write(
    command: str,
    inputs: list[str],
    options: dict[str, Any] | None,
    params: dict[str, Any] | None,
    *,
    quiet: bool,
    as_json: bool,
    mode: str,
    stage: str | None = None,
) -> None:
    """Run a command that writes an output (``annotate``, ``score``, ``report``, ``shard``)
    through its API function, as one progress ``stage`` if given, then show its result (with
    ``--out -``, the JSON on stderr)."""
    from advcli import api, render  # here, not at the top: --help needs none of it

    assert options is not None
    staged = progress.stage(stage) if stage is not None else contextlib.nullcontext()
    with render.Activity(quiet, mode=mode), staged:
        result = getattr(api, command)(inputs, **options, **(params or {}))
    out = options["out"]
    _report(f"{command}: {out}", result, as_json=as_json, quiet=quiet, out=out)


@app.command(epilog=_examples("schema"))
@with_options("advcli.commands.schema:SchemaCommand")
def schema(
    inputs: InputsArgument,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
) -> None:
    """Show the detected column roles, types, row count and token statistics."""
    from advcli import render  # here, not at the top: --help needs none of it
    from advcli.commands import schema as command  # without the rest of the API

    activity = render.Activity(quiet=False, mode=progress_mode)
    with pandas_unseen(), activity, progress.stage("reading the log"):
        info = command.schema(inputs, **(options or {}))
    if as_json:
        _print_json(info.as_dict())
    else:
        render.schema_report(file_list(info.files), result_on_command_line(info.as_dict(), app))
        _warn(info.warnings)


@app.command(epilog=_examples("annotate"))
@with_options("advcli.commands.annotate:AnnotateCommand")
def annotate(
    inputs: InputsArgument,
    quiet: Quiet = False,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """Write the log back with per-token advantages and group statistics."""
    _write("annotate", inputs, options, params, quiet=quiet, as_json=as_json, mode=progress_mode)


@app.command(epilog=_examples("check"))
@with_options("advcli.commands.check:CheckCommand")
def check(
    inputs: InputsArgument,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """Recompute the advantages a framework logged (TRL, NeMo-RL, prime-rl) and compare."""
    from advcli import api, render  # here, not at the top: --help needs none of it

    with render.Activity(quiet=False, mode=progress_mode):
        result = api.check(inputs, **(options or {}), **(params or {}))
    if as_json:
        _print_json(result.as_dict())
    else:
        render.check_report(result_on_command_line(result.as_dict(), app))
        _warn(result.warnings)
    if not result.ok:
        msg = (
            f"{result.rows_beyond_tol} of {result.rows} rows (in {result.groups_beyond_tol} "
            f"groups) differ from the logged advantages by more than --tol {result.tol:g}"
        )
        if result.reproduced_by:
            msg += f". Hint: {result.reproduced_by} reproduces them"
        raise AdvantagesDiffer(msg)


@app.command(epilog=_examples("score"))
@with_options("advcli.commands.score:ScoreCommand")
def score(
    inputs: InputsArgument,
    quiet: Quiet = False,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
) -> None:
    """Add a `values` column scored by an ONNX critic (CUDA when available, else CPU)."""
    _write(
        "score",
        inputs,
        options,
        None,
        quiet=quiet,
        as_json=as_json,
        mode=progress_mode,
        stage="scoring",
    )


@app.command(epilog=_examples("audit"))
@with_options("advcli.commands.audit:AuditCommand")
def audit(
    inputs: InputsArgument,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
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
    fail_on: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            metavar="NAME",
            help="Exit with status 3 when this advisory fires (repeatable): "
            + ", ".join(ADVISORY_NAMES)
            + ".",
        ),
    ] = None,
    options: dict[str, Any] | None = None,
) -> None:
    """A log's health: groups without signal, staleness, lengths, entropy, mismatch, advisories."""
    from advcli import api, render  # here, not at the top: --help needs none of it

    if list_ not in (None, "zero-variance", "singleton"):
        msg = f"expected zero-variance or singleton, saw {list_!r}"
        raise typer.BadParameter(msg, param_hint="--list")
    for name in fail_on or []:
        if name not in ADVISORY_NAMES:
            msg = f"expected one of {', '.join(ADVISORY_NAMES)}, saw {name!r}"
            raise typer.BadParameter(msg, param_hint="--fail-on")
    # pandas is never used by a local audit (a Ray cluster's workers may want it)
    local = (options or {}).get("engine", "local") == "local"
    with (
        pandas_unseen() if local else contextlib.nullcontext(),
        render.Activity(quiet=False, mode=progress_mode),
        progress.stage("reading the log"),
    ):
        found = api.audit(inputs, **(options or {}))
    report = found.report
    if list_ and as_json:
        _print_json(found.prompt_ids(list_))
    elif list_:
        for key in found.prompt_ids(list_):
            sys.stdout.write(f"{_one_line(key)}\n")
    elif as_json:
        _print_json(found.as_dict())
    else:
        render.audit_report(file_list(found.files), report)
        render.health_sections(found.sections)
    if not as_json:
        _warn(found.warnings)
    if fail_above is not None and report.zero_variance_rollout_share > fail_above:
        msg = (
            f"zero-variance groups hold {report.zero_variance_rollout_share:.1%} of the "
            f"rollouts, above --fail-above {fail_above:g}"
        )
        raise ThresholdExceeded(msg)
    fired = [name for name in fail_on or [] if name in found.sections.get("advisories", {})]
    if fired:
        lines = found.sections["advisories"]
        raise ThresholdExceeded("; ".join(f"{name}: {lines[name]}" for name in fired))


@app.command(epilog=_examples("report"))
@with_options("advcli.commands.report:ReportCommand")
def report(
    inputs: InputsArgument,
    quiet: Quiet = False,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """Write one self-contained HTML page of the log's groups, rewards and advantages.

    --zero-variance-tol, a method parameter (advcli methods NAME), is the page's zero-variance
    test too.
    """
    _write("report", inputs, options, params, quiet=quiet, as_json=as_json, mode=progress_mode)


@app.command(epilog=_examples("prompts"))
@with_options("advcli.commands.prompts:PromptsCommand")
def prompts(
    inputs: InputsArgument,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    top: Annotated[
        int,
        typer.Option(min=0, help="Prompts the table shows (0: all); --json and --out hold all."),
    ] = 20,
    options: dict[str, Any] | None = None,
) -> None:
    """Every prompt's history across a run: pass rate by step, solved, forgotten; a curriculum."""
    from advcli import api, render  # here, not at the top: --help needs none of it

    # pandas is never used (pyarrow's dataset module would import it: 0.2 s)
    with pandas_unseen(), render.Activity(quiet=False, mode=progress_mode):
        found = api.prompts(inputs, **(options or {}))
    if as_json:
        _print_json(found.as_dict())
        return
    shown = result_on_command_line(found.as_dict(), app)
    render.prompts_table(render.log_name(found.files), shown, top)
    _warn(found.warnings)


@app.command(epilog=_examples("shard"))
@with_options("advcli.commands.shard:ShardCommand")
def shard(
    inputs: InputsArgument,
    quiet: Quiet = False,
    as_json: Json = False,
    progress_mode: ProgressMode = "auto",
    options: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """Write annotated rollouts as training-ready Parquet shards with a manifest."""
    _write("shard", inputs, options, params, quiet=quiet, as_json=as_json, mode=progress_mode)


@app.command("methods", epilog=_examples("methods"))
def methods_command(
    name: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(help="A method: show its parameters, defaults and formula."),
    ] = None,
    as_json: Json = False,
) -> None:
    """List the methods, or show one's parameters, defaults and formula."""
    from advcli import render  # here, not at the top: --help needs none of it
    from advcli.commands.methods import describe_method, list_methods

    found = list_methods() if name is None else describe_method(name)
    if as_json:
        _print_json(found.as_dict())
    elif name is None:
        render.method_list(found.as_dict())
    else:
        render.method_help(found.as_dict())


@app.command(epilog=_examples("verify"))
def verify(
    folder: Annotated[
        str, typer.Argument(help="A folder written by advcli shard or annotate --engine ray.")
    ],
    quiet: Quiet = False,
    as_json: Json = False,
) -> None:
    """Re-read every shard (or part): checksums, schema, rows and tokens against the manifest."""
    from advcli import api  # here, not at the top: --help needs none of it

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
    tune_allocator()  # here, before a command runs: advcli --help never gets this far
