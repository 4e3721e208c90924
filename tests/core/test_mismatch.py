"""advcli.core.mismatch: its figures and each framework's metrics against a float64 loop of our
own over the health reference log (both streams), small hand-computed cases, streaming and
merging, and the quantiles' error bound."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from advcli.core.correction import MODES, Correction, corrected
from advcli.core.mismatch import (
    BIN_WIDTH,
    Convention,
    MismatchBatch,
    MismatchStats,
    action_runs,
    cache_sized,
    histogram_bins,
    histogram_quantiles,
)
from tests.conftest import ROOT

CONVENTIONS: tuple[Convention, ...] = ("verl", "nemo-rl", "miles", "trl")
LOG = ROOT / "tests" / "fixtures" / "refs" / "health" / "log.parquet"
CORRECTIONS = [
    Correction(MODES[name], lo, hi, "verl")
    for name, lo, hi in (
        ("token-truncate", 0.0, 2.0),
        ("token-mask", 0.5, 2.0),
        ("sequence-truncate", 0.0, 2.0),
        ("sequence-mask", 0.5, 2.0),
        ("seq-mean-k3", 0.0, 0.1),
        ("token-k1", 0.5, 2.0),
    )
]


def rows() -> list[dict[str, Any]]:
    table: list[dict[str, Any]] = pq.read_table(LOG).to_pylist()
    for i, r in enumerate(table):
        r["group"] = int(r["prompt_id"][1:])
        r["sign"] = (-1, 0, 1)[i % 3]
        r["correct"] = r["reward"] == 1.0
        r["deltas"] = [
            t - s
            for t, s, a in zip(r["trainer_logprobs"], r["logprobs"], r["action_mask"], strict=True)
            if a
        ]
    return table


def correct_rows(table: list[dict[str, Any]], c: Correction) -> None:
    """Each row's per-token weight and mask under ``c``, one token at a time (1 and unmasked off
    action tokens) and what it compares with its bounds (``raw``); sequence modes weigh the row's
    ρ_seq, the rejection mode seq-mean-k3 masks a row whose mean k3 (verl's mean: n + 1e-8)
    passes HI, token-k1 a token whose −δ is outside [log LO, log HI]."""
    for r in table:
        ds = r["deltas"]
        k3_mean = sum(math.exp(d) - 1 - d for d in ds) / (len(ds) + 1e-8)
        weights, masked, raws = [], [], []
        for a, t, s in zip(r["action_mask"], r["trainer_logprobs"], r["logprobs"], strict=True):
            log_raw = sum(ds) if c.mode.level == "sequence" else t - s
            raw = math.exp(min(max(log_raw, -20.0), 20.0))
            if not a:
                weights.append(1.0)
                masked.append(False)
                raws.append(math.nan)
                continue
            if c.mode.kind == "truncate":
                weights.append(min(max(raw, c.lo), c.hi))
                masked.append(False)
            elif c.mode.kind == "mask":
                inside = c.lo <= raw <= c.hi
                weights.append(raw if inside else 0.0)
                masked.append(not inside)
            elif c.mode.name == "token-k1":
                raw = -min(max(t - s, -20.0), 20.0)
                weights.append(1.0)
                masked.append(not math.log(c.lo) <= raw <= math.log(c.hi))
            else:
                raw = k3_mean
                weights.append(1.0)
                masked.append(k3_mean > c.hi)
            raws.append(raw)
        r["weights"], r["masked"], r["raw"] = weights, masked, raws


def batch_of(table: list[dict[str, Any]], correction: bool = False) -> MismatchBatch:
    def flat(key: str) -> np.ndarray:
        return np.array([v for r in table for v in r[key]])

    offsets = np.cumsum([0] + [len(r["input_ids"]) for r in table])
    return MismatchBatch(
        trainer=flat("trainer_logprobs").astype(np.float32),
        sampler=flat("logprobs").astype(np.float32),
        action=flat("action_mask").astype(bool),
        offsets=offsets.astype(np.int64),
        group=np.array([r["group"] for r in table]),
        advantage_sign=np.array([r["sign"] for r in table]),
        correct=np.array([r["correct"] for r in table]),
        weights=flat("weights") if correction else None,
        masked=flat("masked").astype(bool) if correction else None,
        raw=flat("raw") if correction else None,
    )


def stats_of(table, c: Correction | None = None, threshold: float | None = None) -> MismatchStats:
    if c is not None:
        correct_rows(table, c)
    s = MismatchStats(correction=c, seq_error_threshold=threshold)
    s.add(batch_of(table, c is not None))
    return s


def close(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) == set(want), set(got) ^ set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def assert_nested_close(got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want)
        for key in want:
            assert_nested_close(got[key], want[key])
    elif isinstance(want, str):
        assert got == want
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def reference_figures(table: list[dict[str, Any]]) -> dict[str, Any]:
    """advcli's figures of the uncorrected log, one token at a time."""
    ds = [d for r in table for d in r["deltas"]]
    seqs = [r["deltas"] for r in table if r["deltas"]]
    dp = [
        abs(math.exp(t) - math.exp(s))
        for r in table
        for t, s, a in zip(r["trainer_logprobs"], r["logprobs"], r["action_mask"], strict=True)
        if a
    ]

    def clamp(x: float) -> float:
        return min(max(x, -20.0), 20.0)

    k = {
        "k1": lambda d: -d,
        "k2": lambda d: d * d / 2,
        "k3": lambda d: math.exp(d) - 1 - d,
    }
    rho = [math.exp(clamp(d)) for d in ds]
    return {
        "delta": {"mean": mean(ds), "abs_mean": mean([abs(d) for d in ds])},
        "prob_abs_diff_mean": mean(dp),
        **{
            name: {
                "token_mean": mean([f(d) for d in ds]),
                "sequence_mean": mean([mean([f(d) for d in q]) for q in seqs]),
            }
            for name, f in k.items()
        },
        "chi2": {
            "token": mean([math.exp(2 * clamp(d)) for d in ds]) - 1,
            "sequence": mean([math.exp(2 * clamp(sum(q))) for q in seqs]) - 1,
        },
        "ppl_ratio": mean([math.exp(-mean(q)) for q in seqs]),
        "ess": sum(rho) ** 2 / (len(rho) * sum(x * x for x in rho)),
        "outside": {
            "0.5-2.0": mean([not 0.5 <= math.exp(d) <= 2.0 for d in ds]),
            "0.9-1.1": mean([not 0.9 <= math.exp(d) <= 1.1 for d in ds]),
        },
    }


def test_figures_match_a_float64_loop():
    table = rows()
    got = stats_of(table).figures()
    want = reference_figures(table)
    for key in ("delta", "k1", "k2", "k3", "chi2"):
        close({k: got[key][k] for k in want[key]}, want[key])
    close(
        {k: got[k] for k in ("prob_abs_diff_mean", "ppl_ratio", "ess")},
        {k: want[k] for k in ("prob_abs_diff_mean", "ppl_ratio", "ess")},
    )
    close(got["ratio"]["outside"], want["outside"])
    ds = [d for r in table for d in r["deltas"]]
    assert got["action_tokens"] == len(ds) == 131
    assert got["sequences"] == 23  # one rollout has no action token
    assert got["delta"]["min"] == pytest.approx(min(ds))


def test_turns_are_runs_of_action_tokens():
    table = rows()
    turns = stats_of(table).figures()["turns"]
    per_turn: dict[int, list[float]] = {}
    for r in table:
        turn, before = -1, False
        for a, t, s in zip(r["action_mask"], r["trainer_logprobs"], r["logprobs"], strict=True):
            if a and not before:
                turn += 1
            if a:
                per_turn.setdefault(turn, []).append(t - s)
            before = bool(a)
    assert set(turns) == {str(i + 1) for i in per_turn}
    for i, ds in per_turn.items():
        got = turns[str(i + 1)]
        assert got["tokens"] == len(ds)
        assert got["abs_delta_mean"] == pytest.approx(mean([abs(d) for d in ds]), rel=1e-9)
        assert got["k3_mean"] == pytest.approx(mean([math.exp(d) - 1 - d for d in ds]), rel=1e-9)


def test_runs_restart_each_row():
    action = np.array([1, 0, 1, 1, 1, 0, 0, 1], bool)
    starts, turns = action_runs(action, np.array([0, 3, 3, 8]))
    assert starts.tolist() == [0, 1, 2, 4] and turns.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("c", CORRECTIONS, ids=lambda c: c.mode.name)
def test_correction_figures_match_a_loop(c: Correction):
    table = rows()
    got = stats_of(table, c).figures()["correction"]
    action = [
        (r, w, m)
        for r in table
        for w, m, a in zip(r["weights"], r["masked"], r["action_mask"], strict=True)
        if a
    ]  # noqa: E501
    masked_rows = [
        r for r in table if any(m for m, a in zip(r["masked"], r["action_mask"], strict=True) if a)
    ]  # noqa: E501
    groups = {r["group"] for r in table}
    ws = [w for _, w, _ in action]
    want = {
        "weight_mean": mean(ws),
        "ess": sum(ws) ** 2 / (len(ws) * sum(w * w for w in ws)) if any(ws) else 0.0,
        "masked_token_share": mean([m for _, _, m in action]),
        "masked_sequence_share": len(masked_rows) / 23,
        "masked_group_share": len({r["group"] for r in masked_rows}) / len(groups),
        "masked_correct_share": (mean([r["correct"] for r in masked_rows]) if masked_rows else 0.0),
    }
    close({k: got[k] for k in want}, want)
    signs = {"positive": 1, "negative": -1, "zero": 0}
    assert got["advantage_sign"] == {
        name: sum(m for r, _, m in action if r["sign"] == s) for name, s in signs.items()
    }
    if c.mode.kind != "truncate":
        assert 0 < got["masked_tokens"] < len(action)
    # per turn (a turn: a run of action tokens), the masked tokens
    per_turn: dict[str, int] = {}
    for r in table:
        turn, before = 0, False
        for a, m in zip(r["action_mask"], r["masked"], strict=True):
            turn += bool(a and not before)
            if a:
                per_turn[str(turn)] = per_turn.get(str(turn), 0) + int(m)
            before = bool(a)
    turns = stats_of(table, c).figures()["turns"]
    assert {k: t["masked_tokens"] for k, t in turns.items()} == per_turn


def verl_reference(table: list[dict[str, Any]], c: Correction | None) -> dict[str, float]:
    """verl's rollout_corr metrics as rollout_corr_helper computes them, one row at a time: its
    masked means divide by n + 1e-8 and its per-sequence means run over every row."""
    eps = 1e-8

    def clamp(x: float) -> float:
        return min(max(x, -20.0), 20.0)

    def act(r: dict[str, Any], key: str) -> list[float]:
        return [v for v, a in zip(r[key], r["action_mask"], strict=True) if a]

    def row_mean(xs: list[float]) -> float:
        return sum(xs) / (len(xs) + eps)

    ds = [d for r in table for d in r["deltas"]]
    n = len(ds)
    mt = [row_mean(act(r, "trainer_logprobs")) for r in table]
    mr = [row_mean(act(r, "logprobs")) for r in table]
    lpd = [b - a for a, b in zip(mt, mr, strict=True)]
    out = {
        "training_ppl": mean([math.exp(-x) for x in mt]),
        "training_log_ppl": mean([-x for x in mt]),
        "kl": sum(-d for d in ds) / (n + eps),
        "k3_kl": sum(math.exp(d) - d - 1 for d in ds) / (n + eps),
        "rollout_ppl": mean([math.exp(-x) for x in mr]),
        "rollout_log_ppl": mean([-x for x in mr]),
        "log_ppl_diff": mean(lpd),
        "log_ppl_abs_diff": mean([abs(x) for x in lpd]),
        "log_ppl_diff_max": max(lpd),
        "log_ppl_diff_min": min(lpd),
        "ppl_ratio": mean([math.exp(x) for x in lpd]),
        "chi2_token": sum(math.exp(2 * clamp(d)) for d in ds) / (n + eps) - 1,
        "chi2_seq": mean([math.exp(2 * clamp(sum(r["deltas"]))) for r in table]) - 1,
    }
    if c is not None and c.mode.kind == "reject":
        masked = [m for r in table for m in act(r, "masked")]
        masked_rows = [any(act(r, "masked")) for r in table]
        option = c.mode.name.replace("-", "_")
        out[f"rollout_rs_{option}_masked_fraction"] = sum(masked) / (n + eps)
        out[f"rollout_rs_{option}_seq_masked_fraction"] = sum(masked_rows) / 23
        out["rollout_rs_masked_fraction"] = sum(masked) / (n + eps)
        out["rollout_rs_seq_masked_fraction"] = mean(masked_rows)
        out |= verl_rs_reference(table, c)
    elif c is not None:
        lower = c.lo if c.mode.kind == "mask" else 1 / c.hi
        ws = [w for r in table for w in act(r, "weights")]
        raws = {
            id(r): [
                math.exp(clamp(sum(r["deltas"]) if c.mode.level == "sequence" else d))
                for d in r["deltas"]
            ]  # noqa: E501
            for r in table
        }
        raw = [x for r in table for x in raws[id(r)]]
        if c.mode.level == "sequence":
            sums = [sum(r["deltas"]) for r in table]
            out["rollout_is_max"] = math.exp(min(max(sums), 20.0))
            out["rollout_is_min"] = math.exp(min(sums))
            out["rollout_is_ratio_fraction_high"] = mean([x > math.log(c.hi) for x in sums])
            out["rollout_is_ratio_fraction_low"] = mean([x < math.log(lower) for x in sums])
        else:
            out["rollout_is_max"], out["rollout_is_min"] = max(ws), min(ws)
            out["rollout_is_ratio_fraction_high"] = sum(x > c.hi for x in raw) / (n + eps)
            out["rollout_is_ratio_fraction_low"] = sum(x < lower for x in raw) / (n + eps)
        out["rollout_is_mean"] = sum(ws) / (n + eps)
        wc = [min(max(w, 0.0), c.hi) for w in ws]
        m = sum(wc) / (n + eps)
        out["rollout_is_std"] = math.sqrt(max(sum(w * w for w in wc) / (n + eps) - m * m, 0.0))
        out["rollout_is_eff_sample_size"] = 1 / (sum((w / (m + eps)) ** 2 for w in wc) / (n + eps))
        seq = [row_mean(act(r, "weights")) for r in table]
        out["rollout_is_seq_mean"] = mean(seq)
        out["rollout_is_seq_std"] = float(np.std(seq, ddof=1))
        out["rollout_is_seq_max"], out["rollout_is_seq_min"] = max(seq), min(seq)
        out["rollout_is_seq_max_deviation"] = max(abs(x - 1) for x in seq)
        seq_raw = [row_mean(raws[id(r)]) for r in table]
        out["rollout_is_seq_fraction_high"] = mean([x > c.hi for x in seq_raw])
        out["rollout_is_seq_fraction_low"] = mean([x < lower for x in seq_raw])
        if c.mode.kind == "mask":
            out["rollout_is_oob_ratio"] = sum(not c.lo <= x <= c.hi for x in raw) / (n + eps)
    return {f"rollout_corr/{k}": v for k, v in out.items()}


def verl_rs_reference(table: list[dict[str, Any]], c: Correction) -> dict[str, float]:
    """compute_rs_metrics of one rejection option, token by token: k1's bounds are logs."""
    eps = 1e-8
    stat = [x for r in table for x, a in zip(r["raw"], r["action_mask"], strict=True) if a]
    n = len(stat)
    k1 = c.mode.statistic == "k1"
    upper, lower = (math.log(c.hi), math.log(c.lo)) if k1 else (c.hi, 0.0)
    if c.mode.level == "sequence":
        seq = [next(x for x, a in zip(r["raw"], r["action_mask"], strict=True) if a)
               for r in table if r["deltas"]]  # fmt: skip
    else:
        seq = [sum(x for x, a in zip(r["raw"], r["action_mask"], strict=True) if a)
               / (len(r["deltas"]) + eps) for r in table if r["deltas"]]  # fmt: skip
    by_seq = c.mode.level == "sequence"
    clamped = [min(max(x, lower), upper) for x in stat]
    m = sum(clamped) / (n + eps)
    out = {
        "mean": sum(stat) / (n + eps),
        "max": max(stat),
        "min": min(stat),
        "fraction_high": mean([x > upper for x in seq])
        if by_seq
        else sum(x > upper for x in stat) / (n + eps),
        "fraction_low": 0.0,
        "std": math.sqrt(max(sum(x * x for x in clamped) / (n + eps) - m * m, 0.0)),
        "seq_mean": mean(seq),
        "seq_std": float(np.std(seq, ddof=1)),
        "seq_max": max(seq),
        "seq_min": min(seq),
        "seq_max_deviation": max(abs(x) for x in seq),
        "seq_fraction_high": mean([x > upper for x in seq]),
    }
    if k1:
        low = [x < lower for x in (seq if by_seq else stat)]
        out["fraction_low"] = mean(low) if by_seq else sum(low) / (n + eps)
        out["seq_fraction_low"] = mean([x < lower for x in seq])
    option = c.mode.name.replace("-", "_")
    return {f"rollout_rs_{option}_{k}": v for k, v in out.items()}


@pytest.mark.parametrize("c", [None, *CORRECTIONS], ids=lambda c: c.mode.name if c else "none")
def test_verl_metrics_match_a_loop(c: Correction | None):
    table = rows()
    close(stats_of(table, c).framework_metrics("verl"), verl_reference(table, c))


def nemo_reference(table, c: Correction | None, threshold: float) -> dict[str, float]:
    """NeMo-RL's loss-function metrics (k3 KLs) and grpo.py's sequence error, token by token."""
    pairs = [
        (t, s)
        for r in table
        for t, s, a in zip(r["trainer_logprobs"], r["logprobs"], r["action_mask"], strict=True)
        if a
    ]

    def k3(logr: float) -> float:
        return math.exp(logr) - 1 - logr

    def js(t: float, s: float) -> float:
        m = math.log(0.5 * math.exp(t) + 0.5 * math.exp(s))
        return 0.5 * k3(t - m) + 0.5 * k3(s - m)

    errors = [(mean([math.exp(abs(d)) for d in r["deltas"]]), r) for r in table if r["deltas"]]
    masked = [r for e, r in errors if e > threshold]
    kept = [e for e, _ in errors if e <= threshold]
    out = {
        "token_mult_prob_error": mean([math.exp(abs(t - s)) for t, s in pairs]),
        "gen_kl_error": mean([k3(t - s) for t, s in pairs]),
        "policy_kl_error": mean([k3(s - t) for t, s in pairs]),
        "js_divergence_error": mean([js(t, s) for t, s in pairs]),
        "max_seq_mult_prob_error": max(e for e, _ in errors),
        "mean_seq_mult_prob_error": mean([e for e, _ in errors]),
        "min_seq_mult_prob_error": min(e for e, _ in errors),
        "num_masked_seqs": len(masked),
        "masked_correct_pct": mean([r["reward"] == 1 for r in masked]),
        "max_seq_mult_prob_error_after_mask": max(kept),
        "mean_seq_mult_prob_error_after_mask": mean(kept),
        "min_seq_mult_prob_error_after_mask": min(kept),
        "sampling_importance_ratio": mean([math.exp(t - s) for t, s in pairs]),
    }
    if c is not None and c.mode.kind != "reject":
        ws = [w for r in table for w, a in zip(r["weights"], r["action_mask"], strict=True) if a]
        if c.mode.level == "sequence":
            row_w = [
                next((w for w, a in zip(r["weights"], r["action_mask"], strict=True) if a), None)
                for r in table
            ]
            one = min(max(1.0, c.lo), c.hi) if c.mode.kind == "truncate" else 1.0
            out["sampling_importance_ratio"] = mean([one if w is None else w for w in row_w])
            raws = [math.exp(sum(r["deltas"])) for r in table for _ in r["deltas"]]
        else:
            out["sampling_importance_ratio"] = mean(ws)
            raws = [math.exp(t - s) for t, s in pairs]
        out["is_oob_ratio"] = mean([not c.lo <= x <= c.hi for x in raws])
    return out


@pytest.mark.parametrize("c", [None, *CORRECTIONS], ids=lambda c: c.mode.name if c else "none")
def test_nemo_rl_metrics_match_a_loop(c: Correction | None):
    table = rows()
    got = stats_of(table, c, threshold=1.5).framework_metrics("nemo-rl")
    close(got, nemo_reference(table, c, 1.5))


def miles_reference(table, c: Correction | None) -> dict[str, float]:
    """miles' per-sample means (0 for a sample without loss-mask tokens), averaged over samples."""

    def per_sample(f) -> float:
        return mean([mean([f(d) for d in r["deltas"]]) if r["deltas"] else 0.0 for r in table])

    def low_var_kl(d: float) -> float:
        d = min(max(d, -20.0), 20.0)
        return min(max(math.exp(d) - 1 - d, -10.0), 10.0)

    out = {
        "train_rollout_logprob_abs_diff": per_sample(abs),
        "train_rollout_kl": per_sample(low_var_kl),
    }
    if c is not None and c.mode.level == "token" and c.mode.kind != "reject":
        out["tis"] = per_sample(math.exp)
        out["tis_abs"] = per_sample(lambda d: abs(math.exp(d) - 1))
        out["tis_clipfrac"] = per_sample(lambda d: not c.lo <= math.exp(d) <= c.hi)
    return out


@pytest.mark.parametrize("c", [None, *CORRECTIONS], ids=lambda c: c.mode.name if c else "none")
def test_miles_metrics_match_a_loop(c: Correction | None):
    table = rows()
    close(stats_of(table, c).framework_metrics("miles"), miles_reference(table, c))


@pytest.mark.parametrize("c", [None, *CORRECTIONS], ids=lambda c: c.mode.name if c else "none")
def test_trl_metrics_match_a_loop(c: Correction | None):
    table = rows()
    got = stats_of(table, c).framework_metrics("trl")
    ds = [abs(d) for r in table for d in r["deltas"]]
    want = {
        "sampling/sampling_logp_difference/mean": mean(ds),
        "sampling/sampling_logp_difference/max": max(ds),
    }
    if c is not None and c.mode.kind != "reject":
        act = [[w for w, a in zip(r["weights"], r["action_mask"], strict=True) if a] for r in table]
        if c.mode.level == "sequence":  # one ratio per row, ρ = 1 where the row has no action token
            one = min(max(1.0, c.lo), c.hi) if c.mode.kind == "truncate" else 1.0
            ratios = [ws[0] if ws else one for ws in act]
        else:
            ratios = [w for ws in act for w in ws]
        prefix = "sampling/importance_sampling_ratio"
        want |= {f"{prefix}/min": min(ratios), f"{prefix}/mean": mean(ratios)}
        want[f"{prefix}/max"] = max(ratios)
    close(got, want)


@pytest.mark.parametrize(
    "c", [None, CORRECTIONS[1], CORRECTIONS[3]], ids=lambda c: c.mode.name if c else "none"
)
def test_batches_and_merged_parts_give_the_whole_log(c: Correction | None):
    table = rows()
    whole = stats_of(table, c, threshold=1.5)
    streamed = MismatchStats(correction=c, seq_error_threshold=1.5)
    parts = [MismatchStats(correction=c, seq_error_threshold=1.5) for _ in range(2)]
    for i, cut in enumerate(((0, 7), (7, 9), (9, 24))):
        part = batch_of(table[cut[0] : cut[1]], c is not None)
        streamed.add(part)
        parts[i % 2].add(part)
    parts[0].merge(parts[1])
    for got in (streamed, parts[0]):
        assert_nested_close(got.figures(), whole.figures())
        for convention in CONVENTIONS:
            close(got.framework_metrics(convention), whole.framework_metrics(convention))


@pytest.mark.parametrize(
    "c", [None, CORRECTIONS[1], CORRECTIONS[3]], ids=lambda c: c.mode.name if c else "none"
)
@pytest.mark.parametrize("tokens", [1, 5, 40])
def test_a_batch_summed_in_cache_sized_parts_gives_the_same(c: Correction | None, tokens: int):
    table = rows()
    whole = stats_of(table, c, threshold=1.5)
    batch = batch_of(table, c is not None)
    parts = list(cache_sized(batch, tokens))
    assert len(parts) > 1
    assert sum(len(p.offsets) - 1 for p in parts) == len(batch.offsets) - 1
    assert all(p.offsets[-1] <= tokens or len(p.offsets) == 2 for p in parts)
    in_parts = MismatchStats(correction=c, seq_error_threshold=1.5)
    for part in parts:
        in_parts.add(part)
    assert_nested_close(in_parts.figures(), whole.figures())
    for convention in CONVENTIONS:
        close(in_parts.framework_metrics(convention), whole.framework_metrics(convention))


def test_hand_computed_two_rows():
    # row 0: prompt, then δ = ln 2 and −ln 2; row 1: one action token with δ = 0
    ln2 = math.log(2.0)
    batch = MismatchBatch(
        trainer=np.array([-1.0, -1.0 + ln2, -2.0 - ln2, -0.5]),
        sampler=np.array([-1.0, -1.0, -2.0, -0.5]),
        action=np.array([False, True, True, True]),
        offsets=np.array([0, 3, 4]),
    )
    s = MismatchStats()
    s.add(batch)
    f = s.figures()
    assert_nested_close(f["delta"], {"mean": 0.0, "abs_mean": 2 * ln2 / 3, "min": -ln2, "max": ln2})
    # k3: 2 − 1 − ln 2 = 0.30685…, 0.5 − 1 + ln 2 = 0.19315…, 0: mean 1/6
    assert f["k3"]["token_mean"] == pytest.approx(1 / 6)
    assert f["k3"]["sequence_mean"] == pytest.approx((0.5 / 2 + 0) / 2)
    # χ²: ρ² = 4, 1/4, 1 → mean 7/4; sequences: ρ_seq = 1, 1 → 0
    assert f["chi2"] == {"token": pytest.approx(0.75), "sequence": pytest.approx(0.0)}
    # ESS of ρ = 2, 1/2, 1: (3.5)² / (3 · 5.25) = 7/9
    assert f["ess"] == pytest.approx(7 / 9)
    # ρ = 2 and 1/2 sit on [0.5, 2]'s edges (exp rounds them either side): only [0.9, 1.1]
    assert f["ratio"]["outside"]["0.9-1.1"] == pytest.approx(2 / 3)
    # |Δp|: |e^(−1+ln2) − e^−1| = e^−1, |e^(−2−ln2) − e^−2| = e^−2 / 2
    assert f["prob_abs_diff_mean"] == pytest.approx((math.exp(-1) + math.exp(-2) / 2) / 3)
    assert "turns" not in f  # one turn per row


def test_quantiles_within_half_a_bin_of_numpy():
    rng = np.random.default_rng(7)
    deltas = np.concatenate([rng.normal(0, 0.3, 50_000), rng.standard_t(2, 5_000)])
    histogram = np.bincount(histogram_bins(deltas), minlength=(1 << 16) + 2)
    qs = (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)
    got = histogram_quantiles(histogram, qs, float(deltas.min()), float(deltas.max()))
    assert np.abs(np.array(got) - np.quantile(deltas, qs)).max() <= BIN_WIDTH / 2 + 1e-12
    # beyond ±20 the outer bins give the exact extremes
    outer = np.array([-30.0, -1.0, 0.0, 1.0, 40.0])
    histogram = np.bincount(histogram_bins(outer), minlength=(1 << 16) + 2)
    assert histogram_quantiles(histogram, (0.0, 1.0), -30.0, 40.0) == [-30.0, 40.0]


def test_ratio_quantiles_of_the_log_within_the_bound():
    table = rows()
    got = stats_of(table).figures()["ratio"]["quantiles"]
    ds = np.array([d for r in table for d in r["deltas"]])
    for name, q in zip(got, (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99), strict=True):
        assert abs(math.log(got[name]) - np.quantile(ds, q)) <= BIN_WIDTH / 2 + 1e-12, name


def test_a_batch_without_weights_is_corrected_with_the_stats_correction():
    table = rows()
    for c in CORRECTIONS:
        batch = batch_of(table)
        found = corrected(batch.trainer, batch.sampler, batch.action, batch.offsets, c)
        computed, given = MismatchStats(correction=c), MismatchStats(correction=c)
        computed.add(batch)
        given.add(replace(batch, weights=found.weights, masked=found.masked, raw=found.raw))
        assert_nested_close(computed.figures(), given.figures())
        close(computed.framework_metrics("verl"), given.framework_metrics("verl"))


def test_weights_without_their_mask_are_refused():
    table = rows()
    batch = batch_of(table)
    s = MismatchStats(correction=CORRECTIONS[0])
    with pytest.raises(ValueError, match="`masked` and `raw`"):
        s.add(replace(batch, weights=np.ones(len(batch.action))))
