"""The rollout-correction reference fixtures (tests/core/health_refs.py) load and line up with
the log they were computed on: one value per action token of each row, cases named once, both
precisions, and the plainest weights equal to the formula on the log's own δ (so a fixture
written against shifted tokens fails here, before any advcli comparison)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from tests.core.health_refs import FRAMEWORKS, LOG, case, deltas, fixture, log_rows

PER_TOKEN = {
    "verl": ("rollout_is_weights", "response_mask"),
    "trl": ("importance_sampling_ratio",),
}


def _action_tokens() -> list[int]:
    return [sum(row["action_mask"]) for row in log_rows()]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fixture_names_its_log_and_rows(framework: str) -> None:
    ref = fixture(framework)
    assert ref["log_sha256"] == hashlib.sha256(LOG.read_bytes()).hexdigest()
    assert [row["action_tokens"] for row in ref["rows"]] == _action_tokens()
    names = [c["name"] for c in ref["cases"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_per_token_lists_follow_action_tokens(framework: str) -> None:
    counts = _action_tokens()
    for c in fixture(framework)["cases"]:
        for precision in ("float64", "float32"):
            result: dict[str, Any] = c[precision]
            assert result["metrics"], (c["name"], precision)
            for key in PER_TOKEN[framework]:
                values = result[key]
                if values is None:  # verl without rollout_is
                    continue
                if framework == "trl" and c["setting"]["vllm_importance_sampling_mode"].startswith(
                    "sequence"
                ):
                    assert len(values) == len(counts)  # one ratio per row
                else:
                    assert [len(v) for v in values] == counts, (c["name"], precision, key)


def test_verl_token_tis_is_the_clamped_ratio() -> None:
    weights = case("verl", "token_tis")["float64"]["rollout_is_weights"]
    for w, delta in zip(weights, deltas(), strict=True):
        np.testing.assert_allclose(w, np.minimum(np.exp(np.clip(delta, -20, 20)), 2.0), rtol=1e-12)


def test_trl_sequence_truncate_is_the_clamped_row_ratio() -> None:
    ratios = case("trl", "sequence_truncate")["float64"]["importance_sampling_ratio"]
    expected = [min(float(np.exp(delta.sum())), 3.0) for delta in deltas()]
    np.testing.assert_allclose(ratios, expected, rtol=1e-12)
