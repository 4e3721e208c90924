"""Rollout-correction weights and masks against a float64 loop written from the definitions,
and a worked example."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from advcli.core.correction import (
    ALIASES,
    FLAVOURS,
    MODES,
    Correction,
    bounds_problem,
    corrected,
    default_lo,
    mode_named,
)
from tests.core.health_refs import case, fixture

LOG = Path(__file__).parents[1] / "fixtures" / "refs" / "health" / "log.parquet"


def health_log() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = pq.read_table(LOG).to_pydict()
    offsets = np.cumsum([0] + [len(m) for m in t["action_mask"]])
    flat = [np.concatenate([np.asarray(x, dtype=np.float64) for x in t[c]]) for c in
            ("trainer_logprobs", "logprobs", "action_mask")]  # fmt: skip
    return flat[0], flat[1], flat[2].astype(bool), offsets


def loop(
    trainer: np.ndarray, sampler: np.ndarray, action: np.ndarray, offsets: np.ndarray, c: Correction
) -> tuple[np.ndarray, np.ndarray]:
    """One row, one token at a time, in float64, from the module docstring."""
    mode, lo, hi, flavour = c.mode, c.lo, c.hi, c.flavour
    weights, masked = [], []
    for i in range(len(offsets) - 1):
        ts = range(offsets[i], offsets[i + 1])
        acts = [t for t in ts if action[t]]
        d = {t: float(trainer[t]) - float(sampler[t]) for t in acts}
        if flavour == "verl" and (mode.level == "token" or mode.kind == "reject"):
            d = {t: max(-20.0, min(20.0, v)) for t, v in d.items()}

        def ratio(x: float) -> float:
            try:
                r = math.exp(x)
            except OverflowError:
                r = math.inf
            return 0.0 if flavour == "nemo-rl" and r == math.inf else r

        total = sum(d.values())
        if flavour == "verl" and mode.level == "sequence" and mode.kind != "reject":
            total = max(-20.0, min(20.0, total))
        row_w: dict[int, float] = {}
        row_m: dict[int, bool] = {}
        for t in acts:
            if mode.kind == "reject":

                def k(v: float) -> float:
                    return {"k1": -v, "k2": 0.5 * v * v, "k3": math.expm1(v) - v}[
                        mode.statistic or ""
                    ]

                if mode.reduce is None:
                    s = k(d[t])
                elif mode.reduce == "sum":
                    s = sum(k(v) for v in d.values())
                elif mode.reduce == "mean":
                    s = sum(k(v) for v in d.values()) / len(d)
                else:
                    s = max(k(v) for v in d.values())
                ok = (math.log(lo) <= s <= math.log(hi)) if mode.statistic == "k1" else s <= hi
                row_w[t], row_m[t] = (1.0 if ok else 0.0), not ok
                continue
            if mode.kind == "geometric":
                r = ratio(total / len(d))
                ok = lo <= r <= hi
                row_w[t], row_m[t] = (ratio(d[t]) if ok else 0.0), not ok
                continue
            r = ratio(d[t] if mode.level == "token" else total)
            if mode.kind == "truncate":
                row_w[t], row_m[t] = min(max(r, lo), hi), False
            else:
                ok = lo <= r <= hi
                row_w[t], row_m[t] = (r if ok else 0.0), not ok
        for t in ts:
            weights.append(row_w.get(t, 1.0))
            masked.append(row_m.get(t, False))
    return np.array(weights), np.array(masked)


BOUNDS = {"truncate": (0.0, 2.0), "mask": (0.5, 2.0), "geometric": (0.8, 1.25)}
REJECT_HI = {"k1": 2.0, "k2": 0.3, "k3": 0.3}


def cases() -> list[Correction]:
    out = []
    for mode in MODES.values():
        if mode.kind == "reject":
            hi = REJECT_HI[mode.statistic or ""] * (4 if mode.reduce == "sum" else 1)
            lo = default_lo(mode, hi)
        else:
            lo, hi = BOUNDS[mode.kind]
        out += [Correction(mode, lo, hi, flavour) for flavour in FLAVOURS]
    return out


@pytest.mark.parametrize("c", cases(), ids=lambda c: f"{c.mode.name}-{c.flavour}")
def test_every_mode_and_flavour_equals_the_loop(c: Correction) -> None:
    trainer, sampler, action, offsets = health_log()
    got = corrected(trainer, sampler, action, offsets, c)
    weights, masked = loop(trainer, sampler, action, offsets, c)
    np.testing.assert_allclose(got.weights, weights, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got.masked, masked)
    assert not got.masked[~action].any() and (got.weights[~action] == 1).all()
    # each bound both keeps and throws away some of this log (else the case proves little)
    if c.mode.kind != "truncate":
        assert 0 < got.masked.sum() < action.sum(), c


def test_a_worked_example() -> None:
    """Two rows: [prompt, δ=ln 3, δ=ln 0.25] and [prompt, δ=ln 1.5]."""
    trainer = np.log([0.5, 0.3, 0.05, 0.5, 0.3])
    sampler = np.log([0.5, 0.1, 0.2, 0.5, 0.2])
    action = np.array([0, 1, 1, 0, 1], dtype=bool)
    offsets = np.array([0, 3, 5])

    def run(name: str, lo: float, hi: float) -> tuple[list[float], list[bool]]:
        mode = mode_named(name)
        assert mode is not None
        got = corrected(trainer, sampler, action, offsets, Correction(mode, lo, hi))
        return np.round(got.weights, 9).tolist(), got.masked.tolist()

    no = [False] * 5
    assert run("token-truncate", 0.0, 2.0) == ([1.0, 2.0, 0.25, 1.0, 1.5], no)
    assert run("tis", 0.5, 2.0) == ([1.0, 2.0, 0.5, 1.0, 1.5], no)
    assert run("token-mask", 0.5, 2.0) == ([1.0, 0.0, 0.0, 1.0, 1.5], [0, 1, 1, 0, 0])
    # ρ_seq: 3 × 0.25 = 0.75 and 1.5
    assert run("sequence-truncate", 0.0, 1.2) == ([1.0, 0.75, 0.75, 1.0, 1.2], no)
    assert run("sequence_mask", 0.8, 2.0) == ([1.0, 0.0, 0.0, 1.0, 1.5], [0, 1, 1, 0, 0])
    # geometric mean of row 0: √0.75 ≈ 0.866, kept; the tokens keep their own ρ
    assert run("seq-mask-tis", 0.8, 2.0) == ([1.0, 3.0, 0.25, 1.0, 1.5], no)
    # k1 = −δ: ln(1/3), ln 4, ln(1/1.5); kept within [ln 0.5, ln 2]
    assert run("token-k1", 0.5, 2.0) == ([1.0, 0.0, 0.0, 1.0, 1.0], [0, 1, 1, 0, 0])
    # k2 = ½δ²: 0.603, 0.961, 0.082
    assert run("token_k2", 0.0, 0.7) == ([1.0, 1.0, 0.0, 1.0, 1.0], [0, 0, 1, 0, 0])
    assert run("seq-max-k2", 0.0, 0.7) == ([1.0, 0.0, 0.0, 1.0, 1.0], [0, 1, 1, 0, 0])


def test_names_and_bounds() -> None:
    assert set(ALIASES.values()) <= set(MODES)
    assert mode_named("seq_mean_k3") is MODES["seq-mean-k3"] and mode_named("nope") is None
    k2, k1 = MODES["token-k2"], MODES["token-k1"]
    assert bounds_problem(k2, 0.1, 1.0) is not None and bounds_problem(k2, None, 1.0) is None
    assert bounds_problem(k1, 0.0, 2.0) is not None and default_lo(k1, 2.0) == 0.5
    assert bounds_problem(MODES["token-mask"], 3.0, 2.0) is not None
    assert bounds_problem(MODES["token-mask"], 0.5, math.inf) is not None


def framework_cases(framework: str) -> list[dict[str, Any]]:
    """The fixture's cases advcli spells as one mode (verl's batch normalisation, chained
    rejection options and NeMo-RL's row masking by sequence error are not modes of advcli's)."""
    return [
        c
        for c in fixture(framework)["cases"]
        if c["advcli"]["correction"] and "," not in c["advcli"]["correction"]
        and not c["setting"].get("rollout_is_batch_normalize")
        and "seq_logprob_error_threshold" not in c["setting"].get("grpo", {})
    ]  # fmt: skip


def per_action_token(x: np.ndarray, action: np.ndarray, offsets: np.ndarray) -> list[list[float]]:
    return [x[a:b][action[a:b]].tolist() for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(
    ("framework", "name"),
    [(f, c["name"]) for f in ("verl", "trl", "nemo_rl", "miles") for c in framework_cases(f)],
)
def test_the_frameworks_own_weights_and_masks(framework: str, name: str) -> None:
    """Against verl's rollout_corr_helper, TRL's GRPOTrainer, NeMo-RL's ClippedPGLossFn and
    miles' TIS functions run on the same log (float64)."""
    ref = case(framework, name)
    mode = mode_named(ref["advcli"]["correction"])
    assert mode is not None
    lo, hi = ref["advcli"]["correction_bounds"]
    trainer, sampler, action, offsets = health_log()
    flavour = framework.replace("_", "-")
    got = corrected(trainer, sampler, action, offsets, Correction(mode, lo, hi, flavour))
    weights = per_action_token(got.weights, action, offsets)
    kept = per_action_token((~got.masked).astype(float), action, offsets)
    out = ref["float64"]
    if framework in ("nemo_rl", "miles"):
        masked = per_action_token(got.masked.astype(float), action, offsets)
        for got_row, want_row in zip(masked, out["is_mask"], strict=True):
            np.testing.assert_array_equal(got_row, want_row)
        expected = out["is_weights"]
    elif framework == "trl":
        expected = out["importance_sampling_ratio"]
        if mode.level == "sequence":  # TRL keeps one ratio per row
            expected = [[w] * len(row) for w, row in zip(expected, weights, strict=True)]
    elif mode.kind == "reject":  # verl rejects by zeroing its response mask
        expected, weights = out["response_mask"], kept
    else:
        expected = out["rollout_is_weights"]
    for got_row, want_row in zip(weights, expected, strict=True):
        np.testing.assert_allclose(got_row, want_row, rtol=1e-6, atol=1e-12)
