"""NeMo-RL's and miles' reference fixtures (``tests/fixtures/refs/health/{nemo_rl,miles}.json``,
written by ``tools/refs/make_health_nemo_miles.py``) load and line up with the log they were
computed on: one value per action token of each row, both precisions, and the plainest weights
and figures equal to their definition on the log's own δ in float64 (a fixture written against
shifted tokens or the streams swapped fails here, before any advcli comparison)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.core import health_refs
from tests.core.health_refs import LOG
from tests.core.health_refs import deltas as row_deltas

FIXTURES = ("nemo_rl", "miles")


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_names_its_log_and_follows_its_action_tokens(name: str) -> None:
    ref = health_refs.fixture(name)
    assert ref["log_sha256"] == hashlib.sha256(LOG.read_bytes()).hexdigest()
    counts = [len(d) for d in row_deltas()]
    assert [row["action_tokens"] for row in ref["rows"]] == counts
    names = [c["name"] for c in ref["cases"]]
    assert len(names) == len(set(names))
    for c in ref["cases"]:
        for precision in ("float64", "float32"):
            result = c[precision]
            assert result["metrics"], (c["name"], precision)
            for key in ("is_weights", "is_mask"):
                if key in result:  # miles without TIS has none
                    assert [len(v) for v in result[key]] == counts, (c["name"], precision, key)


@pytest.mark.parametrize(
    ("name", "case", "lo", "hi"),
    [
        ("nemo_rl", "tis", 0.0, 2.0),
        ("nemo_rl", "tis_min", 0.5, 2.0),
        ("miles", "tis", 0.0, 2.0),
        ("miles", "tis_low", 0.5, 2.0),
    ],
)
def test_truncated_weights_are_the_clamped_ratio(
    name: str, case: str, lo: float, hi: float
) -> None:
    ref = health_refs.case(name, case)
    assert ref["advcli"] == {"correction": "token-truncate", "correction_bounds": [lo, hi]}
    for precision, rtol in (("float64", 1e-12), ("float32", 1e-5)):
        result = ref[precision]
        for w, m, delta in zip(result["is_weights"], result["is_mask"], row_deltas(), strict=True):
            np.testing.assert_allclose(w, np.clip(np.exp(delta), lo, hi), rtol=rtol)
            assert not any(m)


@pytest.mark.parametrize("name", FIXTURES)
def test_icepop_keeps_the_ratio_inside_its_bounds_and_masks_the_rest(name: str) -> None:
    ref = health_refs.case(name, "icepop")
    assert ref["advcli"] == {"correction": "token-mask", "correction_bounds": [0.5, 2.0]}
    masked_somewhere = False
    result = ref["float64"]
    for w, m, delta in zip(result["is_weights"], result["is_mask"], row_deltas(), strict=True):
        rho = np.exp(delta)
        outside = (rho < 0.5) | (rho > 2.0)
        assert list(m) == outside.astype(int).tolist()
        np.testing.assert_allclose(w, np.where(outside, 0.0, rho), rtol=1e-12)
        masked_somewhere |= bool(outside.any())
    assert masked_somewhere


def test_nemo_seq_mask_tis_masks_rows_by_their_geometric_mean_ratio() -> None:
    ref = health_refs.case("nemo_rl", "seq_mask_tis")
    lo, hi = ref["advcli"]["correction_bounds"]
    kept_rows = masked_rows = 0
    result = ref["float64"]
    for w, m, delta in zip(result["is_weights"], result["is_mask"], row_deltas(), strict=True):
        if not len(delta):
            continue
        out = not lo <= np.exp(delta.mean()) <= hi
        kept_rows, masked_rows = kept_rows + (not out), masked_rows + out
        assert list(m) == [int(out)] * len(delta)
        np.testing.assert_allclose(w, 0.0 if out else np.exp(delta), rtol=1e-12)
    assert kept_rows and masked_rows


def test_nemo_figures_are_their_definitions_on_the_log() -> None:
    deltas = row_deltas()
    every = np.concatenate(deltas)
    metrics = health_refs.case("nemo_rl", "metrics_k1")["float64"]["metrics"]
    np.testing.assert_allclose(metrics["token_mult_prob_error"], np.exp(np.abs(every)).mean())
    # k1 of log(gen / prev) = −δ; of log(prev / gen) = δ
    np.testing.assert_allclose(metrics["gen_kl_error"], -every.mean(), rtol=1e-9)
    np.testing.assert_allclose(metrics["policy_kl_error"], every.mean(), rtol=1e-9)
    result = health_refs.case("nemo_rl", "seq_logprob_error_threshold")["float64"]
    errors = [np.exp(np.abs(d)).mean() if len(d) else 0.0 for d in deltas]
    np.testing.assert_allclose(result["seq_mult_prob_error"], errors, rtol=1e-12)
    assert result["sample_mask"] == [0.0 if e > 1.5 else 1.0 for e in errors]
    rewards = pq.read_table(LOG, columns=["reward"]).column("reward").to_pylist()
    masked = [r for r, e in zip(rewards, errors, strict=True) if e > 1.5]
    seq = result["seq_logprob_error_metrics"]
    assert seq["num_masked_seqs"] == len(masked)
    assert seq["masked_correct_pct"] == pytest.approx(sum(r == 1 for r in masked) / len(masked))


def test_miles_figures_are_per_sample_means_over_the_samples() -> None:
    deltas = row_deltas()
    result = health_refs.case("miles", "metrics")["float64"]
    per_sample = [np.abs(d).mean() if len(d) else 0.0 for d in deltas]
    np.testing.assert_allclose(
        result["metrics"]["train_rollout_logprob_abs_diff"], sum(per_sample) / len(deltas)
    )
    assert result["samples"] == len(deltas)
    assert result["slime_metrics"] == {
        "train_rollout_logprob_abs_diff": result["metrics"]["train_rollout_logprob_abs_diff"]
    }
    # k3 of the clamped δ, the value clamped to ±10 (miles computes it in float32)
    k3 = [np.clip(np.expm1(np.clip(d, -20, 20)) - np.clip(d, -20, 20), -10, 10) for d in deltas]
    mean_k3 = sum(k.mean() if len(k) else 0.0 for k in k3) / len(deltas)
    np.testing.assert_allclose(result["metrics"]["train_rollout_kl"], mean_k3, rtol=1e-5)
