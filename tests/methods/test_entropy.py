"""``--entropy-coef`` / ``--entropy-kappa``: A_t + min(alpha·H_t, |A_t| / kappa) on action
tokens, after any method (Cheng et al. 2025). Only the paper defines it: hand-computed values,
a float64 loop, and the real command."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.core.signals import entropy_shaped
from tests.conftest import run, write_jsonl


def test_by_hand() -> None:
    a = np.array([1.0, -1.0, 0.0, 0.2, -0.1])
    h = np.array([0.5, 2.0, 3.0, 1.0, 0.0])
    # 1 + min(0.2, 0.5); -1 + min(0.8, 0.5); 0 stays 0; 0.2 + min(0.4, 0.1); -0.1 + 0
    np.testing.assert_allclose(entropy_shaped(a, h, coef=0.4, kappa=2.0), [1.2, -0.5, 0, 0.3, -0.1])


def test_matches_loop() -> None:
    rng = np.random.default_rng(3)
    a, h = rng.normal(size=200), rng.exponential(size=200)
    loop = [x + min(0.3 * e, abs(x) / 1.5) for x, e in zip(a.tolist(), h.tolist(), strict=True)]
    np.testing.assert_allclose(entropy_shaped(a, h, coef=0.3, kappa=1.5), loop, rtol=0, atol=1e-15)


ROWS: list[dict[str, Any]] = [
    {"prompt_id": "a", "input_ids": [1, 2, 3], "action_mask": [0, 1, 1],
     "entropies": [9.0, 0.5, 2.0], "reward": 0.0},
    {"prompt_id": "a", "input_ids": [1, 2, 3], "action_mask": [0, 1, 1],
     "entropies": [9.0, 0.5, 2.0], "reward": 1.0},
    {"prompt_id": "b", "input_ids": [1, 2], "action_mask": [0, 1],
     "entropies": [1.0, 1.0], "reward": 1.0},
    {"prompt_id": "b", "input_ids": [1, 2], "action_mask": [0, 1],
     "entropies": [1.0, 1.0], "reward": 1.0},
]  # fmt: skip


@pytest.mark.parametrize("method", ["grpo", "reinforce-pp"])
def test_on_any_method_only_action_tokens_move(method: str) -> None:
    table = pa.Table.from_pylist(ROWS)
    extra: dict[str, Any] = {"scale": "none"} if method == "grpo" else {}
    plain = advcli.annotate_table(table, method=method, **extra)
    shaped = advcli.annotate_table(table, method=method, entropy_coef=0.4, **extra)
    for before, after, row in zip(plain["advantages"].to_pylist(), shaped["advantages"].to_pylist(),
                                  ROWS, strict=True):  # fmt: skip
        pairs = zip(before, row["action_mask"], row["entropies"], strict=True)
        want = [0.0 if m == 0 else b + min(0.4 * e, abs(b) / 2.0) for b, m, e in pairs]
        np.testing.assert_allclose(after, want, rtol=1e-6, atol=1e-7)


def test_cli(tmp_path) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", ROWS)
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "grpo", "--scale", "none", "--entropy-coef", "0.4",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # group a: A = ∓0.5; + min(0.4·0.5, 0.25) = 0.2 and min(0.4·2, 0.25) = 0.25
    got = pq.read_table(out)["advantages"].to_pylist()
    np.testing.assert_allclose(got[0], [0, -0.3, -0.25], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0, 0.7, 0.75], rtol=1e-6)
    assert got[2] == [0.0, 0.0]  # a zero-variance group stays 0
    no_entropy = write_jsonl(tmp_path / "plain.jsonl", [
        {k: v for k, v in r.items() if k != "entropies"} for r in ROWS])  # fmt: skip
    proc = run("annotate", no_entropy, "--method", "grpo", "--entropy-coef", "0.4",
               "--out", str(tmp_path / "other.parquet"))  # fmt: skip
    assert proc.returncode == 1  # a log without a column the run needs, as for every role
    assert b"no 'entropies' column" in proc.stderr and b"Traceback" not in proc.stderr
    assert proc.stderr.count(b"\n") == 1, proc.stderr
