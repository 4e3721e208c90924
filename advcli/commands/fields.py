"""The options several commands take, each declared once here as a field of the commands'
options dataclasses (``col: list[str] | None = col()``): the command line and the Python API
both read them from there (:mod:`advcli.params`). Light: ``--help`` imports this module."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from advcli.core.conventions import CONVENTIONS
from advcli.core.group import ZERO_VARIANCE_TOL
from advcli.io.retokenize import MAX_RETOKENIZE_MISMATCH
from advcli.params import OptionHelp, Range, option, options_of
from advcli.presets import PRESETS, PresetOptions
from advcli.presets.base import FROM

RAY = "Beyond one machine (Ray)"  # the help panel of --engine and --ray-address

METHOD_PARAMETERS = (
    "advcli methods lists the methods; advcli methods NAME shows one's parameters, which this "
    "command takes as flags (--lam 0.9)."
)
"""Where a command that runs a method sends its --help reader for the method parameters, which
its --help leaves out (every method's would fill several screens)."""

CONVENTION = (
    ", ".join([*CONVENTIONS][:-1]) + f" or {[*CONVENTIONS][-1]} defaults (default: the "
    "framework's own with --from, else advcli's; seed is advcli's former name)."
)


FILE_OUT = (
    "Output .parquet or .jsonl file; - for standard output (JSONL, or Arrow IPC with "
    "--format arrow)."
)
"""The help of ``annotate``'s and ``score``'s ``--out``."""


def out_option(help: str) -> dict[str, OptionHelp]:
    """The metadata of the output's field (``--out``, ``-o``; required: ``field(metadata=...)``
    without a default, as the type checker reads it)."""
    return option(help, flag="--out", short="-o")


def method_option(help: str) -> dict[str, OptionHelp]:
    """The metadata of the estimator's field (``--method``), its help followed by the hint to
    its parameters."""
    return option(f"{help} {METHOD_PARAMETERS}")


def method(help: str) -> Any:
    """An estimator that the command may go without (``--method``)."""
    return field(default=None, metadata=method_option(help))


def convention(help: str = CONVENTION) -> Any:
    return field(default=None, metadata=option(help))


def col() -> Any:
    return field(
        default=None,
        metadata=option("Map a role to a column: --col reward=score (repeatable).", flag="--col"),
    )


def output_format() -> Any:
    return field(
        default=None,
        metadata=option(
            "parquet or jsonl (default: from --out); arrow with --out -.", flag="--format"
        ),
    )


def force(help: str = "Replace an existing output.") -> Any:
    return field(default=False, metadata=option(help, flag="--force/--no-force"))


def nonfinite() -> Any:
    return field(
        default="error",
        metadata=option("A NaN or infinity bound for a JSONL output: error, or null (counted)."),
    )


def engine() -> Any:
    return field(
        default="local",
        metadata=option(
            "local, or ray: one task per input Parquet file (or row range of a large one) on a "
            "Ray cluster; other logs (JSONL, --from dumps) are read once into Ray's object store "
            "(annotate, score: --out is then a folder of parts and a manifest; score takes a GPU "
            "a task where the cluster has GPUs; shard writes the same shards from here; needs "
            "the ray extra).",
            panel=RAY,
        ),
    )


def ray_address() -> Any:
    return field(
        default=None,
        metadata=option(
            "The cluster's head (host:port; default: RAY_ADDRESS, else a local Ray on every core).",
            panel=RAY,
        ),
    )


def from_() -> Any:
    """``--from``: the framework whose log it is."""
    return field(
        default=None,
        metadata=option(
            f"Read the log as this framework writes it: {', '.join(PRESETS)}.",
            flag="--from",
            panel=FROM,
        ),
    )


def preset_options() -> Any:
    """What some frameworks' logs need (:class:`PresetOptions`; their options follow
    ``--from``)."""
    return field(default=None, metadata=options_of(PresetOptions))


def zero_variance_tol() -> Any:
    return field(
        default=ZERO_VARIANCE_TOL,
        metadata=option(
            "A group is zero-variance when max - min <= this.",
            flag="--zero-variance-tol",
            range=Range(0),
        ),
    )


def near_tie() -> Any:
    return field(
        default=None,
        metadata=option(
            "A group is a near-tie when its reward std is below this "
            "(default: 0.05 x the log's reward range).",
            range=Range(0),
        ),
    )


CORRECTION = "Rollout correction"  # the help panel of --correction and --correction-bounds


CORRECTION_MODES = (
    "token-truncate, token-mask, sequence-truncate, sequence-mask, seq-mask-tis, token-k1..3, "
    "seq-{sum,mean,max}-k1..3 (see docs/correction.md)."
)


def correction(
    help: str = "Write per-token importance weights (is_weights) and masks (is_mask) from the "
    "logprobs and trainer_logprobs streams: ",
) -> Any:
    """``--correction MODE``: the rollout correction (``help`` says what the command does with
    it, before the modes)."""
    return field(default=None, metadata=option(help + CORRECTION_MODES, panel=CORRECTION))


def correction_bounds() -> Any:
    """``--correction-bounds LO,HI``: the bounds of ``--correction``."""
    return field(
        default=None,
        metadata=option(
            "HI or LO,HI (default HI 2, 3 under trl; LO 0; rejection modes need them).",
            panel=CORRECTION,
        ),
    )


PROMPTS = "Prompts"  # the help panel of --keep-prompts and --drop-prompts


def keep_prompts() -> Any:
    """``--keep-prompts FILE``: only the rows of the prompts a ``prompts --out`` file lists."""
    return field(
        default=None,
        metadata=option(
            "Only the rows of the prompts this file (advcli prompts --out) lists, matched by "
            "text, else tokens, else id.",
            panel=PROMPTS,
        ),
    )


def drop_prompts() -> Any:
    """``--drop-prompts FILE``: the log less the rows of the prompts a file lists."""
    return field(
        default=None,
        metadata=option(
            "Leave out the rows of the prompts this file lists.",
            panel=PROMPTS,
        ),
    )


def tokenizer() -> Any:
    """``--tokenizer PATH``: a text log's token ids, made from its prompt and completion."""
    return field(
        default=None,
        metadata=option(
            "A tokenizer.json or model folder: a text dump's token ids made from its "
            "text (docs/text.md).",
            panel=FROM,
        ),
    )


def max_retokenize_mismatch() -> Any:
    return field(
        default=MAX_RETOKENIZE_MISMATCH,
        metadata=option(
            "--tokenizer: the share of rows whose token count may differ from the dump's "
            "response_length.",
            range=Range(0, 1),
            panel=FROM,
        ),
    )
