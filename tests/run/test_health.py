"""``advcli audit``'s health sections, driven through the command on hand-made logs (figures
checked against float64 loops) and on real dumps (AReaL's versions, slime's status)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import one_line, run

REAL = Path(__file__).parents[1] / "fixtures" / "real"


def ok(proc: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def health_log(path: Path) -> dict[str, list]:
    """Two steps, four groups of three rollouts: versions, truncations, entropies."""
    rng = np.random.default_rng(3)
    n = 12
    lengths = rng.integers(2, 6, n)
    cols: dict[str, list] = {
        "prompt_id": [f"p{i // 3}" for i in range(n)],
        "reward": [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0],
        "step": [1] * 6 + [2] * 6,
        "model_version": [1, 0, 1, 1, 1, 1, 2, 0, 1, 2, 2, 2],
        "truncated": [
            False,
            True,
            False,
            False,
            False,
            False,
            True,
            False,
            False,
            True,
            True,
            True,
        ],
    }
    cols["input_ids"] = [list(range(3 + k)) for k in lengths.tolist()]
    cols["action_mask"] = [[0, 0, 0] + [1] * k for k in lengths.tolist()]
    cols["entropies"] = [
        [9.0, 9.0, 9.0] + rng.random(k).round(3).tolist() for k in lengths.tolist()
    ]
    pq.write_table(pa.table(cols), path)
    return cols


def test_sections_against_a_float64_loop(tmp_path):
    path = tmp_path / "h.parquet"
    cols = health_log(path)
    out = json.loads(ok(run("audit", path, "--json", "--entropy-threshold", "0.5")).stdout)
    lags = [s - v for s, v in zip(cols["step"], cols["model_version"], strict=True)]
    hist: dict[str, int] = {}
    for lag in lags:
        hist[str(lag)] = hist.get(str(lag), 0) + 1
    assert out["staleness"]["lag_histogram"] == dict(sorted(hist.items()))
    assert out["staleness"]["mean_lag"] == sum(lags) / len(lags)
    assert out["staleness"]["mixed_version_share"] is None  # no last version: cannot tell
    for k, figures in out["staleness"]["max_staleness"].items():
        dropped = [i for i, lag in enumerate(lags) if lag > int(k)]
        assert figures == {
            "rollouts_dropped": len(dropped),
            "groups_broken": len({cols["prompt_id"][i] for i in dropped}),
        }
    lengths = [sum(m) for m in cols["action_mask"]]
    assert out["lengths"]["length"]["mean"] == sum(lengths) / len(lengths)
    assert out["lengths"]["length"]["max"] == max(lengths)
    assert out["lengths"]["truncated_share"] == sum(cols["truncated"]) / 12
    assert out["lengths"]["groups_with_truncated_share"] == 3 / 4
    assert out["lengths"]["truncated_from"] == "truncated"
    on_actions = [
        [e for e, m in zip(es, ms, strict=True) if m]
        for es, ms in zip(cols["entropies"], cols["action_mask"], strict=True)
    ]
    flat = [e for es in on_actions for e in es]
    assert abs(out["entropy"]["token_mean"] - sum(flat) / len(flat)) < 1e-6
    assert out["entropy"]["high_entropy_token_share"] == sum(e > 0.5 for e in flat) / len(flat)
    assert out["mismatch"].startswith("omitted: the log has no trainer log-probs")
    assert out["advisories"].keys() == {"truncated"}  # 5 of 12 truncated, > 25%
    # staleness's advantages are grpo's (annotate's), by lag
    annotated = tmp_path / "a.parquet"
    ok(run("annotate", path, "--method", "grpo", "--out", annotated, "-q"))
    adv = pq.read_table(annotated).column("advantage").to_pylist()
    for k, figures in out["staleness"]["by_lag"].items():
        at = [a for a, lag in zip(adv, lags, strict=True) if lag == int(k)]
        assert abs(figures["advantage_mean"] - sum(at) / len(at)) < 1e-6


def test_by_step_fail_on_and_plain(tmp_path):
    path = tmp_path / "h.parquet"
    health_log(path)
    out = json.loads(ok(run("audit", path, "--json", "--by", "step")).stdout)
    assert set(out["staleness"]["by_step"]) == {"1", "2"}
    assert out["staleness"]["by_step"]["1"]["lag_histogram"] == {"0": 5, "1": 1}
    assert out["lengths"]["by_step"]["2"]["truncated_share"] == 4 / 6
    assert out["groups_by_step"]["1"]["rollouts"] == 6
    plain = ok(run("audit", path, "--by", "step")).stdout.decode()
    assert "staleness by step" in plain and "advisory truncated:" in plain
    failed = run("audit", path, "--fail-on", "stale", "--fail-on", "truncated")
    assert failed.returncode == 3 and "truncated" in one_line(failed)
    assert ok(run("audit", path, "--fail-on", "stale")).returncode == 0
    unknown = run("audit", path, "--fail-on", "stal")
    assert unknown.returncode != 0 and "stale" in unknown.stderr.decode()
    assert "Traceback" not in unknown.stderr.decode()


def test_without_the_columns_the_sections_say_which(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]}), path)
    out = json.loads(ok(run("audit", path, "--json")).stdout)
    assert out["staleness"] == "omitted: the log has no version column (role `version`)"
    assert out["lengths"] == "omitted: the log has no token ids (role `input_ids`)"
    assert out["entropy"] == "omitted: the log has no entropies (role `entropies`)"
    plain = ok(run("audit", path)).stdout.decode()
    assert "staleness" not in plain and "mismatch: omitted" in plain


def test_areal_versions():
    """AReaL's v2 dump: folder 4's task 1 samples 0 and 1 began at version 3 (lag 1) and
    ended at 4 (mixed)."""
    out = json.loads(ok(run("audit", REAL / "areal/v2_fields", "--from", "areal", "--json")).stdout)
    s = out["staleness"]
    assert s["lag_histogram"] == {"0": 6, "1": 2} and s["mixed_version_share"] == 2 / 8
    assert s["max_staleness"]["0"] == {"rollouts_dropped": 2, "groups_broken": 1}


def test_slime_status_truncation():
    """slime's train dump: one sample of eight has status truncated."""
    out = json.loads(
        ok(run("audit", REAL / "slime-train/default", "--from", "slime", "--json")).stdout
    )
    assert out["lengths"]["truncated_from"] == "status = 'truncated'"
    assert out["lengths"]["truncated_rollouts"] == 1
