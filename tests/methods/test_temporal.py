"""Temporal methods end to end: segments, truncation, reward placement, whitening, errors."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from tests.conftest import run, write_jsonl


def annotate(tmp_path, rows, *args, name="o.parquet"):
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / name
    proc = run("annotate", path, "--out", str(out), "-q", "--force", *args)
    assert proc.returncode == 0, proc.stderr.decode()
    return pl.read_parquet(out)


def fail(tmp_path, rows, *args):
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", path, "--out", str(tmp_path / "refused.parquet"), *args)
    assert proc.returncode == 1
    assert not (tmp_path / "refused.parquet").exists()
    text = proc.stderr.decode()
    assert "Traceback" not in text and text.count("\n") == 1
    return text.strip(), path


def seed_row(**extra):
    # prompt token P, then actions u, b, d with V = [0.2, 0.6, 0.4]; reward 1 at the end
    row = {
        "prompt_id": "p",
        "input_ids": [7, 1, 2, 3],
        "action_mask": [0, 1, 1, 1],
        "values": [0.9, 0.2, 0.6, 0.4],
        "reward": 1.0,
    }
    row.update(extra)
    return row


@pytest.mark.parametrize(
    ("method", "expected"),
    [("mc", [0.8, 0.4, 0.6]), ("td", [0.4, -0.2, 0.6]), ("gae", [0.8, 0.4, 0.6])],
)
def test_seed_worked_example(tmp_path, method, expected):
    lam = ["--lam", "1"] if method == "gae" else []  # mc and td take no lambda
    df = annotate(tmp_path, [seed_row()], "--method", method, "--gamma", "1", *lam)
    np.testing.assert_allclose(df["advantages"][0].to_list(), [0.0, *expected], atol=1e-6)
    # returns (lambda_critic = 1) are the Monte-Carlo returns: 1 at every action
    np.testing.assert_allclose(df["returns"][0].to_list(), [0, 1, 1, 1], atol=1e-6)


def test_truncated_row_bootstraps(tmp_path):
    rows = [seed_row(truncated=True, bootstrap_value=0.5)]
    df = annotate(tmp_path, rows, "--method", "td", "--gamma", "0.9")
    # last action: 1 + 0.9 * 0.5 - 0.4
    np.testing.assert_allclose(df["advantages"][0].to_list()[3], 1 + 0.45 - 0.4, atol=1e-6)


def test_truncated_without_bootstrap_value(tmp_path):
    rows = [seed_row(), seed_row(truncated=True)]
    text, path = fail(tmp_path, rows, "--method", "gae")
    assert text == (
        f"advcli: error: {path}: line 2, column 'truncated': the row is truncated but the log has "
        "no bootstrap_value column. Hint: add 'bootstrap_value' (the critic's value after the "
        "last token), or mark the row as not truncated"
    )


def test_missing_values_for_a_value_method(tmp_path):
    row = seed_row()
    del row["values"]
    text, path = fail(tmp_path, [row], "--method", "gae")
    assert text == (
        f"advcli: error: {path}: no 'values' column. Columns found: prompt_id, input_ids, "
        "action_mask, reward. Hint: name its column with --col"
    )


def test_values_length_differs(tmp_path):
    text, path = fail(tmp_path, [seed_row(values=[0.1, 0.2])], "--method", "gae")
    assert text == (
        f"advcli: error: {path}: line 1, column 'values': 2 entries but 'input_ids' has 4 "
        "tokens. Hint: every per-token column needs one entry per token"
    )


def test_reward_before_first_action(tmp_path):
    rows = [seed_row(token_rewards=[0.5, 0, 0, 0])]
    text, path = fail(tmp_path, rows, "--method", "gae")
    assert text == (
        f"advcli: error: {path}: line 1, column 'token_rewards': a reward comes before the row's "
        "first action token, so no action can take it. Hint: check the action mask, or move the "
        "reward"
    )


def test_reward_on_observation_moves_back_or_fails_strict(tmp_path):
    row = {
        "prompt_id": "p",
        "input_ids": [1, 2, 3, 4],
        "action_mask": [1, 0, 0, 1],
        "values": [0.0] * 4,
        "reward": 0.0,
        "token_rewards": [0.0, 0.25, 0.5, 0.0],
    }
    df = annotate(tmp_path, [row], "--method", "mc", "--gamma", "1")
    np.testing.assert_allclose(df["advantages"][0].to_list(), [0.75, 0, 0, 0])
    text, path = fail(tmp_path, [row], "--method", "mc", "--strict")
    assert text == (
        f"advcli: error: {path}: line 1, column 'token_rewards': a reward sits on a non-action "
        "token (--strict forbids moving it to the preceding action). Hint: drop --strict"
    )


def multi_turn(values):
    # actions at 1, 2 | observation 3, 4 | actions 5, 6
    return {
        "prompt_id": "p",
        "input_ids": list(range(7)),
        "action_mask": [0, 1, 1, 0, 0, 1, 1],
        "values": values,
        "reward": 1.0,
    }


def test_observation_values_never_matter(tmp_path):
    a = annotate(
        tmp_path,
        [multi_turn([0, 0.1, 0.2, 5, -3, 0.3, 0.4])],
        "--method",
        "gae",
        "--gamma",
        "0.9",
        "--lam",
        "0.8",
        name="a.parquet",
    )
    b = annotate(
        tmp_path,
        [multi_turn([0, 0.1, 0.2, 0, 0, 0.3, 0.4])],
        "--method",
        "gae",
        "--gamma",
        "0.9",
        "--lam",
        "0.8",
        name="b.parquet",
    )
    assert a["advantages"].to_list() == b["advantages"].to_list()


def test_skip_and_step_differ_unless_gamma_lambda_one(tmp_path):
    rows = [multi_turn([0, 0.1, 0.2, 0, 0, 0.3, 0.4])]

    def adv(*args):
        return np.array(annotate(tmp_path, rows, "--method", "gae", *args)["advantages"][0])

    skip = adv("--gamma", "0.9", "--lam", "0.8", "--observations", "skip")
    step = adv("--gamma", "0.9", "--lam", "0.8", "--observations", "step")
    assert not np.allclose(skip, step)
    # skip: the action before the observation bootstraps from V at token 5, one step away
    c = 0.9 * 0.8
    d = [0.9 * 0.2 - 0.1, 0.9 * 0.3 - 0.2, 0.9 * 0.4 - 0.3, 1.0 - 0.4]
    expect = [
        d[0] + c * d[1] + c**2 * d[2] + c**3 * d[3],
        d[1] + c * d[2] + c**2 * d[3],
        d[2] + c * d[3],
        d[3],
    ]
    np.testing.assert_allclose(skip[[1, 2, 5, 6]], expect, atol=1e-6)
    one_skip = adv("--gamma", "1", "--lam", "1", "--observations", "skip")
    one_step = adv("--gamma", "1", "--lam", "1", "--observations", "step")
    np.testing.assert_allclose(one_skip, one_step, atol=1e-6)


def segments(rows_order=(0, 1)):
    base = [
        {
            "prompt_id": "p",
            "rollout_id": "r",
            "segment_index": 0,
            "input_ids": [1, 2, 3, 4],
            "action_mask": [0, 1, 1, 1],
            "values": [0.0] * 4,
            "reward": 2.0,
        },
        {
            "prompt_id": "p",
            "rollout_id": "r",
            "segment_index": 1,
            "input_ids": [1, 2, 3],
            "action_mask": [0, 1, 1],
            "values": [0.0] * 3,
            "reward": 2.0,
        },
    ]
    return [base[i] for i in rows_order]


@pytest.mark.parametrize("mode", ["compaction", "chain"])
@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_segments_with_zero_values(tmp_path, mode, order):
    """With V = 0 both modes give R * (gamma * lambda) ** (action tokens after the token)."""
    df = annotate(
        tmp_path,
        segments(order),
        "--method",
        "gae",
        "--gamma",
        "0.9",
        "--lam",
        "0.5",
        "--segments",
        mode,
    )
    c = 0.45
    by_segment = {
        0: [0, 2 * c**4, 2 * c**3, 2 * c**2],
        1: [0, 2 * c, 2.0],
    }
    for seg, adv in zip(df["segment_index"], df["advantages"], strict=True):
        np.testing.assert_allclose(adv.to_list(), by_segment[seg], atol=1e-6)


def test_chain_bootstraps_across_the_cut(tmp_path):
    rows = segments()
    rows[0]["values"] = [0, 0.1, 0.2, 0.3]
    rows[1]["values"] = [0, 0.5, 0.6]
    df = annotate(tmp_path, rows, "--method", "td", "--gamma", "1", "--segments", "chain")
    # the last action of segment 0 bootstraps from V at the first action of segment 1
    assert df["advantages"][0].to_list()[3] == pytest.approx(0.5 - 0.3, abs=1e-6)
    comp = annotate(tmp_path, rows, "--method", "td", "--gamma", "1", name="c.parquet")
    # compaction: segment 0 is its own sample, reward at its end, then discounted by td's 0**2
    assert comp["advantages"][0].to_list() == [0.0, 0.0, 0.0, 0.0]


def test_segment_index_repeats_or_skips(tmp_path):
    rows = segments()
    rows[1]["segment_index"] = 0
    text, path = fail(tmp_path, rows, "--method", "gae")
    assert text == (
        f"advcli: error: {path}: line 2, column 'segment_index': rollout 'r' has segment 0 "
        "twice. Hint: segments of a rollout are numbered 0, 1, ... without gaps"
    )
    rows = segments() + [dict(segments()[1], rollout_id="s", segment_index=2)]
    rows.append(dict(segments()[0], rollout_id="s"))
    text, path = fail(tmp_path, rows, "--method", "gae")
    assert text == (
        f"advcli: error: {path}: line 3, column 'segment_index': rollout 's' has segment 2 but "
        "no segment 1. Hint: segments of a rollout are numbered 0, 1, ... without gaps"
    )


def test_group_methods_count_a_segmented_rollout_once(tmp_path):
    rows = segments() + [dict(segments()[0], rollout_id="q", segment_index=0, reward=0.0)]
    df = annotate(tmp_path, rows, "--method", "rloo")
    assert df["group_size"].to_list() == [2, 2, 2]
    assert df["advantage"].to_list() == [2.0, 2.0, -2.0]


def test_adaptive_lambda_is_written_per_row(tmp_path):
    df = annotate(tmp_path, [seed_row()], "--method", "gae", "--lam", "adaptive", "--alpha", "1.5")
    assert df["lam"].to_list() == [pytest.approx(1 - 1 / (1.5 * 3))]


def test_reinforce_pp_whitens_over_action_tokens(tmp_path):
    rows = [seed_row(reward=r, prompt_id=p) for r, p in [(1.0, "a"), (0.0, "a"), (3.0, "b")]]
    df = annotate(tmp_path, rows, "--method", "reinforce-pp", "--gamma", "1")
    adv = np.concatenate([np.array(a)[1:] for a in df["advantages"].to_list()])
    raw = np.repeat([1.0, 0.0, 3.0], 3)
    expected = (raw - raw.mean()) / np.sqrt(raw.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(adv, expected, atol=1e-6)
    base = annotate(
        tmp_path, rows, "--method", "reinforce-pp-baseline", "--gamma", "1", name="b.parquet"
    )
    raw = np.repeat([0.5, -0.5, 0.0], 3)
    expected = (raw - raw.mean()) / np.sqrt(raw.var(ddof=1) + 1e-8)
    adv = np.concatenate([np.array(a)[1:] for a in base["advantages"].to_list()])
    np.testing.assert_allclose(adv, expected, atol=1e-6)


def test_verl_convention_whitens_gae(tmp_path):
    rows = [seed_row(), seed_row(reward=0.0)]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run(
        "annotate",
        path,
        "--method",
        "gae",
        "--convention",
        "verl",
        "--out",
        str(tmp_path / "o.parquet"),
        "--json",
        "-q",
    )
    assert proc.returncode == 0
    adv = np.concatenate(
        [np.array(a)[1:] for a in pl.read_parquet(tmp_path / "o.parquet")["advantages"].to_list()]
    )
    assert abs(adv.mean()) < 1e-6 and adv.std(ddof=1) == pytest.approx(1.0, abs=1e-4)
    assert json.loads(proc.stdout)["method"] == "gae"
