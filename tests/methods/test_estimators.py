"""The frameworks' estimators (opo, grpo-passk, gpg, maxrl, sppo, gdpo, grpo-process, remax,
opd), the KL penalty and the distillation term: worked examples by hand, and every method end to
end against the float64 reference loops of ``tests/core/reference.py``."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import advcli
from advcli.errors import DataError, SchemaError, UsageError
from tests.core import reference as ref

F32 = 2e-6


def log(rewards, groups, masks=None, **columns):
    """A log of one row per rollout: ``masks`` (default: every token an action, 3 tokens)."""
    masks = masks or [[1, 1, 1] for _ in rewards]
    data = {
        "prompt_id": pa.array([str(g) for g in groups]),
        "rollout_id": pa.array([f"r{i}" for i in range(len(rewards))]),
        "input_ids": pa.array([list(range(len(m))) for m in masks], pa.list_(pa.int32())),
        "action_mask": pa.array(masks, pa.list_(pa.int8())),
        "reward": pa.array([float(r) for r in rewards]),
    }
    data.update({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})
    return pa.table(data)


def per_row(table, method, **params):
    out = advcli.annotate_table(table, method=method, **params)
    return out.column("advantage").to_numpy(), out


def tokens(out):
    return [np.asarray(row, dtype=np.float64) for row in out.column("advantages").to_pylist()]


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float), rtol=F32,
                               atol=F32)  # fmt: skip


# ----------------------------------------------------------------------- worked examples


def test_opo_by_hand_weights_the_baseline_by_length():
    # lengths 3 and 1: b = (3*1 + 1*0) / 4 = 0.75
    adv, _ = per_row(log([1, 0], "aa", [[1, 1, 1], [0, 1, 0]]), "opo")
    close(adv, [0.25, -0.75])


def test_opo_singleton_under_verl_keeps_the_reward_and_is_flagged():
    adv, out = per_row(log([1, 0, 0.5], "aab", [[1], [1], [1]]), "opo", convention="verl")
    close(adv, [0.5, -0.5, 0.5])
    assert out.column("singleton").to_pylist() == [False, False, True]
    adv, _ = per_row(log([1, 0, 0.5], "aab", [[1], [1], [1]]), "opo")
    close(adv, [0.5, -0.5, 0.0])


def test_grpo_passk_by_hand():
    # [1, 0, 0, 0]: std (ddof 1) = 0.5, only the best gets (1 - 0) / (0.5 + 1e-6)
    adv, _ = per_row(log([1, 0, 0, 0], "aaaa"), "grpo-passk")
    close(adv, [1 / (0.5 + 1e-6), 0, 0, 0])
    adv, _ = per_row(log([0, 2, 2, 1], "aaaa"), "grpo-passk")  # a tie: the first wins, gap 0
    close(adv, [0, 0, 0, 0])
    adv, _ = per_row(log([0, 3, 1], "aaa"), "grpo-passk", scale="none")
    close(adv, [0, 2, 0])


def test_grpo_passk_refuses_a_group_of_one_unless_told():
    with pytest.raises(DataError, match="prompt 'b' has a single rollout.*grpo-passk"):
        per_row(log([1, 0, 1], "aab"), "grpo-passk")
    adv, _ = per_row(log([1, 0, 1], "aab"), "grpo-passk", singleton="zero")
    close(adv, [1 / (math.sqrt(0.5) + 1e-6), 0, 0])
    with pytest.raises(UsageError, match="grpo-passk divides"):
        per_row(log([1, 0], "aa"), "grpo-passk", scale="batch")


def test_gpg_by_hand():
    # B = 4, one nonzero reward: alpha = 4; A = 4 * (R - 1/4)
    adv, _ = per_row(log([1, 0, 0, 0], "aaaa"), "gpg")
    close(adv, [3, -1, -1, -1])
    adv, _ = per_row(log([1, 0, 0, 0], "aaaa"), "gpg", f_norm=2.0)
    close(adv, [1.5, -0.5, -0.5, -0.5])
    # two batches of two (row order): alpha 2 / 1 and 2 / max(1, 0)
    adv, _ = per_row(log([1, 0, 0, 0], "aabb"), "gpg", batch_size=2)
    close(adv, [1.0, -1.0, 0.0, 0.0])


def test_maxrl_by_hand_and_prime_rl_cases():
    close(per_row(log([1, 0, 0, 0], "aaaa"), "maxrl")[0], [3, -1, -1, -1])  # prime-rl's test
    close(per_row(log([0, 0, 1, 1], "aabb"), "maxrl")[0], [0, 0, 0, 0])
    close(per_row(log([-1, 1], "aa"), "maxrl")[0], [0, 0])  # mean <= 0


def test_sppo_by_hand():
    adv, out = per_row(log([1, 0, 0, 0], "abcd"), "sppo")
    base = math.log((math.e + 3) / 4)
    close(adv, [1 - base, -base, -base, -base])
    close(out.column("batch_baseline").to_numpy(), [base] * 4)
    close(per_row(log([1, 0, 0, 0], "abcd"), "sppo", beta=0.0)[0], [0.75, -0.25, -0.25, -0.25])
    huge = per_row(log([1000, 0], "ab"), "sppo", beta=1.0)[0]  # no overflow
    close(huge, [math.log(2), -1000 + math.log(2)])


def test_rloo_and_dr_grpo_are_settings_of_grpo():
    t = log([1, 0, 0, 0, 1, 1, 0.5], "aaaabbc")
    for method, settings_ in (("rloo", {"baseline": "leave-one-out", "scale": "none"}),
                              ("dr-grpo", {"scale": "none"})):  # fmt: skip
        close(per_row(t, method)[0], per_row(t, "grpo", **settings_)[0])
    close(per_row(t, "rloo")[0], [1, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0])


def test_grpo_baseline_batch_and_none():
    t = log([1, 0, 3, 1], "aabb")
    close(per_row(t, "grpo", baseline="batch", scale="none")[0], [-0.25, -1.25, 1.75, -0.25])
    close(per_row(t, "grpo", baseline="none", scale="none")[0], [1, 0, 3, 1])
    # a group of equal rewards keeps R - baseline where the baseline is not its own
    t = log([1, 1, 3, 0], "aabb")
    close(per_row(t, "grpo", baseline="batch", scale="none")[0], [-0.25, -0.25, 1.75, -1.25])
    close(per_row(t, "grpo", baseline="none", scale="none")[0], [1, 1, 3, 0])
    close(per_row(t, "grpo")[0], [0, 0, 1, -1])  # its own baseline: 0 (seed: std ddof 0)
    # a singleton against the batch: R - batch mean, whatever --singleton says
    t = log([1, 0, 2], "aab")
    close(per_row(t, "grpo", baseline="batch", scale="none", singleton="raw")[0], [0, -1, 1])
    close(per_row(t, "grpo", baseline="batch", scale="none")[0], [0, -1, 1])


def test_remax_by_hand():
    t = log([1.0, 0.0], "aa", [[0, 1, 1], [1, 0, 1]], baseline_reward=[0.25, 0.25],
            token_rewards=[[0, 0.5, 0], [0, 0, 0]])  # fmt: skip
    out = advcli.annotate_table(t, method="remax")
    adv = tokens(out)
    close(adv[0], [0, 1.5 - 0.25, 1 - 0.25])  # G = [1.5, 1] on the actions
    close(adv[1], [0 - 0.25, 0, 0 - 0.25])
    close(out.column("returns").to_pylist()[0], [0, 1.5, 1])


def test_remax_needs_the_greedy_reward():
    with pytest.raises(SchemaError, match="no 'baseline_reward' column"):
        advcli.annotate_table(log([1, 0], "aa"), method="remax")


def test_opd_and_opd_coef():
    t = log([1, 0], "aa", [[0, 1], [1, 1]], logprobs=[[-9, -1.0], [-0.5, -2.0]],
            teacher_logprobs=[[-9, -0.5], [-1.5, -2.0]])  # fmt: skip
    close(np.concatenate(tokens(advcli.annotate_table(t, method="opd"))), [0, 0.5, -1.0, 0])
    grpo = np.concatenate(tokens(advcli.annotate_table(t, method="grpo")))
    with_opd = np.concatenate(tokens(advcli.annotate_table(t, method="grpo", opd_coef=2.0)))
    close(with_opd - grpo, [0, -2 * -0.5, -2 * 1.0, 0])  # A -= c (logprobs - teacher)


def test_opd_on_a_log_without_teacher_logprobs_names_the_column():
    with pytest.raises(SchemaError, match="no 'teacher_logprobs' column"):
        advcli.annotate_table(log([1, 0], "aa", logprobs=[[0.0] * 3] * 2), method="opd")


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_kl_in_the_reward_of_an_outcome_method(estimator):
    lp = [[-1.0, -0.5, -2.0], [-0.2, -0.1, -3.0]]
    rp = [[-1.5, -0.5, -1.0], [-0.2, -0.4, -3.5]]
    masks = [[1, 0, 1], [1, 1, 1]]
    t = log([1, 0], "aa", masks, logprobs=lp, ref_logprobs=rp)
    beta = 0.1
    penalty = [sum(ref.kl(a, b, estimator) for a, b, m in zip(x, y, mm, strict=True) if m)
               for x, y, mm in zip(lp, rp, masks, strict=True)]  # fmt: skip
    shaped = [1 - beta * penalty[0], 0 - beta * penalty[1]]
    adv, _ = per_row(t, "rloo", kl_coef=beta, kl_estimator=estimator)
    close(adv, [shaped[0] - shaped[1], shaped[1] - shaped[0]])


def test_kl_in_the_reward_of_a_temporal_method_sits_on_each_action():
    lp = [[-1.0, -0.5, -2.0]]
    rp = [[-1.5, -0.5, -1.0]]
    t = log([1.0], "a", [[1, 0, 1]], logprobs=lp, ref_logprobs=rp)
    out = advcli.annotate_table(t, method="reinforce-pp", whiten="none", kl_coef=0.5)
    # rewards on the actions: -0.5 * 0.5 at t=0, 1 - 0.5 * (-1.0) at t=2; G = [1.25, 1.5]
    close(tokens(out)[0], [1.25, 0, 1.5])


def test_kl_needs_the_logprobs_and_is_refused_where_no_reward_takes_it():
    with pytest.raises(SchemaError, match="no policy log-probs"):
        advcli.annotate_table(log([1, 0], "aa"), method="grpo", kl_coef=0.1)
    takes = "^`kl_coef` does not apply to opd; it takes: `opd_coef`, `e"
    with pytest.raises(UsageError, match=takes):
        advcli.annotate_table(log([1, 0], "aa"), method="opd", kl_coef=0.1)


def test_kl_statistics_in_the_summary(tmp_path):
    t = log([1, 0], "aa", [[1, 1, 0], [1, 1, 1]], logprobs=[[-1.0, -1, -1]] * 2,
            ref_logprobs=[[-2.0, -2, -2]] * 2)  # fmt: skip
    import pyarrow.parquet as pq

    pq.write_table(t, tmp_path / "log.parquet")
    summary = advcli.annotate(str(tmp_path / "log.parquet"), str(tmp_path / "out.parquet"),
                              method="grpo", kl_coef=0.1)  # fmt: skip
    assert summary.stats["kl"] == {"coef": 0.1, "estimator": "k1", "mean_per_token": 1.0,
                             "mean_per_rollout": 2.5}  # fmt: skip


def test_grpo_process_by_hand():
    # group a: steps [1, 0] and [0]: mean 1/3, std (ddof 0) = sqrt(2)/3
    masks = [[1, 1, 1, 1], [0, 1, 1]]
    t = log([0, 0], "aa", masks, step_rewards=[[1.0, 0.0], [0.0]],
            step_ends=pa.array([[1, 3], [2]], pa.list_(pa.int64())))  # fmt: skip
    out = advcli.annotate_table(t, method="grpo-process")
    s = math.sqrt(2) / 3 + 1e-6
    hi, lo = (1 - 1 / 3) / s, (0 - 1 / 3) / s
    close(tokens(out)[0], [hi + lo, hi + lo, lo, lo])
    close(tokens(out)[1], [0, lo, lo])
    flat = log([0, 0], "aa", step_rewards=[[1.0], [1.0, 1.0]], step_ends=[[2], [0, 2]])
    out = advcli.annotate_table(flat, method="grpo-process")
    assert out.column("zero_variance").to_pylist() == [True, True]
    assert np.concatenate(tokens(out)).tolist() == [0.0] * 6


def test_grpo_process_step_end_beyond_the_row_names_it():
    t = log([0, 0], "aa", step_rewards=[[1.0], [0.0]], step_ends=[[5], [0]])
    with pytest.raises(DataError, match=r"row 0, column 'step_ends': step end 5 is beyond"):
        advcli.annotate_table(t, method="grpo-process")


def test_gdpo_verl_by_hand():
    # acc [1, 0 | 1, 1], fmt [1, 1 | 0, 1]; verl GRPO per column: acc -> [0.707, -0.707, 0, 0]
    t = log([0, 0, 0, 0], "aabb", acc=[1.0, 0, 1, 1], fmt=[1.0, 1, 0, 1])
    adv, out = per_row(t, "gdpo", reward_columns="acc,fmt", reward_weights="acc=1,fmt=0.5")
    expected, score = ref.gdpo_verl([[1, 0, 1, 1], [1, 1, 0, 1]], [1, 0.5], list("aabb"),
                                    [3, 3, 3, 3], ddof=0, singleton="zero")  # fmt: skip
    close(out.column("gdpo_score").to_numpy(), score)
    close(adv, expected)


def test_gdpo_trl_skips_missing_rewards():
    acc = [1.0, 0.0, None, 1.0]
    fmt = [None, 1.0, None, 0.0]
    t = log([0, 0, 0, 0], "aabb", acc=pa.array(acc, pa.float64()), fmt=pa.array(fmt, pa.float64()))
    adv, _ = per_row(t, "gdpo", convention="trl", reward_columns="acc,fmt")
    nan = float("nan")
    expected, _ = ref.gdpo_trl([[1, 0, nan, 1], [nan, 1, nan, 0]], [1, 1], list("aabb"))
    close(adv, expected)
    with pytest.raises(DataError, match="row 2, column 'acc': no value"):
        per_row(t, "gdpo", reward_columns="acc,fmt")


def test_gdpo_usage_errors():
    t = log([0, 0], "aa", acc=[1.0, 0.0])
    with pytest.raises(UsageError, match="^gdpo needs `reward_columns`: the log's reward columns"):
        per_row(t, "gdpo")
    with pytest.raises(UsageError, match="no column 'fmt'"):
        per_row(t, "gdpo", reward_columns="acc,fmt")
    with pytest.raises(UsageError, match="^`reward_weights` names 'x'"):
        per_row(t, "gdpo", reward_columns="acc", reward_weights="x=1")


@pytest.mark.parametrize("name", ["areal", "slime", "roll"])
def test_new_conventions_give_verl_like_grpo(name):
    eps = {"areal": 1e-5, "slime": 1e-6, "roll": 1e-6}[name]
    adv, _ = per_row(log([1, 0, 0, 0, 1], "aaaab"), "grpo", convention=name)
    close(adv, [0.75 / (0.5 + eps), -0.25 / (0.5 + eps), -0.25 / (0.5 + eps),
                -0.25 / (0.5 + eps), 0.0])  # fmt: skip


def test_roll_zeroes_groups_whose_std_is_tiny():
    t = log([1.0, 1.0 + 1e-7, 0, 1], "aabb")
    adv, out = per_row(t, "grpo", convention="roll")
    close(adv[:2], [0, 0])
    assert out.column("zero_variance").to_pylist() == [True, True, False, False]
    assert per_row(t, "grpo", convention="slime")[0][1] > 0.04  # 0.5e-7 / (7.1e-8 + 1e-6)


@pytest.mark.parametrize("name", ["opo", "remax", "grpo-process", "opd"])
def test_methods_that_need_tokens_refuse_a_token_free_log(name):
    t = log([1, 0], "aa").drop_columns(["input_ids", "action_mask"])
    with pytest.raises(SchemaError, match="needs token ids"):
        advcli.annotate_table(t, method=name)


# ----------------------------------------------------------------------- against the references

rewards = st.sampled_from([0.0, 0.0, 1.0, 0.5, -1.0, 2.0, 0.25])


@st.composite
def grouped(draw):
    n = draw(st.integers(1, 14))
    groups = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    rs = draw(st.lists(rewards, min_size=n, max_size=n))
    masks = draw(st.lists(st.lists(st.sampled_from([0, 1, 1]), min_size=1, max_size=5),
                          min_size=n, max_size=n))  # fmt: skip
    return rs, groups, masks


def _check_broadcast(out, adv, masks):
    for a, row, m in zip(adv, tokens(out), masks, strict=True):
        close(row, [a if x else 0.0 for x in m])


@settings(max_examples=60, deadline=None)
@given(grouped(), st.sampled_from(["zero", "raw"]))
def test_group_methods_match_the_references(data, singleton):
    rs, groups, masks = data
    t = log(rs, groups, masks)
    lengths = [sum(m) for m in masks]
    for method, expected in (
        ("opo", ref.opo(rs, groups, lengths, singleton=singleton)),
        ("grpo-passk", ref.grpo_passk(rs, groups, singleton=singleton)),
        ("gpg", ref.gpg(rs, groups, [0] * len(rs), singleton=singleton)),
        ("maxrl", ref.maxrl(rs, groups)),
        ("rloo", ref.rloo(rs, groups, singleton=singleton)),
        ("dr-grpo", ref.grpo(rs, groups, scale="none", singleton=singleton)),
    ):
        adv, out = per_row(t, method, singleton=singleton)
        close(adv, expected)
        _check_broadcast(out, adv, masks)


@settings(max_examples=40, deadline=None)
@given(grouped(), st.sampled_from([0.0, 0.5, 1.0, 3.0]), st.sampled_from([None, 2, 3]))
def test_sppo_matches_the_reference(data, beta, batch_size):
    rs, groups, masks = data
    batches = [0] * len(rs) if batch_size is None else [i // batch_size for i in range(len(rs))]
    adv, _ = per_row(log(rs, groups, masks), "sppo", beta=beta, batch_size=batch_size,
                     partial="keep")  # fmt: skip
    close(adv, ref.sppo(rs, batches, beta=beta))


@settings(max_examples=40, deadline=None)
@given(grouped(), st.lists(rewards, min_size=14, max_size=14))
def test_gdpo_matches_the_references(data, other):
    rs, groups, masks = data
    fmt = other[: len(rs)]
    lengths = [sum(m) for m in masks]
    t = log(rs, groups, masks, acc=rs, fmt=fmt)
    if sum(lengths) >= 2:
        adv, _ = per_row(t, "gdpo", convention="verl", reward_columns="acc,fmt",
                         reward_weights="acc=1,fmt=0.5")  # fmt: skip
        close(adv, ref.gdpo_verl([rs, fmt], [1, 0.5], groups, lengths)[0])
    adv, _ = per_row(t, "gdpo", convention="trl", reward_columns="acc,fmt")
    close(adv, ref.gdpo_trl([rs, fmt], [1, 1], groups)[0])


@settings(max_examples=40, deadline=None)
@given(grouped(), st.data())
def test_grpo_process_matches_the_reference(data, draw):
    _, groups, masks = data
    steps, ends = [], []
    for m in masks:
        k = draw.draw(st.integers(0, len(m)))
        ends.append(sorted(draw.draw(st.sets(st.integers(0, len(m) - 1), min_size=k, max_size=k))))
        steps.append(draw.draw(st.lists(rewards, min_size=len(ends[-1]), max_size=len(ends[-1]))))
    t = log([0.0] * len(masks), groups, masks, step_rewards=pa.array(steps, pa.list_(pa.float64())),
            step_ends=pa.array(ends, pa.list_(pa.int64())))  # fmt: skip
    out = advcli.annotate_table(t, method="grpo-process")
    expected = ref.process(steps, ends, groups, [len(m) for m in masks], masks)
    for row, want in zip(tokens(out), expected, strict=True):
        close(row, want)


@settings(max_examples=40, deadline=None)
@given(grouped(), st.sampled_from(["k1", "k2", "k3", "abs"]), st.data())
def test_kl_matches_the_reference(data, estimator, draw):
    rs, groups, masks = data
    masks = [m[:-1] + [1] for m in masks]  # a temporal method needs an action for the reward
    lp = [draw.draw(st.lists(st.floats(-5, 0), min_size=len(m), max_size=len(m))) for m in masks]
    rp = [draw.draw(st.lists(st.floats(-5, 0), min_size=len(m), max_size=len(m))) for m in masks]
    t = log(rs, groups, masks, logprobs=lp, ref_logprobs=rp)
    kl = [[ref.kl(a, b, estimator) if x else 0.0 for a, b, x in zip(la, lb, m, strict=True)]
          for la, lb, m in zip(lp, rp, masks, strict=True)]  # fmt: skip
    shaped = [r - 0.2 * sum(k) for r, k in zip(rs, kl, strict=True)]
    adv, _ = per_row(t, "grpo", kl_coef=0.2, kl_estimator=estimator)
    close(adv, ref.grpo(shaped, groups))
    out = advcli.annotate_table(t, method="reinforce-pp", whiten="none", kl_coef=0.2,
                                kl_estimator=estimator)  # fmt: skip
    for row, r, k, m in zip(tokens(out), rs, kl, masks, strict=True):
        acts = [i for i, x in enumerate(m) if x]
        per_step = [-0.2 * k[i] for i in acts]
        if acts:
            per_step[-1] += r
        want = [0.0] * len(m)
        total = 0.0
        for i, step in zip(reversed(acts), reversed(per_step), strict=True):
            total += step
            want[i] = total
        close(row, want)


@settings(max_examples=40, deadline=None)
@given(grouped(), st.data())
def test_remax_matches_the_reference(data, draw):
    rs, groups, masks = data
    masks = [m[:-1] + [1] for m in masks]
    greedy = draw.draw(st.lists(rewards, min_size=len(rs), max_size=len(rs)))
    out = advcli.annotate_table(log(rs, groups, masks, baseline_reward=greedy), method="remax")
    for row, r, b, m in zip(tokens(out), rs, greedy, masks, strict=True):
        placed, _, _ = ref.place_rewards(m, [0, len(m)], outcome=[r])
        returns = ref.reverse_scan_rows(placed, [1.0] * len(m), [0, len(m)])
        close(row, [g - b if x else 0.0 for g, x in zip(returns, m, strict=True)])


def test_the_command_line_runs_gdpo_with_kl_refused(tmp_path):
    import pyarrow.parquet as pq

    from tests.conftest import run

    path = tmp_path / "log.parquet"
    pq.write_table(log([1, 0, 1, 1], "aabb", acc=[1.0, 0, 1, 1], fmt=[0.0, 1, 1, 0]), path)
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(path), "--method", "gdpo", "--reward-columns", "acc,fmt",
               "--reward-weights", "acc=1,fmt=0.5", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected, _ = ref.gdpo_verl([[1, 0, 1, 1], [0, 1, 1, 0]], [1, 0.5], list("aabb"), [3] * 4,
                                ddof=0, singleton="zero")  # fmt: skip
    close(pq.read_table(out).column("advantage").to_numpy(), expected)
    proc = run("annotate", str(path), "--method", "gdpo", "--reward-columns", "acc",
               "--kl-coef", "0.1", "--out", str(tmp_path / "kl.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith("advcli: error: --kl-coef does not apply to gdpo")


def test_misaligned_or_missing_logprobs_name_the_column():
    short = log([1, 0], "aa", logprobs=[[-1.0, -1.0], [-1.0] * 3], ref_logprobs=[[-1.0] * 3] * 2)
    with pytest.raises(DataError, match=r"row 0, column 'logprobs': 2 entries but '\w+' has 3"):
        advcli.annotate_table(short, method="grpo", kl_coef=0.1)
    nan = log([1, 0], "aa", [[0, 1, 1]] * 2, logprobs=[[float("nan"), -1.0, -1.0]] * 2,
              ref_logprobs=[[-1.0, float("nan"), -1.0]] * 2)  # fmt: skip
    with pytest.raises(DataError, match=r"row 0, column 'ref_logprobs': value nan"):
        advcli.annotate_table(nan, method="grpo", kl_coef=0.1)  # NaN off actions is allowed


@pytest.mark.parametrize(
    ("rewards", "ends", "problem"),
    [
        ([[1.0, 0.0]], [[0]], "row 0, column 'step_ends': 2 step rewards but 1 step ends. "
         "Hint: give one step end per step reward"),
        ([[1.0, 0.0]], [[2, 1]], "row 0, column 'step_ends': step ends 2 then 1. "
         "Hint: step ends increase along the row"),
        ([[1.0]], [[-1]], "row 0, column 'step_ends': step end -1 is not a token index. "
         "Hint: a step end is the index of the step's last token, from 0"),
    ],
)  # fmt: skip
def test_bad_process_rewards_are_one_line_naming_the_row(rewards, ends, problem):
    t = log([0], "a", step_rewards=pa.array(rewards, pa.list_(pa.float64())),
            step_ends=pa.array(ends, pa.list_(pa.int64())))  # fmt: skip
    with pytest.raises(DataError) as info:
        advcli.annotate_table(t, method="grpo-process")
    assert str(info.value) == f"<table>: {problem}"


def test_a_non_finite_greedy_reward_names_its_row():
    t = log([1.0, 0.0], "aa", baseline_reward=pa.array([0.5, None], pa.float64()))
    with pytest.raises(DataError) as info:
        advcli.annotate_table(t, method="remax")
    assert str(info.value) == (
        "<table>: row 1, column 'baseline_reward': baseline reward nan is not a finite number. "
        "Hint: fix or drop the row"
    )


def test_a_reward_column_of_text_is_refused():
    t = log([1.0, 0.0], "aa", acc=["yes", "no"])
    with pytest.raises(SchemaError, match="column 'acc' is string, not numbers"):
        per_row(t, "gdpo", reward_columns="acc")


def verl_091_reinforce_pp(rewards, masks, gamma):
    """verl 0.9.1's ``compute_reinforce_plus_plus_outcome_advantage``, transcribed to a float64
    loop: the outcome reward on the last action token; a mask-0 token leaves the running
    return as it is (no discount, no reset); then ``masked_whiten`` (unbiased variance, 1e-8)."""
    returns = []
    for reward, mask in zip(rewards, masks, strict=True):
        mask = np.asarray(mask, dtype=np.float64)
        r = np.zeros(len(mask))
        r[np.flatnonzero(mask)[-1]] = reward
        out, running = np.zeros(len(mask)), 0.0
        for t in reversed(range(len(mask))):
            new = r[t] + gamma * running
            out[t] = new * mask[t]
            running = new * mask[t] + running * (1 - mask[t])
        returns.append(out)
    flat = np.concatenate(returns)
    on = np.concatenate(masks).astype(bool)
    mean, var = flat[on].mean(), flat[on].var(ddof=1)
    return [np.where(np.asarray(m, bool), (x - mean) / np.sqrt(var + 1e-8), 0.0)
            for x, m in zip(returns, masks, strict=True)]  # fmt: skip


def test_reinforce_pp_verl_carries_the_return_through_observations_as_verl_091():
    """Observation tokens inside the response (mask 0): verl 0.9.1 neither discounts across them
    nor resets there (older verl reset the return, giving the tokens before them 0)."""
    masks = [[0, 1, 0, 0, 1, 1], [0, 0, 1, 1, 0, 1], [1, 0, 1, 0, 1, 0, 0, 1]]
    rewards = [1.0, 0.0, 2.0]
    out = advcli.annotate_table(log(rewards, "abc", masks), method="reinforce-pp",
                                convention="verl", gamma=0.5)  # fmt: skip
    for mine, theirs in zip(tokens(out), verl_091_reinforce_pp(rewards, masks, 0.5), strict=True):
        close(mine, theirs)
    # by hand, before whitening: mask [1, 0, 0, 1], gamma 0.5, R = 1 -> returns [0.5, 0, 0, 1]
    first = verl_091_reinforce_pp([1.0], [[1, 0, 0, 1]], 0.5)
    close(first[0][[0, 3]], (np.array([0.5, 1.0]) - 0.75) / np.sqrt(0.125 + 1e-8))


@settings(max_examples=40, deadline=None)
@given(grouped(), st.data(), st.sampled_from([0.5, 1.0, 2.0]))
def test_opd_and_the_distillation_term_match_a_loop(data, extra, coef):
    """opd: teacher − student on each action token, 0 elsewhere; --opd-coef c on grpo:
    A_t − c·(student − teacher) on each action token (float64 loops)."""
    rs, groups, masks = data
    logp = st.floats(-20, 0, allow_nan=False, width=32)
    student = [extra.draw(st.lists(logp, min_size=len(m), max_size=len(m))) for m in masks]
    teacher = [extra.draw(st.lists(logp, min_size=len(m), max_size=len(m))) for m in masks]
    as_list = pa.list_(pa.float32())
    t = log(rs, groups, masks, logprobs=pa.array(student, as_list),
            teacher_logprobs=pa.array(teacher, as_list))  # fmt: skip
    opd = tokens(advcli.annotate_table(t, method="opd"))
    grpo = ref.grpo(rs, groups)
    mixed = tokens(advcli.annotate_table(t, method="grpo", opd_coef=coef))
    for i, m in enumerate(masks):
        s, te = (np.asarray(x[i], np.float32).astype(np.float64) for x in (student, teacher))
        on = np.asarray(m, bool)
        close(opd[i], np.where(on, te - s, 0.0))
        close(mixed[i], np.where(on, grpo[i] - coef * (s - te), 0.0))
