"""Rollout correction: the importance weight and mask a trainer puts on each action token.

Two log-prob streams score the same tokens: the sampler's (the inference engine that generated
them) and the trainer's (the policy recomputing them). On action token t of row i,

    δ_t = log π_trainer(t) − log π_sampler(t),        ρ_t = exp(δ_t),

and a row's sequence ratio is ρ_seq = exp(Σ_t δ_t) over its action tokens. A mode turns these
into a weight w_t (what the trainer multiplies the token's loss by) and a mask m_t (1: the mode
threw the token away; its weight is then 0):

- ``token-truncate`` (TIS): w_t = clip(ρ_t, LO, HI);
  ``sequence-truncate``: w_t = clip(ρ_seq, LO, HI).
- ``token-mask`` (IcePop, MIS): w_t = ρ_t if LO ≤ ρ_t ≤ HI, else 0 and masked;
  ``sequence-mask``: the same with ρ_seq, the whole row kept or masked.
- ``seq-mask-tis`` (NeMo-RL): a row is kept when its geometric-mean ratio exp(mean_t δ_t) lies
  in [LO, HI], its tokens then weighted by their own ρ_t; else masked.
- rejection (verl's ``rollout_rs``, weight 1 where kept): with k1_t = −δ_t, k2_t = ½δ_t²,
  k3_t = ρ_t − 1 − δ_t, ``token-kN`` masks tokens and ``seq-{sum,mean,max}-kN`` whole rows whose
  statistic (the token's, or the row's sum / mean / max of it) exceeds HI; k1 keeps the
  statistic within [log LO, log HI] (so, as in verl, k1 bounds are ratios).

Tokens that are not actions get weight 1 and are never masked. The flavour reproduces a
framework's arithmetic where it departs from the definition: ``verl`` clamps δ (token modes) or
Σδ (sequence modes) to ±20 before exponentiating, and every k statistic is of the clamped δ
(each δ clamped before a sequence mode reduces it); ``nemo-rl`` turns a ratio that overflows
to infinity into 0 before truncating or masking; ``advcli``, ``trl`` and ``miles`` use δ as
it is (a ratio that overflows is +inf: truncated to HI, masked by a mask).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from advcli.core.ragged import row_of
from advcli.lazy_imports import np

Level = Literal["token", "sequence"]
Kind = Literal["truncate", "mask", "geometric", "reject"]

VERL_SAFETY_BOUND = 20.0  # verl's clamp on a log-ratio before exp (rollout_corr_helper.py)
FLAVOURS = ("advcli", "verl", "trl", "nemo-rl", "miles")


@dataclass(frozen=True)
class Mode:
    """A correction mode: its level, what it does outside its bounds, and for rejection the
    statistic (``k1``/``k2``/``k3``) and how a sequence mode reduces it over a row
    (``sum``/``mean``/``max``; None: per token)."""

    name: str
    level: Level
    kind: Kind
    statistic: str | None = None
    reduce: str | None = None
    help: str = ""

    @property
    def two_sided(self) -> bool:
        """Whether the mode takes a lower bound (rejection on k2/k3 takes only HI)."""
        return self.kind != "reject" or self.statistic == "k1"


def _rejection_modes() -> list[Mode]:
    out = [
        Mode(f"token-k{k}", "token", "reject", f"k{k}", None, f"verl rollout_rs token_k{k}")
        for k in (1, 2, 3)
    ]
    for reduce in ("sum", "mean", "max"):
        for k in (1, 2, 3):
            if reduce == "max" and k == 1:
                continue  # verl has no seq_max_k1
            out.append(
                Mode(
                    f"seq-{reduce}-k{k}",
                    "sequence",
                    "reject",
                    f"k{k}",
                    reduce,
                    f"verl rollout_rs seq_{reduce}_k{k}",
                )  # fmt: skip
            )
    return out


MODES: dict[str, Mode] = {
    m.name: m
    for m in [
        Mode("token-truncate", "token", "truncate", help="TIS: min(max(ρ, LO), HI) per token"),
        Mode("token-mask", "token", "mask", help="IcePop / MIS: ρ inside [LO, HI], else 0"),
        Mode("sequence-truncate", "sequence", "truncate", help="ρ_seq truncated, on every token"),
        Mode("sequence-mask", "sequence", "mask", help="ρ_seq inside [LO, HI], else the row 0"),
        Mode(
            "seq-mask-tis",
            "sequence",
            "geometric",
            help="NeMo-RL: rows whose geometric-mean ratio is outside [LO, HI] masked",
        ),  # fmt: skip
        *_rejection_modes(),
    ]
}

# The frameworks' own spellings of the same modes
ALIASES: dict[str, str] = {
    "token_truncate": "token-truncate",
    "token_mask": "token-mask",
    "sequence_truncate": "sequence-truncate",
    "sequence_mask": "sequence-mask",
    "tis": "token-truncate",
    "icepop": "token-mask",
    **{m.name.replace("-", "_"): m.name for m in MODES.values() if m.kind == "reject"},
}

DEFAULT_HI = 2.0  # verl's rollout_is_threshold, slime/miles' --tis-clip
TRL_DEFAULT_HI = 3.0  # TRL's vllm_importance_sampling_clip_max (the old cap)


def mode_named(name: str) -> Mode | None:
    """The mode of a name or of a framework's spelling of it (None: no such mode)."""
    return MODES.get(ALIASES.get(name, name))


