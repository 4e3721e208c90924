"""The mismatch between the trainer's and the sampler's log-probs of the same tokens, streamed.

On every action token t, δ_t = log π_trainer(a_t) − log π_sampler(a_t) and ρ_t = exp(δ_t). A
*sequence* is a row with at least one action token; its n_i action tokens give the per-sequence
mean m_i(x) = Σ_t x_t / n_i. advcli's own figures (:meth:`MismatchStats.figures`):

- k1 = −δ, k2 = δ²/2, k3 = exp(δ) − 1 − δ (verl's naming: k1's mean is verl's ``kl``, the
  direct estimate of KL(sampler ‖ trainer)); each as the mean over tokens and the mean over
  sequences of m_i;
- mean δ, mean |δ|, min and max δ; mean |Δp| = |exp(trainer) − exp(sampler)|;
- χ²: token mean(exp(2 c(δ))) − 1, sequence mean_i(exp(2 c(Σ_i δ))) − 1, with c clamping to
  [−20, 20] as verl does; the perplexity ratio mean_i exp(−m_i(δ)) (trainer's over sampler's);
- ρ's distribution: quantiles from a histogram of δ (:data:`HISTOGRAM_BINS` bins of width
  :data:`BIN_WIDTH` over [−20, 20], plus an under- and an overflow bin), each within half a bin
  of np.quantile's linear one in δ, so within a factor exp(±BIN_WIDTH/2) (±0.031%) in ρ; one in
  an outer bin is the exact min or max. Min, max, mean and the shares outside [0.5, 2] and
  [0.9, 1.1] are exact;
- the effective sample size ESS = 1 / mean((w / mean w)²) (verl's, without its clamp), of ρ
  (c(δ)) and, with a correction, of its weights;
- with a correction (its per-token ``weights`` and ``masked``): the share of action tokens
  masked, of sequences with a masked token, of groups with such a sequence; masked tokens by
  their rollout's advantage sign; the share of masked rollouts that were correct;
- per turn (turns are maximal runs of action tokens within a row; shown when a row has two):
  tokens, mean |δ| and mean k3 of the k-th turn of every row, and with a correction the
  tokens it masked.

Every figure is a ratio of sums, a min or a max, so batches :meth:`~MismatchStats.add`-ed one by
one, or parts :meth:`~MismatchStats.merge`-d, give the numbers of the whole log, in memory
bounded by the histogram and the group codes. Log-probs must be finite (the reader refuses
others). :meth:`~MismatchStats.framework_metrics` gives each framework's own logged metrics
(:mod:`advcli.core.mismatch_frameworks`); a framework's mean over a training batch equals the
figure over a log holding that one batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from advcli.core.correction import corrected
from advcli.core.mismatch_frameworks import (
    LOG_RATIO_CLAMP,
    METRICS,
    Sums,
    Tokens,
    add_corrected,
    add_uncorrected,
    clamped_exp,
    nemo_masked_correct,
)
from advcli.lazy_imports import np

Convention = Literal["verl", "nemo-rl", "miles", "trl"]

HISTOGRAM_BINS = 1 << 16
BIN_WIDTH = 2 * LOG_RATIO_CLAMP / HISTOGRAM_BINS  # 0.00061 in δ
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
RATIO_BANDS = ((0.5, 2.0), (0.9, 1.1))  # ρ outside each band is counted
PART_TOKENS = 1 << 18  # tokens summed at a time (:func:`cache_sized`)


@dataclass
class MismatchBatch:
    """One batch of rows, flat: per token ``trainer`` and ``sampler`` log-probs and ``action``,
    ``offsets`` of the rows (int64, from 0); per row, optional ``group`` codes (int, the same
    code for the same group in every batch), ``advantage_sign`` (−1, 0, +1) and ``correct``;
    with a correction, per token its ``weights`` (1 off action tokens), ``masked`` and ``raw``
    (what the mode compared with its bounds) as :func:`~advcli.core.correction.corrected`
    gives them; left out, :class:`MismatchStats` computes them with its correction."""

    trainer: np.ndarray
    sampler: np.ndarray
    action: np.ndarray
    offsets: np.ndarray
    group: np.ndarray | None = None
    advantage_sign: np.ndarray | None = None
    correct: np.ndarray | None = None
    weights: np.ndarray | None = None
    masked: np.ndarray | None = None
    raw: np.ndarray | None = None


def action_tokens(batch: MismatchBatch) -> Tokens:
    """The action tokens of ``batch``, in float64."""
    at = np.flatnonzero(np.asarray(batch.action, dtype=bool))
    per_row = np.diff(np.searchsorted(at, np.asarray(batch.offsets, dtype=np.int64)))
    return Tokens(
        np.asarray(batch.trainer).take(at).astype(np.float64),
        np.asarray(batch.sampler).take(at).astype(np.float64),
        per_row.astype(np.float64),
    )


def cache_sized(batch: MismatchBatch, tokens: int = PART_TOKENS) -> Iterator[MismatchBatch]:
    """``batch`` in parts of whole rows of at most ``tokens`` tokens each (a longer row alone):
    the dozen float64 temporaries of a part stay in the CPU's cache, which halves the time of
    a batch of a million tokens."""
    offsets = np.asarray(batch.offsets, dtype=np.int64)
    n = len(offsets) - 1
    if offsets[-1] <= tokens:
        yield batch
        return
    row = 0
    while row < n:
        end = max(int(np.searchsorted(offsets, offsets[row] + tokens, side="right")) - 1, row + 1)
        lo, hi = int(offsets[row]), int(offsets[end])

        def rows(x: np.ndarray | None, r: int = row, e: int = end) -> np.ndarray | None:
            return None if x is None else x[r:e]

        def tokens_of(x: np.ndarray | None, a: int = lo, b: int = hi) -> np.ndarray | None:
            return None if x is None else x[a:b]

        yield MismatchBatch(
            trainer=batch.trainer[lo:hi],
            sampler=batch.sampler[lo:hi],
            action=batch.action[lo:hi],
            offsets=offsets[row : end + 1] - lo,
            group=rows(batch.group),
            advantage_sign=rows(batch.advantage_sign),
            correct=rows(batch.correct),
            weights=tokens_of(batch.weights),
            masked=tokens_of(batch.masked),
            raw=tokens_of(batch.raw),
        )
        row = end


def action_runs(action: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The maximal runs of action tokens within each row: each run's first token among the
    action tokens, and its turn within its row (0 for the row's first run, 1 for the next…).

    >>> starts, turns = action_runs(np.array([0, 1, 1, 0, 1, 1, 1], bool), np.array([0, 7]))
    >>> starts.tolist(), turns.tolist()
    ([0, 2], [0, 1])
    """
    at = np.flatnonzero(np.asarray(action, dtype=bool))  # the action tokens' positions
    offsets = np.asarray(offsets, dtype=np.int64)
    row_start = np.zeros(len(action) + 1, dtype=bool)
    row_start[offsets[:-1]] = True
    new_run = row_start[at]
    new_run[1:] |= np.diff(at) != 1
    new_run[:1] = True
    starts = np.flatnonzero(new_run)
    before_row = np.searchsorted(at, offsets[1:])  # action tokens before each row's end
    row = np.searchsorted(before_row, starts, side="right")  # each run's row
    turns: np.ndarray = np.arange(len(starts)) - np.searchsorted(row, row)
    return starts, turns


