"""Each framework's own mismatch metrics, under the names it logs, streamed as sums.

The pieces the streamed sums are made of (a batch's action tokens, a correction, the sums) sit
here, below :mod:`advcli.core.mismatch`, which adds advcli's own figures. Every metric is a
framework's mean (or min, max) over one training batch, as it logs it; over a log of several
batches, the same formula over the whole log (``audit --by step``: one per step). Sequences
without action tokens count where the framework counts them.

- **verl** (``verl/trainer/ppo/rollout_corr_helper.py``, logged as ``rollout_corr/<name>``): its
  masked means divide by count + 1e-8; per-sequence means are over every row of the batch (a row
  without action tokens has mean 0). ``training_ppl`` = mean_i exp(−m_i(trainer)),
  ``training_log_ppl`` = mean_i −m_i(trainer), ``rollout_ppl`` / ``rollout_log_ppl`` the same of
  the sampler; ``kl`` = mean(sampler − trainer), ``k3_kl`` = mean(exp(δ) − δ − 1);
  ``log_ppl_diff`` = mean_i (m_i(sampler) − m_i(trainer)), its ``abs``, ``max``, ``min``;
  ``ppl_ratio`` = mean_i exp(log_ppl_diff_i); ``chi2_token`` = mean(exp(2 c(δ))) − 1,
  ``chi2_seq`` = mean_i exp(2 c(Σ_i δ)) − 1 (c: clamp to ±20). With a truncate or mask
  correction (its ``rollout_is`` at the correction's level, ``rollout_is_threshold`` HI or
  ``LO_HI``), ``rollout_is_*`` of ``compute_is_metrics``: raw ρ = exp(c(δ)) (token) or
  exp(c(Σ_i δ)) on each token (sequence); the lower bound of its fractions is LO for a mask mode,
  1/HI for a truncate one; std and ESS of the weights clamped into [0, HI]; ``seq_*`` of the
  per-row weight means. With a rejection mode, ``rollout_rs_<option>_masked_fraction`` and
  ``_seq_masked_fraction`` (over sequences with action tokens), ``rollout_rs_masked_fraction``
  and ``rollout_rs_seq_masked_fraction`` (over every row).
- **NeMo-RL** (``nemo_rl/algorithms/loss/loss_functions.py``, ``grpo.py``), over the action
  tokens (its token mask × sample mask): ``token_mult_prob_error`` = mean exp(|δ|),
  ``gen_kl_error`` = mean k3(δ) = exp(δ) − 1 − δ, ``policy_kl_error`` = mean(exp(−δ) − 1 + δ)
  (its default ``reference_policy_kl_type`` k3, unclamped), ``js_divergence_error`` = mean of
  ½ KL(trainer ‖ M) + ½ KL(sampler ‖ M) with M = ½(p_trainer + p_sampler), each term k3;
  ``{max,mean,min}_seq_mult_prob_error`` over sequences of their mean exp(|δ|); with
  ``seq_logprob_error_threshold``, ``num_masked_seqs`` (error above it), ``masked_correct_pct``
  (of those, correct) and the ``_after_mask`` extremes and mean; ``sampling_importance_ratio`` =
  mean weight over tokens (mean row weight over rows for a sequence mode; exp(δ) without a
  correction) and, with a correction, ``is_oob_ratio``: the tokens whose raw ratio is outside
  [LO, HI].
- **miles / slime** (``loss_hub/losses.py``, ``corrections.py``): per row, the mean over its
  loss-mask tokens, then the mean over rows (a row without one counts 0):
  ``train_rollout_logprob_abs_diff`` of |δ|, ``train_rollout_kl`` of its ``low_var_kl``
  clamp(k3(c(δ)), ±10); with a token correction (``--use-tis``, ``tis_clip_low`` LO, ``tis_clip``
  HI) ``tis`` of exp(δ) (before the clamp), ``tis_abs`` of |exp(δ) − 1|, ``tis_clipfrac`` of
  exp(δ) ∉ [LO, HI].
- **TRL** (``GRPOTrainer``): ``sampling/sampling_logp_difference/{mean,max}`` of |δ| over tokens;
  with a correction ``sampling/importance_sampling_ratio/{min,mean,max}`` of its weights over
  action tokens (token modes) or of the row weights over every row (sequence modes; a row
  without action tokens has ρ = 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from advcli.core.correction import Correction
from advcli.lazy_imports import np

LOG_RATIO_CLAMP = 20.0  # verl's SAFETY_BOUND: δ (and Σδ) clamped before an exp
MILES_KL_CLAMP = 10.0  # miles clamps its low_var_kl estimate to ±10
VERL_EPS = 1e-8  # verl's masked_mean divides by count + 1e-8


def weight_of_one(c: Correction) -> float:
    """The weight of ρ = 1: what a sequence mode gives a row without action tokens."""
    if c.mode.kind == "truncate":
        return min(max(1.0, c.lo), c.hi)
    return 1.0 if c.lo <= 1.0 <= c.hi else 0.0


@dataclass
class Tokens:
    """A batch's action tokens: log-probs (float64); per row, its count. What several sums
    read (δ, ρ, k3, each token's row, per-row sums) is computed once, on first use."""

    trainer: np.ndarray
    sampler: np.ndarray
    count: np.ndarray  # action tokens of every row of the batch (float64)

    @cached_property
    def rows(self) -> np.ndarray:
        """Each action token's row."""
        n = self.count.astype(np.int64)
        out: np.ndarray = np.repeat(np.arange(len(n), dtype=np.int64), n)
        return out

    @cached_property
    def delta(self) -> np.ndarray:
        out: np.ndarray = self.trainer - self.sampler
        return out

    @cached_property
    def ratio(self) -> np.ndarray:
        """ρ = exp(δ), unclamped."""
        out: np.ndarray = np.exp(self.delta)
        return out

    @cached_property
    def abs_delta(self) -> np.ndarray:
        out: np.ndarray = np.abs(self.delta)
        return out

    @cached_property
    def k3(self) -> np.ndarray:
        """exp(δ) − 1 − δ, unclamped (as verl and NeMo-RL compute it)."""
        out: np.ndarray = self.ratio - 1.0 - self.delta
        return out

    @cached_property
    def clamped(self) -> np.ndarray:
        """c(δ): δ clamped to ±20 (δ itself where no token needs it)."""
        d = self.delta
        if not len(d) or (d.min() >= -LOG_RATIO_CLAMP and d.max() <= LOG_RATIO_CLAMP):
            return d
        out: np.ndarray = np.clip(d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return out

    @cached_property
    def rho(self) -> np.ndarray:
        """exp(c(δ)), verl's safe ratio."""
        out: np.ndarray = self.ratio if self.clamped is self.delta else np.exp(self.clamped)
        return out

    @cached_property
    def rho2(self) -> np.ndarray:
        """exp(2 c(δ))."""
        out: np.ndarray = self.rho * self.rho
        return out

    @cached_property
    def live(self) -> np.ndarray:
        """The rows with action tokens: the sequences."""
        out: np.ndarray = self.count > 0
        return out

    @cached_property
    def live_starts(self) -> np.ndarray:
        """Each sequence's first action token (increasing: a segmented sum's starts)."""
        starts = np.concatenate(([0], np.cumsum(self.count[:-1]))).astype(np.int64)
        out: np.ndarray = starts[self.live]
        return out

    @cached_property
    def row_delta(self) -> np.ndarray:
        """Per row: Σ δ over its action tokens."""
        return self.row_sum(self.delta)

    def row_sum(self, values: np.ndarray) -> np.ndarray:
        """Per row (every row of the batch): the sum of ``values`` over its action tokens (a
        segmented sum: the tokens are in row order)."""
        out = np.zeros(len(self.count))
        if len(values):
            out[self.live] = np.add.reduceat(values, self.live_starts)
        return out

    def row_mean(self, values: np.ndarray) -> np.ndarray:
        """Per sequence: the mean of ``values`` over its action tokens."""
        return self.mean_of(self.row_sum(values))

    def mean_of(self, row_sums: np.ndarray) -> np.ndarray:
        """Per sequence: its row sum over its count."""
        live = self.live
        out: np.ndarray = row_sums[live] / self.count[live]
        return out

    def verl_row_mean(self, values: np.ndarray) -> np.ndarray:
        """Per row, verl's masked mean Σ / (n + 1e-8): 0 for a row without action tokens."""
        out: np.ndarray = self.row_sum(values) / (self.count + VERL_EPS)
        return out

    def miles_row_mean(self, values: np.ndarray) -> np.ndarray:
        """Per row, miles' sample mean Σ / max(n, 1)."""
        out: np.ndarray = self.row_sum(values) / np.maximum(self.count, 1.0)
        return out


def clamped_exp(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """exp(scale · clamp(x, −20, 20)), verl's safe exponent."""
    out: np.ndarray = np.exp(scale * np.clip(x, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return out


@dataclass
class Sums:
    """Sums, maxima and minima under names, added batch by batch and merged part by part."""

    correction: Correction | None = None
    seq_error_threshold: float | None = None
    frameworks: tuple[str, ...] = ("verl", "nemo-rl", "miles", "trl")  # whose sums to gather
    sums: dict[str, float] = field(default_factory=dict)
    highs: dict[str, float] = field(default_factory=dict)
    lows: dict[str, float] = field(default_factory=dict)

    def add_sums(self, **values: float | np.ndarray) -> None:
        for key, v in values.items():
            is_flags = isinstance(v, np.ndarray) and v.dtype == bool
            self.sums[key] = self.sums.get(key, 0.0) + float(
                np.count_nonzero(v) if is_flags else np.sum(v)
            )

    def add_extremes(self, **values: np.ndarray) -> None:
        for key, v in values.items():
            if len(v):
                self.highs[key] = max(self.highs.get(key, -math.inf), float(np.max(v)))
                self.lows[key] = min(self.lows.get(key, math.inf), float(np.min(v)))

    def merge_sums(self, other: Sums) -> None:
        for key, v in other.sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + v
        for key, v in other.highs.items():
            self.highs[key] = max(self.highs.get(key, -math.inf), v)
        for key, v in other.lows.items():
            self.lows[key] = min(self.lows.get(key, math.inf), v)

    def get(self, key: str) -> float:
        return self.sums.get(key, 0.0)

    def share(self, key: str, of: str, eps: float = 0.0) -> float:
        """``sums[key] / (sums[of] + eps)``, 0 where nothing was counted."""
        total = self.get(of)
        return self.get(key) / (total + eps) if total else 0.0

    def high(self, key: str) -> float:
        return self.highs.get(key, 0.0)

    def low(self, key: str) -> float:
        return self.lows.get(key, 0.0)


def add_uncorrected(s: Sums, tok: Tokens) -> None:
    """The sums every figure needs, and those of each framework ``s`` gathers (TRL's: these)."""
    s.add_sums(
        tokens=len(tok.delta),
        rows=len(tok.count),
        sequences=tok.live.sum(),
        abs_delta=tok.abs_delta,
    )
    s.add_extremes(abs_delta=tok.abs_delta)
    for framework, add in (("verl", add_verl), ("nemo-rl", add_nemo), ("miles", add_miles)):
        if framework in s.frameworks:
            add(s, tok)


def add_verl(s: Sums, tok: Tokens) -> None:
    """verl's sums that need no correction."""
    d, t, r = tok.delta, tok.trainer, tok.sampler
    mean_t, mean_r = tok.verl_row_mean(t), tok.verl_row_mean(r)
    log_ppl_diff = mean_r - mean_t
    s.add_sums(
        verl_training_ppl=np.exp(-mean_t),
        verl_training_log_ppl=-mean_t,
        verl_rollout_ppl=np.exp(-mean_r),
        verl_rollout_log_ppl=-mean_r,
        verl_kl=-d,
        verl_k3=tok.k3,
        verl_rho2=tok.rho2,
        verl_lpd=log_ppl_diff,
        verl_lpd_abs=np.abs(log_ppl_diff),
        verl_ppl_ratio=np.exp(log_ppl_diff),
        verl_rho2_seq=clamped_exp(tok.row_delta, 2.0),
    )
    s.add_extremes(verl_lpd=log_ppl_diff)


def add_nemo(s: Sums, tok: Tokens) -> None:
    """NeMo-RL's sums that need no correction."""
    d = tok.delta
    # ½ k3(t − m) + ½ k3(r − m) with m = log(½ e^t + ½ e^r) is, exactly, (m − r) − δ/2, and
    # m − r = log((1 + ρ)/2): log1p(ρ) − log 2 where ρ is finite (|δ| ≤ 20), else
    # logaddexp(0, δ) − log 2, which no large δ overflows
    log_mean = np.log1p(tok.ratio) if tok.clamped is d else np.logaddexp(0.0, d)
    js = log_mean - math.log(2.0) - 0.5 * d
    inverse = 1.0 / tok.ratio  # exp(−δ)
    mult_prob = np.maximum(tok.ratio, inverse)  # exp(|δ|)
    seq_error = tok.row_mean(mult_prob)
    s.add_sums(
        nemo_mult_prob=mult_prob,
        nemo_gen_kl=tok.k3,
        nemo_policy_kl=inverse - 1.0 + d,
        nemo_js=js,
        nemo_ratio=tok.ratio,
        nemo_seq_error=seq_error,
    )
    s.add_extremes(nemo_seq_error=seq_error)
    if s.seq_error_threshold is not None:
        masked = seq_error > s.seq_error_threshold
        kept = seq_error[~masked]
        s.add_sums(nemo_masked_seqs=masked, nemo_kept_seqs=len(kept), nemo_kept_error=kept)
        s.add_extremes(nemo_kept_error=kept)


def add_miles(s: Sums, tok: Tokens) -> None:
    """miles' sums that need no correction."""
    d, c = tok.delta, tok.clamped
    k3_c = tok.k3 if c is d else np.exp(c) - 1.0 - c
    miles_kl = np.clip(k3_c, -MILES_KL_CLAMP, MILES_KL_CLAMP)
    row_abs = tok.row_sum(tok.abs_delta) / np.maximum(tok.count, 1.0)
    s.add_sums(miles_abs=row_abs, miles_kl=tok.miles_row_mean(miles_kl))


def nemo_masked_correct(s: Sums, tok: Tokens, correct: np.ndarray) -> None:
    """NeMo-RL's ``masked_correct_pct``: the masked sequences whose reward was 1 (``correct``)."""
    if s.seq_error_threshold is not None and "nemo-rl" in s.frameworks:
        seq_error = tok.row_mean(np.exp(tok.abs_delta))
        s.add_sums(nemo_masked_correct=(seq_error > s.seq_error_threshold) & correct[tok.live])


def add_corrected(
    s: Sums, tok: Tokens, weights: np.ndarray, masked: np.ndarray, raw: np.ndarray
) -> None:
    """The frameworks' sums of a correction's ``weights``, ``masked`` and ``raw`` (what it
    compared with its bounds) on the action tokens."""
    c = s.correction
    assert c is not None
    row_delta = tok.row_delta
    ratio = tok.ratio if c.mode.level == "token" else np.exp(row_delta[tok.rows])
    outside = (ratio < c.lo) | (ratio > c.hi)
    masked_rows = tok.row_sum(masked.astype(np.float64)) > 0
    # NeMo-RL's seq-mask-tis counts the rows it masked, over every row
    s.add_sums(oob=outside, oob_rows=masked_rows)
    if "verl" in s.frameworks and c.mode.kind == "reject":
        s.add_sums(verl_rs_masked=masked, verl_rs_masked_rows=masked_rows)
        add_verl_rs(s, tok, raw)
    elif "verl" in s.frameworks and c.mode.kind != "geometric":  # verl has no seq-mask-tis
        add_verl_is(s, tok, weights, row_delta)
    if "miles" in s.frameworks:
        s.add_sums(
            miles_tis=tok.miles_row_mean(tok.ratio),
            miles_tis_abs=tok.miles_row_mean(np.abs(tok.ratio - 1.0)),
            miles_clipfrac=tok.miles_row_mean(outside.astype(np.float64)),
        )
    row_weight = tok.row_mean(weights)
    s.add_sums(nemo_seq_weight=row_weight, empty_rows=(~tok.live).sum(), weights=weights)
    s.add_extremes(weights=weights, row_weight=row_weight)


def add_verl_rs(s: Sums, tok: Tokens, stat: np.ndarray) -> None:
    """verl's ``compute_rs_metrics`` sums of a rejection's statistic ``stat`` per action token
    (a sequence mode's: its row's): k1's bounds are log-ratios, the other statistics' lower
    bound 0."""
    c = s.correction
    assert c is not None
    upper, lower = rs_bounds(c)
    clamped = np.clip(stat, lower, upper)
    if c.mode.level == "sequence":
        per_row = np.zeros(len(tok.count))
        per_row[tok.rows] = stat  # one value per row, on each of its tokens
        seq = per_row[tok.live]
    else:
        seq = tok.verl_row_mean(stat)[tok.live]
    s.add_sums(
        rs_stat=stat,
        rs_high=stat > upper,
        rs_low=stat < lower,
        rs_clamped=clamped,
        rs_clamped2=clamped * clamped,
        rs_seq=seq,
        rs_seq2=seq * seq,
        rs_seq_high=seq > upper,
        rs_seq_low=seq < lower,
    )
    s.add_extremes(rs_stat=stat, rs_seq=seq, rs_seq_deviation=np.abs(seq))


def rs_bounds(c: Correction) -> tuple[float, float]:
    """The upper and lower bound verl's rejection metrics compare its statistic with."""
    if c.mode.statistic == "k1":
        return math.log(c.hi), math.log(c.lo)
    return c.hi, 0.0


def verl_rs_metrics(s: Sums, c: Correction) -> dict[str, float]:
    """``compute_rs_metrics`` of one rejection option, and its masked fractions."""
    option = c.mode.name.replace("-", "_")
    per_token = lambda key: s.share(key, "tokens", VERL_EPS)  # noqa: E731
    per_seq = lambda key: s.share(key, "sequences")  # noqa: E731
    k1 = c.mode.statistic == "k1"
    by_seq = c.mode.level == "sequence" and s.get("sequences") > 0
    fraction = per_seq if by_seq else per_token
    mean_clamped, mean_square = per_token("rs_clamped"), per_token("rs_clamped2")
    n_seq, seq_total = s.get("sequences"), s.get("rs_seq")
    variance = (s.get("rs_seq2") - seq_total**2 / n_seq) / (n_seq - 1) if n_seq > 1 else 0.0
    out = {
        "mean": per_token("rs_stat"),
        "max": s.high("rs_stat"),
        "min": s.low("rs_stat"),
        "fraction_high": fraction("rs_high" if not by_seq else "rs_seq_high"),
        "fraction_low": (fraction("rs_low" if not by_seq else "rs_seq_low")) if k1 else 0.0,
        "std": math.sqrt(max(mean_square - mean_clamped**2, 0.0)) if s.get("tokens") > 1 else 0.0,
        "seq_mean": per_seq("rs_seq"),
        "seq_std": math.sqrt(max(variance, 0.0)),
        "seq_max": s.high("rs_seq"),
        "seq_min": s.low("rs_seq"),
        "seq_max_deviation": s.high("rs_seq_deviation"),
        "seq_fraction_high": per_seq("rs_seq_high"),
        "masked_fraction": per_token("verl_rs_masked"),
        "seq_masked_fraction": per_seq("verl_rs_masked_rows"),
    }
    if k1 or not n_seq:
        out["seq_fraction_low"] = per_seq("rs_seq_low") if k1 else 0.0
    return {f"rollout_rs_{option}_{key}": value for key, value in out.items()}


def add_verl_is(s: Sums, tok: Tokens, weights: np.ndarray, row_delta: np.ndarray) -> None:
    """verl's ``compute_is_metrics`` sums (module docstring)."""
    c = s.correction
    assert c is not None
    lower = c.lo if c.mode.kind == "mask" else 1.0 / c.hi
    raw = clamped_exp(tok.delta) if c.mode.level == "token" else clamped_exp(row_delta)[tok.rows]
    clamped = np.clip(weights, 0.0, c.hi)
    seq_weight = tok.verl_row_mean(weights)
    seq_raw = tok.verl_row_mean(raw)
    s.add_sums(
        verl_is_high=raw > c.hi,
        verl_is_low=raw < lower,
        verl_is_clamped=clamped,
        verl_is_clamped2=clamped * clamped,
        verl_is_seq=seq_weight,
        verl_is_seq2=seq_weight**2,
        verl_is_seq_high=seq_raw > c.hi,
        verl_is_seq_low=seq_raw < lower,
        verl_is_row_high=row_delta > math.log(c.hi),
        verl_is_row_low=row_delta < (math.log(lower) if lower > 0 else -math.inf),
    )
    s.add_extremes(
        verl_is_seq=seq_weight,
        verl_is_seq_deviation=np.abs(seq_weight - 1.0),
        verl_row_delta=row_delta,
    )


def verl_metrics(s: Sums) -> dict[str, float]:
    n, rows = s.get("tokens"), s.get("rows")
    per_token = lambda key: s.share(key, "tokens", VERL_EPS)  # noqa: E731
    per_row = lambda key: s.share(key, "rows")  # noqa: E731
    out = {
        "training_ppl": per_row("verl_training_ppl"),
        "training_log_ppl": per_row("verl_training_log_ppl"),
        "kl": per_token("verl_kl"),
        "k3_kl": per_token("verl_k3"),
        "rollout_ppl": per_row("verl_rollout_ppl"),
        "rollout_log_ppl": per_row("verl_rollout_log_ppl"),
        "log_ppl_diff": per_row("verl_lpd"),
        "log_ppl_abs_diff": per_row("verl_lpd_abs"),
        "log_ppl_diff_max": s.high("verl_lpd"),
        "log_ppl_diff_min": s.low("verl_lpd"),
        "ppl_ratio": per_row("verl_ppl_ratio"),
        "chi2_token": per_token("verl_rho2") - 1.0,
        "chi2_seq": per_row("verl_rho2_seq") - 1.0,
    }
    c = s.correction
    if c is not None and c.mode.kind == "reject":
        out |= verl_rs_metrics(s, c)
        out["rollout_rs_masked_fraction"] = per_token("verl_rs_masked")
        out["rollout_rs_seq_masked_fraction"] = per_row("verl_rs_masked_rows")
    elif c is not None and c.mode.kind != "geometric":
        if c.mode.level == "sequence":
            out["rollout_is_max"] = math.exp(min(s.high("verl_row_delta"), LOG_RATIO_CLAMP))
            out["rollout_is_min"] = math.exp(s.low("verl_row_delta"))
            high, low = per_row("verl_is_row_high"), per_row("verl_is_row_low")
        else:
            out["rollout_is_max"], out["rollout_is_min"] = s.high("weights"), s.low("weights")
            high, low = per_token("verl_is_high"), per_token("verl_is_low")
        out["rollout_is_mean"] = per_token("weights")
        out["rollout_is_ratio_fraction_high"], out["rollout_is_ratio_fraction_low"] = high, low
        mean_clamped = per_token("verl_is_clamped")
        mean_square = per_token("verl_is_clamped2")
        out["rollout_is_std"] = math.sqrt(max(mean_square - mean_clamped**2, 0.0)) if n > 1 else 0.0
        out["rollout_is_eff_sample_size"] = 1.0 / (mean_square / (mean_clamped + VERL_EPS) ** 2)
        seq_total, seq_square = s.get("verl_is_seq"), s.get("verl_is_seq2")
        out["rollout_is_seq_mean"] = seq_total / rows
        variance = (seq_square - seq_total**2 / rows) / (rows - 1) if rows > 1 else 0.0
        out["rollout_is_seq_std"] = math.sqrt(max(variance, 0.0))
        out["rollout_is_seq_max"], out["rollout_is_seq_min"] = (
            s.high("verl_is_seq"),
            s.low("verl_is_seq"),
        )
        out["rollout_is_seq_max_deviation"] = s.high("verl_is_seq_deviation")
        out["rollout_is_seq_fraction_high"] = per_row("verl_is_seq_high")
        out["rollout_is_seq_fraction_low"] = per_row("verl_is_seq_low")
        if c.mode.kind == "mask":
            out["rollout_is_oob_ratio"] = per_token("oob")
    return {f"rollout_corr/{key}": value for key, value in out.items()}


def nemo_metrics(s: Sums) -> dict[str, float]:
    per_token = lambda key: s.share(key, "tokens")  # noqa: E731
    out = {
        "token_mult_prob_error": per_token("nemo_mult_prob"),
        "gen_kl_error": per_token("nemo_gen_kl"),
        "policy_kl_error": per_token("nemo_policy_kl"),
        "js_divergence_error": per_token("nemo_js"),
        "max_seq_mult_prob_error": s.high("nemo_seq_error"),
        "mean_seq_mult_prob_error": s.share("nemo_seq_error", "sequences"),
        "min_seq_mult_prob_error": s.low("nemo_seq_error"),
        "sampling_importance_ratio": per_token("nemo_ratio"),
    }
    if s.seq_error_threshold is not None:
        masked = s.get("nemo_masked_seqs")
        out["num_masked_seqs"] = masked
        out["masked_correct_pct"] = s.get("nemo_masked_correct") / masked if masked else 0.0
        out["max_seq_mult_prob_error_after_mask"] = s.high("nemo_kept_error")
        out["mean_seq_mult_prob_error_after_mask"] = s.share("nemo_kept_error", "nemo_kept_seqs")
        out["min_seq_mult_prob_error_after_mask"] = s.low("nemo_kept_error")
    c = s.correction
    if c is not None and c.mode.kind != "reject":
        geometric = c.mode.kind == "geometric"  # seq-mask-tis: token weights, rows masked
        if c.mode.level == "sequence" and not geometric:
            empty = s.get("empty_rows")
            total = s.get("nemo_seq_weight") + empty * weight_of_one(c)
            out["sampling_importance_ratio"] = total / s.get("rows") if s.get("rows") else 0.0
        else:
            out["sampling_importance_ratio"] = per_token("weights")
        out["is_oob_ratio"] = s.share("oob_rows", "rows") if geometric else per_token("oob")
    return out


def miles_metrics(s: Sums) -> dict[str, float]:
    per_row = lambda key: s.share(key, "rows")  # noqa: E731
    out = {
        "train_rollout_logprob_abs_diff": per_row("miles_abs"),
        "train_rollout_kl": per_row("miles_kl"),
    }
    c = s.correction
    if c is not None and c.mode.level == "token" and c.mode.kind != "reject":
        out["tis"] = per_row("miles_tis")
        out["tis_abs"] = per_row("miles_tis_abs")
        out["tis_clipfrac"] = per_row("miles_clipfrac")
    return out


def trl_metrics(s: Sums) -> dict[str, float]:
    prefix = "sampling/importance_sampling_ratio"
    out = {
        "sampling/sampling_logp_difference/mean": s.share("abs_delta", "tokens"),
        "sampling/sampling_logp_difference/max": s.high("abs_delta"),
    }
    c = s.correction
    if c is not None and c.mode.kind != "reject":
        if c.mode.level == "sequence":
            empty, one = s.get("empty_rows"), weight_of_one(c)
            ends = [s.low("row_weight"), s.high("row_weight")] if s.get("sequences") else []
            ends += [one] if empty else []
            low, high = (min(ends), max(ends)) if ends else (0.0, 0.0)
            mean = (
                (s.get("nemo_seq_weight") + empty * one) / s.get("rows") if s.get("rows") else 0.0
            )
        else:
            low, high, mean = s.low("weights"), s.high("weights"), s.share("weights", "tokens")
        out |= {f"{prefix}/min": low, f"{prefix}/mean": mean, f"{prefix}/max": high}
    return out


METRICS: dict[str, Callable[[Sums], dict[str, float]]] = {
    "verl": verl_metrics,
    "nemo-rl": nemo_metrics,
    "miles": miles_metrics,
    "trl": trl_metrics,
}
