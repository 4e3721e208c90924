"""``advcli audit``'s health sections, driven through the command on hand-made logs (figures
checked against float64 loops) and on real dumps (AReaL's versions, slime's status); the
mismatch section against each framework's own code (the reference fixtures), float64 loops and
real dumps with both log-prob streams."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from advcli.io.tokens import extract_tokens, token_columns
from advcli.run import jobs
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


def test_prime_rl_policy_versions():
    """prime-rl's step files: each episode's lag is prime-rl's own staleness
    (``episode_staleness``: the step that trains it, minus 1, minus its policy's first version),
    the step its folder's; mixed where its policy span covers a weight update."""
    folder = REAL / "prime-rl/default"
    lags, mixed = [], 0
    for path in sorted(folder.glob("rollouts/step_*/train/effective/traces.jsonl")):
        step = int(path.parts[-4].removeprefix("step_"))
        for line in path.read_text().splitlines():
            policy = json.loads(line)["run"]["work"]["policy"]
            lags.append(max(0, (step - 1) - policy["start"]))
            mixed += policy["end"] > policy["start"]
    out = json.loads(ok(run("audit", folder, "--from", "prime-rl", "--json")).stdout)
    s = out["staleness"]
    assert s["lag_histogram"] == {str(k): lags.count(k) for k in sorted(set(lags))}
    assert s["mean_lag"] == sum(lags) / len(lags) and s["mixed_version_share"] == mixed / len(lags)
    assert 1 in lags  # the episodes dispatched for step 1 and trained at step 2


# The mismatch section ------------------------------------------------------------------------

HEALTH = Path(__file__).parents[1] / "fixtures" / "refs" / "health"
FIXTURES = {"verl": "verl", "trl": "trl", "nemo-rl": "nemo_rl", "miles": "miles"}
# What a fixture case holds that advcli cannot spell, and why (case or key skipped)
CANNOT_SPELL_CASE = {
    ("verl", "token_k1,seq_mean_k3"): "two rollout_rs options chained; `--correction` is one mode",
    ("nemo-rl", "seq_logprob_error_threshold"): "grpo.seq_logprob_error_threshold masks rows "
    "before the loss metrics; audit has no option for it",
}
CANNOT_SPELL_KEY = {
    "rollout_corr/rollout_is_batch_norm_factor": "rollout_is_batch_normalize rescales the "
    "weights after the metrics; advcli's correction has no batch normalisation",
}
# NeMo-RL's loss function logs its policy loss's figures beside the mismatch's: not the mismatch
NEMO_LOSS_KEYS = {"approx_entropy", "kl_penalty", "loss", "num_valid_samples", "positive_nll_loss",
                  "probs_ratio", "probs_ratio_clamped", "probs_ratio_clamped_max",
                  "probs_ratio_clamped_min", "probs_ratio_max", "probs_ratio_min"}  # fmt: skip
NEMO_GRPO_KEYS = {"max_seq_mult_prob_error", "mean_seq_mult_prob_error", "min_seq_mult_prob_error"}


def fixture_cases() -> list[tuple[str, dict[str, Any]]]:
    return [
        (convention, case)
        for convention, name in FIXTURES.items()
        for case in json.loads((HEALTH / f"{name}.json").read_text())["cases"]
    ]


def correction_args(advcli: dict[str, Any]) -> list[str]:
    """The fixture's correction as flags: a one-bound mode (k2, k3 rejection) takes HI alone."""
    mode, bounds = advcli["correction"], advcli["correction_bounds"]
    if mode is None:
        return []
    lo, hi = bounds
    two_sided = not mode.startswith(("token-k", "seq-")) or mode.endswith("k1") or "mask" in mode
    return ["--correction", mode, "--correction-bounds", f"{lo},{hi}" if two_sided else f"{hi}"]


@pytest.mark.parametrize(
    ("convention", "case"), fixture_cases(), ids=lambda x: x if isinstance(x, str) else x["name"]
)
def test_framework_metrics_equal_the_frameworks_own_code(convention: str, case: dict[str, Any]):
    """``audit --convention NAME [--correction M --correction-bounds LO,HI] --json`` on the
    reference log gives each metric the framework's own code computed (float64) within 1e-6,
    relative for the huge ones (the log holds δ of ±25)."""
    if (reason := CANNOT_SPELL_CASE.get((convention, case["name"]))) is not None:
        pytest.skip(reason)
    args = ["--convention", convention, *correction_args(case["advcli"])]
    out = json.loads(ok(run("audit", HEALTH / "log.parquet", "--json", *args)).stdout)
    got = out["mismatch"]["framework_metrics"]
    want = dict(case["float64"]["metrics"])
    if convention == "nemo-rl":
        assert set(want) - set(got) == NEMO_LOSS_KEYS
        assert set(got) - set(want) == NEMO_GRPO_KEYS  # grpo.py's, not the loss function's
        kl_type = case["setting"]["loss_fn"].get("reference_policy_kl_type", "k3")
        if kl_type != "k3":  # advcli reports NeMo-RL's default KL type, k3
            want.pop("gen_kl_error"), want.pop("policy_kl_error")
        want = {k: v for k, v in want.items() if k not in NEMO_LOSS_KEYS}
    else:
        want = {k: v for k, v in want.items() if k not in CANNOT_SPELL_KEY}
        assert set(got) == set(want), set(got) ^ set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key


def float64_figures(rows: list[tuple[list[float], list[float]]]) -> dict[str, float]:
    """advcli's mismatch figures, one action token at a time: ``rows`` of (trainer, sampler)
    log-probs over each row's action tokens."""
    ds = [t - s for tr, sa in rows for t, s in zip(tr, sa, strict=True)]
    seqs = [[t - s for t, s in zip(tr, sa, strict=True)] for tr, sa in rows if tr]
    n, m = len(ds), len(seqs)

    def clamp(x: float) -> float:
        return min(max(x, -20.0), 20.0)

    rho = [math.exp(clamp(d)) for d in ds]
    k3 = [math.exp(d) - 1 - d for d in ds]
    return {
        "action_tokens": n,
        "sequences": m,
        "delta_mean": sum(ds) / n,
        "delta_abs_mean": sum(abs(d) for d in ds) / n,
        "delta_min": min(ds),
        "delta_max": max(ds),
        "k1_token": -sum(ds) / n,
        "k2_token": sum(d * d / 2 for d in ds) / n,
        "k3_token": sum(k3) / n,
        "k3_sequence": sum(sum(math.exp(d) - 1 - d for d in q) / len(q) for q in seqs) / m,
        "chi2_token": sum(r * r for r in rho) / n - 1,
        "chi2_sequence": sum(math.exp(2 * clamp(sum(q))) for q in seqs) / m - 1,
        "ppl_ratio": sum(math.exp(-sum(q) / len(q)) for q in seqs) / m,
        "ess": sum(rho) ** 2 / (n * sum(r * r for r in rho)),
        "ratio_mean": sum(math.exp(d) for d in ds) / n,
        "outside_0.9": sum(not 0.9 <= math.exp(d) <= 1.1 for d in ds) / n,
    }


def section_figures(m: dict[str, Any]) -> dict[str, float]:
    """The same figures, read from ``audit --json``'s mismatch section."""
    return {
        "action_tokens": m["action_tokens"],
        "sequences": m["sequences"],
        **{f"delta_{k}": m["delta"][k] for k in ("mean", "abs_mean", "min", "max")},
        "k1_token": m["k1"]["token_mean"],
        "k2_token": m["k2"]["token_mean"],
        "k3_token": m["k3"]["token_mean"],
        "k3_sequence": m["k3"]["sequence_mean"],
        "chi2_token": m["chi2"]["token"],
        "chi2_sequence": m["chi2"]["sequence"],
        "ppl_ratio": m["ppl_ratio"],
        "ess": m["ess"],
        "ratio_mean": m["ratio"]["mean"],
        "outside_0.9": m["ratio"]["outside"]["0.9-1.1"],
    }


def assert_close(got: dict[str, float], want: dict[str, float]) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def reference_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(HEALTH / "log.parquet").to_pylist()
    for r in rows:
        act = [a == 1 for a in r["action_mask"]]
        r["trainer"] = [x for x, a in zip(r["trainer_logprobs"], act, strict=True) if a]
        r["sampler"] = [x for x, a in zip(r["logprobs"], act, strict=True) if a]
    return rows


def test_figures_and_the_correction_against_a_float64_loop():
    """advcli's figures, and what token-mask [0.5, 2] masks: by the rollout's grpo advantage
    sign (reward above or below its group's mean), and the correct share (reward 1 of 0/1)."""
    rows = reference_rows()
    args = ["--correction", "token-mask", "--correction-bounds", "0.5,2"]
    m = json.loads(ok(run("audit", HEALTH / "log.parquet", "--json", *args)).stdout)["mismatch"]
    assert_close(section_figures(m), float64_figures([(r["trainer"], r["sampler"]) for r in rows]))
    means: dict[str, list[float]] = {}
    for r in rows:
        means.setdefault(r["prompt_id"], []).append(r["reward"])
    signs = {"positive": 0, "negative": 0, "zero": 0}
    masked_rows = []
    for r in rows:
        masked = sum(not 0.5 <= math.exp(t - s) <= 2 for t, s in zip(r["trainer"], r["sampler"],
                                                                     strict=True))  # fmt: skip
        diff = r["reward"] - sum(means[r["prompt_id"]]) / len(means[r["prompt_id"]])
        signs["positive" if diff > 0 else "negative" if diff < 0 else "zero"] += masked
        if masked:
            masked_rows.append(r)
    c = m["correction"]
    assert c["advantage_sign"] == signs
    assert c["masked_tokens"] == sum(signs.values())
    assert c["masked_sequence_share"] == len(masked_rows) / m["sequences"]
    assert c["masked_group_share"] == len({r["prompt_id"] for r in masked_rows}) / 6
    assert c["masked_correct_share"] == sum(r["reward"] == 1 for r in masked_rows) / len(
        masked_rows
    )


def streams_of(path: Path, preset: str) -> list[tuple[list[float], list[float]]]:
    """Each row's trainer and sampler log-probs over its action tokens, as the preset reads
    the dump (the loop's input; its arithmetic is the test's own)."""
    log = jobs.job([str(path)], preset=preset).open()
    extra = ("logprobs", "trainer_logprobs")
    columns = token_columns(log.roles, values=False, extra=extra)
    out = []
    for row0, table in log.source.batches(columns, 1 << 20):
        tok = extract_tokens(table, log.roles, log.source.sources, row0, values=False, extra=extra)
        for a, b in zip(tok.offsets[:-1], tok.offsets[1:], strict=True):
            act = tok.mask[a:b].astype(bool)
            out.append(
                (
                    tok.extra["trainer_logprobs"][a:b][act].astype(float).tolist(),
                    tok.extra["logprobs"][a:b][act].astype(float).tolist(),
                )
            )
    return out


@pytest.mark.parametrize(
    ("dump", "preset", "convention"),
    [
        ("nemo-rl/default", "nemo-rl", "nemo-rl"),
        ("slime-train/default", "slime", "miles"),
        ("miles-train/default", "miles", "miles"),
        ("prime-rl/stream_multi_annotation", "prime-rl", None),  # trainer annotations, fp32
    ],
)
def test_real_dumps_with_both_streams(dump: str, preset: str, convention: str | None):
    """``audit --from X --json`` on real dumps that log both streams: the figures equal a
    float64 loop over them, and ``--from`` names the framework's own metrics."""
    path = REAL / dump
    m = json.loads(ok(run("audit", path, "--from", preset, "--json")).stdout)["mismatch"]
    assert_close(section_figures(m), float64_figures(streams_of(path, preset)))
    assert m.get("convention") == convention
    assert ("framework_metrics" in m) == (convention is not None)


def test_by_step_is_each_steps_own_audit(tmp_path):
    """``--by step``: each step's mismatch is that of a log holding only its rows (groups do
    not span steps, so the grpo signs are the same)."""
    table = pq.read_table(HEALTH / "log.parquet")
    step = [1 if int(p[1:]) < 3 else 2 for p in table.column("prompt_id").to_pylist()]
    table = table.append_column("step", pa.array(step))
    pq.write_table(table, tmp_path / "both.parquet")
    args = ["--json", "--correction", "sequence-mask", "--convention", "trl"]
    both = json.loads(ok(run("audit", tmp_path / "both.parquet", "--by", "step", *args)).stdout)
    for k in (1, 2):
        pq.write_table(table.filter(pc.equal(table.column("step"), k)), tmp_path / "one.parquet")
        one = json.loads(ok(run("audit", tmp_path / "one.parquet", *args)).stdout)["mismatch"]
        by_step = both["mismatch"]["by_step"][str(k)]
        assert by_step["framework_metrics"] == pytest.approx(one["framework_metrics"])
        assert_close(section_figures(by_step), section_figures(one))
        step_c, one_c = by_step["correction"], one["correction"]
        assert step_c.pop("advantage_sign") == one_c.pop("advantage_sign")
        assert step_c.pop("mode") == one_c.pop("mode") == "sequence-mask"
        assert step_c == pytest.approx(one_c)


def test_without_the_trainer_stream_a_line_and_exit_0(tmp_path):
    table = pq.read_table(HEALTH / "log.parquet").drop_columns(["trainer_logprobs"])
    pq.write_table(table, tmp_path / "one.parquet")
    line = "omitted: the log has no trainer log-probs (role `trainer_logprobs`)"
    args = ["--correction", "token-mask", "--convention", "verl"]
    assert (
        json.loads(ok(run("audit", tmp_path / "one.parquet", "--json", *args)).stdout)["mismatch"]
        == line
    )
    assert f"mismatch: {line}" in ok(run("audit", tmp_path / "one.parquet")).stdout.decode()


def test_advisories_k3_and_masked_share_fail_on():
    log = HEALTH / "log.parquet"
    args = ["--correction", "token-mask", "--correction-bounds", "0.9,1.1"]
    out = json.loads(ok(run("audit", log, "--json", *args)).stdout)
    assert out["advisories"].keys() >= {"k3", "masked-share"}
    failed = run("audit", log, *args, "--fail-on", "masked-share")
    assert failed.returncode == 3 and "masked-share" in one_line(failed)
    assert run("audit", log, "--fail-on", "masked-share").returncode == 0  # no correction


def test_a_bad_convention_or_correction_is_one_line():
    log = HEALTH / "log.parquet"
    bad = run("audit", log, "--convention", "nemo")
    assert bad.returncode == 2 and "--convention" in one_line(bad)
    bad = run("audit", log, "--correction", "token-k2")
    assert bad.returncode == 2 and "--correction-bounds" in one_line(bad)