@dataclass(frozen=True)
class Correction:
    """A mode with its bounds (LO: 0 for no lower bound) and the flavour of arithmetic."""

    mode: Mode
    lo: float
    hi: float
    flavour: str = "advcli"


def bounds_problem(mode: Mode, lo: float | None, hi: float) -> str | None:
    """Why bounds do not suit a mode (None: they do)."""
    if not math.isfinite(hi) or hi <= 0:
        return f"the upper bound must be a positive number, saw {hi:g}"
    if lo is None:
        return None
    if not mode.two_sided:
        return f"{mode.name} takes one bound, the most its statistic may reach"
    if not math.isfinite(lo) or lo < 0 or lo > hi:
        return f"the lower bound must be from 0 to the upper bound {hi:g}, saw {lo:g}"
    if lo == 0 and mode.statistic == "k1":
        return "a k1 lower bound is a ratio and must be above 0"
    return None


def default_lo(mode: Mode, hi: float) -> float:
    """LO when only HI is given: 0 (no lower bound), 1/HI for k1 (verl's default)."""
    return 1.0 / hi if mode.statistic == "k1" else 0.0


@dataclass(frozen=True)
class Corrected:
    """A correction applied to a batch of rows, per token (flat, as the log-probs).

    ``weights``: w_t (1 off action tokens); ``masked``: the action tokens the mode threw away;
    ``raw``: what the mode compares with its bounds, on action tokens (ρ_t; ρ_seq or the
    geometric-mean ratio repeated over the row; the k statistic, the row's for sequence
    modes), NaN elsewhere."""

    weights: np.ndarray
    masked: np.ndarray
    raw: np.ndarray


def row_sums(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row: the sum of its elements (float64, 0 for an empty row)."""
    return np.bincount(row_of(offsets), weights=x, minlength=len(offsets) - 1)


def corrected(
    trainer: np.ndarray,
    sampler: np.ndarray,
    action: np.ndarray,
    offsets: np.ndarray,
    correction: Correction,
) -> Corrected:
    """Weights and masks of ``correction`` over rows of tokens (``offsets`` from 0; ``action``
    the action tokens; the log-probs need only be finite on those)."""
    mode, flavour = correction.mode, correction.flavour
    lo, hi = correction.lo, correction.hi
    action = action.astype(bool)
    delta = np.where(action, np.asarray(trainer, np.float64) - np.asarray(sampler, np.float64), 0.0)
    row = row_of(offsets)
    n_actions = np.bincount(row, weights=action, minlength=len(offsets) - 1)
    if flavour == "verl" and (mode.level == "token" or mode.kind == "reject"):
        delta = np.clip(delta, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
    with np.errstate(over="ignore", invalid="ignore"):
        if mode.kind == "reject":
            raw, keep = _rejection(mode, delta, action, row, n_actions, lo, hi, flavour)
            weights = np.ones_like(delta)
        else:
            if mode.kind == "truncate" or mode.kind == "mask":
                log_ratio = delta if mode.level == "token" else row_sums(delta, offsets)[row]
                if flavour == "verl" and mode.level == "sequence":
                    log_ratio = np.clip(log_ratio, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
            else:  # geometric: the row's mean log-ratio
                mean = row_sums(delta, offsets) / np.maximum(n_actions, 1)
                log_ratio = mean[row]
            raw = np.exp(log_ratio)
            if flavour == "nemo-rl":
                raw[np.isinf(raw)] = 0.0
            if mode.kind == "truncate":
                weights, keep = np.clip(raw, lo, hi), np.ones(len(raw), dtype=bool)
            else:
                keep = (raw >= lo) & (raw <= hi)
                own = np.exp(delta) if mode.kind == "geometric" else raw
                if flavour == "nemo-rl":
                    own[np.isinf(own)] = 0.0
                weights = own
    masked = action & ~keep
    weights = np.where(action & keep, weights, np.where(action, 0.0, 1.0))
    return Corrected(weights, masked, np.where(action, raw, np.nan))


def _rejection(
    mode: Mode,
    delta: np.ndarray,
    action: np.ndarray,
    row: np.ndarray,
    n_actions: np.ndarray,
    lo: float,
    hi: float,
    flavour: str,
) -> tuple[np.ndarray, np.ndarray]:
    """verl's rejection: the statistic per token (a sequence mode's, the row's) and which
    tokens it keeps."""
    k = {
        "k1": -delta,
        "k2": 0.5 * delta**2,
        "k3": np.exp(delta) - 1.0 - delta,
    }[mode.statistic or ""]
    k = np.where(action, k, 0.0)
    if mode.reduce is None:
        stat = k
    elif mode.reduce == "max":
        most = np.full(len(n_actions), -np.inf)
        np.maximum.at(most, row[action], k[action])
        stat = np.where(np.isinf(most), 0.0, most)[row]  # verl: a row without actions, 0
    else:
        total = np.bincount(row, weights=k, minlength=len(n_actions))
        # verl's masked_mean divides by the count + 1e-8
        count = n_actions + 1e-8 if flavour == "verl" else np.maximum(n_actions, 1)
        stat = (total if mode.reduce == "sum" else total / count)[row]
    if mode.statistic != "k1":
        return stat, stat <= hi
    return stat, (stat >= math.log(lo)) & (stat <= math.log(hi))
