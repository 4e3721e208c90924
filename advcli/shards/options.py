"""The options of ``advcli shard`` (recorded in the manifest), checked before anything is read."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from advcli import methods
from advcli.errors import UsageError
from advcli.params import Range, check_fields, option, parse_assignments
from advcli.shards import trainers

DEFAULT_TOKENS_PER_SHARD = 1 << 24  # 16 Mi tokens: ~64 MiB of int32 ids before compression
LOSS_WEIGHTS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
# Columns advcli writes; a --keep column may not take one of these names.
OWN_COLUMNS = (
    "prompt_id",
    "rollout_id",
    "segment_index",
    "input_ids",
    "position_ids",
    "seq_lens",
    "loss_mask",
    "advantages",
    "returns",
    "loss_weight",
    trainers.WEIGHTS,
    trainers.MASKED,
)


@dataclass
class ShardOptions:
    """Everything ``advcli shard`` does besides the method (recorded in the manifest)."""

    rows_per_shard: int | None = field(
        default=None,
        metadata=option("Rows per shard (instead of --tokens-per-shard).", range=Range(1)),
    )
    tokens_per_shard: int | None = field(
        default=None,
        metadata=option(
            f"Tokens per shard (default {DEFAULT_TOKENS_PER_SHARD:,}).", range=Range(1)
        ),
    )
    keep: list[str] = field(
        default_factory=list,
        metadata=option("Also write this column, e.g. old_logprobs (repeatable)."),
    )
    drop_zero_variance: bool = field(
        default=False, metadata=option("Leave out rollouts of zero-variance groups.")
    )
    drop_singletons: bool = field(default=False, metadata=option("Leave out groups of one."))
    shuffle: bool = field(
        default=False, metadata=option("A global, seeded, deterministic shuffle.")
    )
    seed: int = field(default=0, metadata=option("Seed of --shuffle.", range=Range(0)))
    keep_groups: bool = field(
        default=False, metadata=option("Keep a group's rollouts adjacent and in one shard.")
    )
    pack: int | None = field(
        default=None,
        metadata=option(
            "Pack rollouts first-fit-decreasing into rows of at most N tokens.", range=Range(1)
        ),
    )
    truncate: bool = field(
        default=False, metadata=option("Cut rollouts longer than --pack N to N tokens (counted).")
    )
    loss_weights: str | None = field(
        default=None,
        metadata=option("Add loss_weight: token-mean, seq-mean-token-mean or seq-mean-token-sum."),
    )
    layout: str = field(
        default="advcli",
        metadata=option(
            "Columns for a trainer: advcli (the sequence as one row), verl (what verl's actor "
            "reads: prompts, responses, response_mask, ...) or trl (prompt_ids, completion_ids, "
            "one advantage per sequence)."
        ),
    )
    split: str | None = field(
        default=None,
        metadata=option("Hold out prompts by hash: val=0.02 writes DIR/train and DIR/val."),
    )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_split(spec: str | None) -> list[tuple[str, float]]:
    """``"val=0.02,test=0.01"`` as ``[("val", 0.02), ("test", 0.01)]``; train takes the rest."""
    if spec is None:
        return []
    out: list[tuple[str, float]] = []
    for item in spec.split(","):
        name, sep, frac = item.strip().partition("=")
        try:
            value = float(frac)
        except ValueError:
            value = float("nan")
        ok = sep and re.fullmatch(r"[A-Za-z0-9_-]+", name) and 0.0 < value < 1.0
        if not ok or name == "train" or name in dict(out):
            msg = (
                f"`split={spec!r}`: expected NAME=FRACTION[,NAME=FRACTION...] with fractions "
                "in (0, 1) and names other than 'train' (train takes the rest). "
                "Hint: `split='val=0.02'`"
            )
            raise UsageError(msg)
        out.append((name, value))
    if sum(v for _, v in out) >= 1.0:
        msg = f"`split={spec!r}`: the fractions add up to 1 or more, leaving nothing to train"
        raise UsageError(msg + ". Hint: `split='val=0.02'`")
    return out


def check_options(opts: ShardOptions) -> list[tuple[str, float]]:
    """Check ``opts`` before reading anything; return the parsed split."""

    check_fields(opts)  # (numpy's generators take no negative seed)
    if opts.rows_per_shard is not None and opts.tokens_per_shard is not None:
        msg = "`rows_per_shard` and `tokens_per_shard`: give one. Hint: drop one of them"
        raise UsageError(msg)
    if opts.truncate and opts.pack is None:
        msg = "`truncate=True` cuts rollouts longer than `pack` N; without `pack` it does nothing"
        raise UsageError(msg + ". Hint: add `pack`, or drop `truncate`")
    if opts.loss_weights is not None and opts.loss_weights not in LOSS_WEIGHTS:
        msg = (
            f"`loss_weights={opts.loss_weights!r}`: expected one of {', '.join(LOSS_WEIGHTS)}. "
            "Hint: `loss_weights='token-mean'`"
        )
        raise UsageError(msg)
    trainer = trainers.get(opts.layout)
    if trainer.name != trainers.DEFAULT:
        for option, given in (("`pack`", opts.pack is not None),
                              ("`loss_weights`", opts.loss_weights is not None)):  # fmt: skip
            if given:
                msg = (
                    f"`layout={trainer.name!r}` with {option}: packed rows and loss weights are "
                    f"advcli's layout; {trainer.name} pads and weighs a batch itself. "
                    f"Hint: drop {option}, or use `layout='advcli'`"
                )
                raise UsageError(msg)
    clash = sorted(set(opts.keep) & {*OWN_COLUMNS, *trainer.columns})
    if clash:
        msg = (
            f"`keep={clash[:1]!r}`: advcli writes a column of that name itself. "
            "Hint: it is already in the shards; drop this `keep`"
        )
        raise UsageError(msg)
    return parse_split(opts.split)


def check_text(items: list[str] | None) -> None:
    """``--param KEY=VALUE`` checked without a method: the text, and what each value can be
    whatever the method (its choices, an integer's range)."""
    for name, value in parse_assignments(items, methods.PARAMETERS).items():
        problem = methods.PARAMETERS[name].kind_problem(value)
        if problem:
            raise UsageError(problem)
