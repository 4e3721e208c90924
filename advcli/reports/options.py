"""What ``report`` keeps and shows: its options, declared once (:func:`advcli.params.option`)
for the command line and the Python API."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advcli.core.group import ZERO_VARIANCE_TOL
from advcli.params import Range, check_fields, option

PANEL = "What the page holds"  # the help panel of the options that bound the detail
COMPARE = "Compare"  # the help panel of --compare, --steps and --label


@dataclass(frozen=True)
class ReportOptions:
    """How much ``report`` keeps: every aggregate always; these bound the detail."""

    tol: float = ZERO_VARIANCE_TOL  # zero-variance: max - min <= tol (--zero-variance-tol)
    near_tie: float | None = field(
        default=None,
        metadata=option(
            "A group is a near-tie when its reward std is below this (default: "
            "0.05 x the log's reward range).",
            range=Range(0),
        ),
    )
    sample_groups: int = field(
        default=20_000,
        metadata=option(
            "Groups the table lists; beyond, a seeded sample.", range=Range(1), panel=PANEL
        ),
    )
    detail_groups: int = field(
        default=200,
        metadata=option(
            "Groups whose rollouts and tokens the page holds (the worst always).",
            range=Range(0),
            panel=PANEL,
        ),
    )
    token_budget: int = field(
        default=200_000,
        metadata=option(
            "Tokens the page holds in all, shared by those rollouts.", range=Range(0), panel=PANEL
        ),
    )
    seed: int = field(
        default=0, metadata=option("Seed of the samples.", range=Range(0), panel=PANEL)
    )
    tokenizer: str | None = field(
        default=None,
        metadata=option(
            "A local tokenizer.json or model folder (Hugging Face tokenizers, the advcli text "
            "extra): the token view shows each token's text; a text log's token ids are made "
            "from its text with it (--tokenizer of annotate). Never downloaded.",
            panel=PANEL,
        ),
    )
    compare: list[str] | None = field(
        default=None,
        metadata=option(
            "Another log (a file or folder, read with the same --from, --col and --method) "
            "shown beside this one: overviews, distributions, the prompts all hold. Repeatable.",
            panel=COMPARE,
        ),
    )
    steps: str | None = field(
        default=None,
        metadata=option(
            "Trainer steps of the log side by side (its 'step' column): '10,200', "
            "'10,50,200', or '10:200' (every step from 10 to 200).",
            panel=COMPARE,
        ),
    )
    label: str | None = field(
        default=None,
        metadata=option(
            "The sides' names, one each, as 'a,b,c' (default: the logs' names, or the steps).",
            panel=COMPARE,
        ),
    )
    bins: int = 40  # of each histogram

    def __post_init__(self) -> None:
        check_fields(self)
        if isinstance(self.compare, (str, os.PathLike)):  # one log, as before it repeated
            object.__setattr__(self, "compare", [os.fspath(self.compare)])
