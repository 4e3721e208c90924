"""``correction`` and ``correction_bounds`` (``annotate``, ``shard``): the rollout-correction
mode a command was given, resolved once into a :class:`~advcli.core.correction.Correction`, and
the per-token columns it adds to each batch of the final pass (``is_weights``, ``is_mask``).

The arithmetic is :func:`advcli.core.correction.corrected`; this module reads its options, the
two log-prob streams it compares (the sampler's ``logprobs``, the trainer's
``trainer_logprobs``), and counts what it masked for the summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from advcli.core.correction import (
    DEFAULT_HI,
    MODES,
    TRL_DEFAULT_HI,
    Correction,
    bounds_problem,
    corrected,
    default_lo,
    mode_named,
)
from advcli.core.ragged import row_of
from advcli.errors import SchemaError, UsageError, columns_found, did_you_mean, file_list
from advcli.io.arrow import flat_list, list_array
from advcli.io.schema import ROLES, Roles
from advcli.io.sources import Sources
from advcli.io.tokens import Tokens
from advcli.lazy_imports import np, pa

STREAMS = ("logprobs", "trainer_logprobs")
"""The token roles a correction reads: the sampler's log-probs and the trainer's."""
WEIGHTS, MASK = "is_weights", "is_mask"
"""The per-token columns a correction writes: float32 weights, int8 1 where masked."""

FLAVOUR_OF = {
    "verl": "verl",
    "trl": "trl",
    "nemo-rl": "nemo-rl",
    "nemo_rl": "nemo-rl",
    "nemo-rl-pre-4158": "nemo-rl",
    "slime": "miles",
    "miles": "miles",
}
"""The arithmetic of a convention's framework (``--convention``, or ``--from``'s); any other
convention computes as advcli does."""


def correction_of(
    correction: str | None, bounds: str | None, convention: str | None
) -> Correction | None:
    """The correction a command was given (None: none), its arithmetic that of
    ``convention``'s framework. ``bounds`` is ``"HI"`` or ``"LO,HI"``; without them HI is 2
    (verl's ``rollout_is_threshold``, slime's ``--tis-clip``), 3 under TRL's convention
    (``vllm_importance_sampling_clip_max``), and LO :func:`~advcli.core.correction.default_lo`;
    verl's rejection modes have no default and need them."""
    if correction is None:
        if bounds is not None:
            msg = (
                "`correction_bounds` bound a correction: add `correction` "
                "(e.g. `correction='token-truncate'`)"
            )
            raise UsageError(msg)
        return None
    mode = mode_named(correction)
    if mode is None:
        modes = ", ".join(MODES)
        hint = did_you_mean(correction, [*MODES, *sorted(FLAVOUR_OF)])
        raise UsageError(f"`correction={correction!r}`: expected one of {modes}.{hint}")
    flavour = FLAVOUR_OF.get(convention or "", "advcli")
    if bounds is None:
        if mode.kind == "reject":
            msg = (
                f"`correction={mode.name!r}` rejects by a threshold with no default (verl's "
                "rollout_rs_threshold). Hint: give it as `correction_bounds`, e.g. "
                f"`correction_bounds='{'0.5,2' if mode.statistic == 'k1' else '0.01'}'`"
            )
            raise UsageError(msg)
        hi = TRL_DEFAULT_HI if flavour == "trl" else DEFAULT_HI
        return Correction(mode, default_lo(mode, hi), hi, flavour)
    lo, hi = _bounds(bounds)
    if (problem := bounds_problem(mode, lo, hi)) is not None:
        raise UsageError(f"`correction_bounds={bounds!r}` for {mode.name}: {problem}")
    return Correction(mode, default_lo(mode, hi) if lo is None else lo, hi, flavour)


def _bounds(text: str) -> tuple[float | None, float]:
    """``"HI"`` or ``"LO,HI"`` as numbers (LO None where only HI is given)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or not all(math.isfinite(x) for x in numbers):
        msg = f"`correction_bounds={text!r}`: expected HI or LO,HI, two numbers such as 0.5,2"
        raise UsageError(msg)
    return (None, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1])


def require_streams(roles: Roles, columns: list[str], sources: Sources) -> None:
    """A :class:`SchemaError` naming the log-prob stream a correction needs and the log lacks."""
    for role in STREAMS:
        if roles[role] is None:
            whose = "sampler's" if role == "logprobs" else "trainer's"
            aliases = ", ".join(ROLES[role][1])
            msg = (
                f"{file_list(sources.files)}: `correction` weighs the trainer's log-probs against "
                f"the sampler's, and the log has no '{role}' column (the {whose}; also read as "
                f"{aliases}). {columns_found(columns)}. Hint: name it with "
                f"`col=['{role}=COLUMN']`, or drop `correction`"
            )
            raise SchemaError(msg)


def described(correction: Correction) -> dict[str, Any]:
    """The correction as the output's metadata and the summary record it."""
    return {
        "mode": correction.mode.name,
        "lo": correction.lo,
        "hi": correction.hi,
        "flavour": correction.flavour,
    }


def correction_columns(correction: Correction, tokens: Tokens) -> dict[str, np.ndarray]:
    """A batch's ``is_weights`` (float32) and ``is_mask`` (int8) per token: rows are whole in a
    batch, so a sequence mode sees every token of its row."""
    found = corrected(
        tokens.extra["trainer_logprobs"],
        tokens.extra["logprobs"],
        tokens.mask,
        tokens.offsets,
        correction,
    )
    return {
        WEIGHTS: found.weights.astype(np.float32),
        MASK: found.masked.astype(np.int8),
    }


def token_list(flat: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A per-token column as written: int8 lists for the mask, float32 for any other."""
    dtype = np.int8 if flat.dtype == np.int8 else np.float32
    return list_array(np.asarray(flat, dtype=dtype), offsets)


@dataclass
class Masked:
    """What a correction masked in the rows written: action tokens, and rows with one."""

    tokens: int = 0
    rows: int = 0

    def add(self, table: pa.Table) -> None:
        if MASK not in table.column_names:
            return
        flat, offsets = flat_list(table.column(MASK))
        masked = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=bool)
        self.tokens += int(masked.sum())
        self.rows += len(np.unique(row_of(offsets)[masked]))

    def merge(self, other: Masked) -> None:
        self.tokens += other.tokens
        self.rows += other.rows