@dataclass
class MismatchStats(Sums):
    """Streamed sums of the mismatch of a log (module docstring); ``add`` each batch, ``merge``
    parts, then read :meth:`figures` and :meth:`framework_metrics`. ``correction``: the mode
    whose weights and masks come with each batch, or that computes them (its flavour: the
    framework whose arithmetic it follows); ``seq_error_threshold``: NeMo-RL's
    ``seq_logprob_error_threshold`` (the metrics of its sequence masking); ``frameworks``: those
    whose own metrics :meth:`framework_metrics` may give (each costs its sums)."""

    histogram: np.ndarray = field(default_factory=lambda: np.zeros(HISTOGRAM_BINS + 2, np.int64))
    # per turn: tokens, Σ|δ|, Σk3, masked tokens
    turns: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    groups: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    masked_groups: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def add(self, batch: MismatchBatch) -> None:
        """Fold one batch of rows into the sums, a few rows at a time (:func:`cache_sized`)."""
        for part in cache_sized(batch):
            self._add(part)

    def _add(self, batch: MismatchBatch) -> None:
        """Fold rows into the sums (the token sums taken from the per-row ones, which the
        sequence means need anyway)."""
        tok = action_tokens(batch)
        d, ratio = tok.delta, tok.ratio
        add_uncorrected(self, tok)
        row_k2 = tok.row_sum(np.square(d)) * 0.5
        row_k3 = tok.row_sum(tok.k3)
        sum_ratio = float(np.sum(ratio))
        abs_dp = np.abs(ratio - 1.0)  # |e^t − e^s| = e^s |e^δ − 1|
        abs_dp *= np.exp(tok.sampler)
        self.add_sums(
            delta=tok.row_delta,
            k1=-tok.row_delta,
            k2=row_k2,
            k3=row_k3,
            abs_dp=abs_dp,
            ratio=sum_ratio,
            rho=sum_ratio if tok.rho is ratio else tok.rho,
            rho2=tok.rho2,
            seq_k1=-tok.mean_of(tok.row_delta),
            seq_k2=tok.mean_of(row_k2),
            seq_k3=tok.mean_of(row_k3),
            seq_rho2=clamped_exp(tok.row_delta[tok.live], 2.0),
            seq_ppl_ratio=np.exp(-tok.mean_of(tok.row_delta)),
            **{
                f"outside_{lo}_{hi}": np.count_nonzero(ratio < lo) + np.count_nonzero(ratio > hi)
                for lo, hi in RATIO_BANDS
            },
        )
        self.add_extremes(delta=d)
        self.histogram += np.bincount(histogram_bins(d), minlength=HISTOGRAM_BINS + 2)
        if batch.correct is not None:
            nemo_masked_correct(self, tok, np.asarray(batch.correct, dtype=bool))
        masked = self._add_correction(batch, tok) if self.correction is not None else None
        self._add_turns(batch, tok, masked, row_k3)

    def _add_turns(
        self, batch: MismatchBatch, tok: Tokens, masked: np.ndarray | None, row_k3: np.ndarray
    ) -> None:
        """Per turn: tokens, Σ|δ|, Σk3 and the tokens the correction masked (``masked``: per
        action token; None: no correction); ``row_k3``: each row's Σk3."""
        starts, turns = action_runs(batch.action, np.asarray(batch.offsets, dtype=np.int64))
        if not len(starts):
            return
        if len(starts) == int(tok.live.sum()):  # one turn a sequence: the batch's sums
            masked_sum = float(np.count_nonzero(masked)) if masked is not None else 0.0
            per_turn = np.array([[len(tok.delta), tok.abs_delta.sum(), row_k3.sum(), masked_sum]])
            self.turns = add_padded(self.turns, per_turn)
            return
        size = np.diff(np.concatenate((starts, [len(tok.delta)])))
        per_run = [size, np.add.reduceat(tok.abs_delta, starts), np.add.reduceat(tok.k3, starts)]
        per_run.append(np.add.reduceat(masked, starts) if masked is not None else 0 * size)
        n = int(turns.max()) + 1
        per_turn = np.stack([np.bincount(turns, weights=w, minlength=n) for w in per_run], axis=1)
        self.turns = add_padded(self.turns, per_turn)

    def _add_correction(self, batch: MismatchBatch, tok: Tokens) -> np.ndarray:
        """The correction's sums; returns which action tokens it masked."""
        assert self.correction is not None
        action = np.asarray(batch.action, dtype=bool)
        if batch.weights is None:
            found = corrected(batch.trainer, batch.sampler, action, batch.offsets, self.correction)
            weights, masked, raw = found.weights, found.masked, found.raw
        elif batch.masked is None or batch.raw is None:
            raise ValueError("a batch's correction `weights` come with its `masked` and `raw`")
        else:
            weights, masked, raw = batch.weights, batch.masked, batch.raw
        w = np.asarray(weights, dtype=np.float64)[action]
        masked = np.asarray(masked, dtype=bool)[action]
        add_corrected(self, tok, w, masked, np.asarray(raw, dtype=np.float64)[action])
        masked_per_row = tok.row_sum(masked.astype(np.float64))
        row_masked = masked_per_row > 0
        self.add_sums(weights2=w * w, masked_tokens=masked, masked_rows=row_masked)
        if batch.correct is not None:
            self.add_sums(masked_correct=row_masked & np.asarray(batch.correct, dtype=bool))
        if batch.advantage_sign is not None:
            sign = np.sign(np.asarray(batch.advantage_sign))
            for name, s in (("positive", 1), ("negative", -1), ("zero", 0)):
                self.add_sums(**{f"masked_{name}": masked_per_row[sign == s]})
        if batch.group is not None:
            group = np.asarray(batch.group, dtype=np.int64)
            self.groups = np.union1d(self.groups, group)
            self.masked_groups = np.union1d(self.masked_groups, group[row_masked])
        return masked

    def merge(self, other: MismatchStats) -> None:
        """Fold another part's sums into these (the same correction)."""
        self.merge_sums(other)
        self.histogram += other.histogram
        self.turns = add_padded(self.turns, other.turns)
        self.groups = np.union1d(self.groups, other.groups)
        self.masked_groups = np.union1d(self.masked_groups, other.masked_groups)

    def figures(self) -> dict[str, Any]:
        """advcli's figures (module docstring), as the audit's ``mismatch`` section shows them."""
        mean = lambda key: self.share(key, "tokens")  # noqa: E731
        per_seq = lambda key: self.share(key, "sequences")  # noqa: E731
        out: dict[str, Any] = {
            "action_tokens": int(self.get("tokens")),
            "sequences": int(self.get("sequences")),
            "delta": {
                "mean": mean("delta"),
                "abs_mean": mean("abs_delta"),
                "min": self.low("delta"),
                "max": self.high("delta"),
            },
            "prob_abs_diff_mean": mean("abs_dp"),
            **{
                k: {"token_mean": mean(k), "sequence_mean": per_seq(f"seq_{k}")}
                for k in ("k1", "k2", "k3")
            },
            "chi2": {"token": mean("rho2") - 1.0, "sequence": per_seq("seq_rho2") - 1.0},
            "ppl_ratio": per_seq("seq_ppl_ratio"),
            "ratio": self.ratio_distribution(),
            "ess": ess(self.get("rho"), self.get("rho2"), self.get("tokens")),
        }
        if self.correction is not None:
            out["correction"] = self.correction_figures()
        if len(self.turns) > 1:
            out["turns"] = {
                str(i + 1): {"tokens": int(n), "abs_delta_mean": a / n, "k3_mean": k / n}
                | ({"masked_tokens": int(m)} if self.correction is not None else {})
                for i, (n, a, k, m) in enumerate(self.turns)
            }
        return out

    def ratio_distribution(self) -> dict[str, Any]:
        """ρ's quantiles (from the δ histogram), min, max, mean and the shares outside the bands."""
        lo, hi = self.low("delta"), self.high("delta")
        deltas = histogram_quantiles(self.histogram, QUANTILES, lo, hi)
        return {
            "quantiles": {
                f"p{round(q * 100)}": math.exp(x) for q, x in zip(QUANTILES, deltas, strict=True)
            },
            "min": math.exp(lo),
            "max": math.exp(hi),
            "mean": self.share("ratio", "tokens"),
            "outside": {
                f"{a}-{b}": self.share(f"outside_{a}_{b}", "tokens") for a, b in RATIO_BANDS
            },
        }

    def correction_figures(self) -> dict[str, Any]:
        """What the correction did: its weights, ESS, masked shares, the masked tokens' signs."""
        n_groups = len(self.groups)
        return {
            "mode": self.correction.mode.name if self.correction else None,
            "weight_mean": self.share("weights", "tokens"),
            "weight_min": self.low("weights"),
            "weight_max": self.high("weights"),
            "ess": ess(self.get("weights"), self.get("weights2"), self.get("tokens")),
            "masked_tokens": int(self.get("masked_tokens")),
            "masked_token_share": self.share("masked_tokens", "tokens"),
            "masked_sequence_share": self.share("masked_rows", "sequences"),
            "masked_group_share": len(self.masked_groups) / n_groups if n_groups else 0.0,
            "advantage_sign": {
                s: int(self.get(f"masked_{s}")) for s in ("positive", "negative", "zero")
            },
            "masked_correct_share": self.share("masked_correct", "masked_rows"),
        }

    def framework_metrics(self, convention: Convention) -> dict[str, float]:
        """The metrics ``convention`` logs, under its own names (:mod:`~.mismatch_frameworks`);
        it must be among the ``frameworks`` whose sums were gathered."""
        if convention not in self.frameworks:
            raise ValueError(f"the sums of {convention} were not gathered ({self.frameworks})")
        return METRICS[convention](self)


