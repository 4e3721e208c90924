"""How to run an ONNX critic: the ``--critic`` options of ``score`` and ``annotate``, declared
once (:func:`advcli.params.option`) for the command line and the Python API."""

from __future__ import annotations

from dataclasses import dataclass, field

from advcli.params import Range, check_fields, option

PANEL = "Critic (ONNX)"  # the help panel of the critic options


@dataclass(frozen=True)
class CriticOptions:
    """How to run an ONNX critic (the ``--critic`` options of ``score`` and ``annotate``)."""

    path: str = field(
        metadata=option(
            "The ONNX critic: it scores the values (annotate: not the log's).",
            flag="--critic",
            panel=PANEL,
        )
    )
    device: str = field(
        default="auto", metadata=option("auto (CUDA when it works), cuda or cpu.", panel=PANEL)
    )
    batch_tokens: int | None = field(
        default=None,
        metadata=option(
            "Padded tokens per critic batch (default 4096, measured on the CPU).",
            panel=PANEL,
            range=Range(1),
        ),
    )
    shift: bool = field(
        default=True,
        metadata=option(
            "The value of token t is the output at t-1 (causal heads).",
            flag="--shift/--no-shift",
            panel=PANEL,
        ),
    )
    max_len: int | None = field(
        default=None,
        metadata=option(
            "Longest row the critic takes (default: the model's static length).",
            panel=PANEL,
            range=Range(1),
        ),
    )
    truncate: str = field(
        default="error",
        metadata=option(
            "A longer row: error, or left (score its last --max-len tokens).",
            flag="--max-len-truncate",
            panel=PANEL,
        ),
    )
    input_name: str | None = field(
        default=None, metadata=option("The model's token-id input.", panel=PANEL)
    )
    mask_name: str | None = field(
        default=None, metadata=option("The model's attention-mask input.", panel=PANEL)
    )
    output_name: str | None = field(
        default=None, metadata=option("The model's value output.", panel=PANEL)
    )

    def __post_init__(self) -> None:
        check_fields(self)