def ess(total: float, total_sq: float, n: float) -> float:
    """1 / mean((w / mean w)²) = (Σw)² / (n Σw²); 0 without weight."""
    return total * total / (n * total_sq) if n and total_sq else 0.0


def add_padded(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, rows of the shorter padded with zeros."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    out[: len(b)] += b
    return out


def histogram_bins(delta: np.ndarray) -> np.ndarray:
    """Each δ's bin: 0 below −20, 1 … HISTOGRAM_BINS over [−20, 20), the last one from 20 on."""
    at = delta + LOG_RATIO_CLAMP
    at *= 1.0 / BIN_WIDTH
    np.floor(at, out=at)
    np.clip(at, -1.0, HISTOGRAM_BINS, out=at)
    out: np.ndarray = at.astype(np.int64)
    out += 1
    return out


def histogram_quantiles(
    histogram: np.ndarray, qs: tuple[float, ...], lo: float, hi: float
) -> list[float]:
    """np.quantile's linear quantiles of the δ counted in ``histogram``: each order statistic
    read as its bin's middle (within BIN_WIDTH / 2), the outer bins as the exact ``lo``/``hi``,
    and clamped into [lo, hi]."""
    n = int(histogram.sum())
    if n == 0:
        return [0.0 for _ in qs]
    cumulative = np.cumsum(histogram)
    middles = -LOG_RATIO_CLAMP + (np.arange(HISTOGRAM_BINS + 2) - 0.5) * BIN_WIDTH
    middles[0], middles[-1] = lo, hi
    out = []
    for q in qs:
        k = q * (n - 1)
        below, above = math.floor(k), math.ceil(k)
        x_below, x_above = (
            float(middles[np.searchsorted(cumulative, i, side="right")]) for i in (below, above)
        )
        out.append(min(max(x_below + (k - below) * (x_above - x_below), lo), hi))
    return out
