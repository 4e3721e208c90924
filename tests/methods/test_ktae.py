"""``--method ktae`` against KTAE's own ``compute_ktae_outcome_advantage_and_keytokens`` and
``ComputeKeyTokens`` (``tests/fixtures/refs/ktae``), a hand-computed group, a float64 loop, the
command line and any batching."""

from __future__ import annotations

import doctest
import json
import math
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.core import ktae as K
from advcli.errors import UsageError
from advcli.methods import resolve
from tests.conftest import run, write_jsonl
from tests.methods.refs import cases, ids

SOURCE = "ktae"
FUNCTION = "compute_ktae_outcome_advantage_and_keytokens"
CLASS = "ComputeKeyTokens.get_key_tokens"
CTOR = {"alpha": "ktae_alpha", "beta_ig": "ktae_beta_ig", "gamma_tf": "ktae_tf", "top": "ktae_top"}


def test_doctests() -> None:
    assert doctest.testmod(K).failed == 0


@pytest.mark.parametrize("case", cases(SOURCE, FUNCTION), ids=ids(SOURCE, FUNCTION))
def test_reproduces_ktaes_function(case) -> None:
    table = advcli.annotate_table(case["table"], method="ktae", eps=case["params"]["epsilon"])
    for got, row, want in zip(table["advantages"].to_pylist(), case["rows"], case["expected"],
                              strict=True):  # fmt: skip
        got = np.asarray(got)
        np.testing.assert_allclose(got, want["advantages"], rtol=0, atol=1e-6,
                                   err_msg=row["rollout_id"])  # fmt: skip
        assert (got[np.asarray(row["action_mask"]) == 0] == 0).all()


def counts_by_loop(rows: list[dict]) -> dict[str, dict]:
    """Per group (prompt_id): N_c, N_w, T_c, T_w and per token id a, b, f_c, f_w, by loops
    over the action tokens (a segment of a rollout counts with its rollout)."""
    rollouts: dict[tuple[str, str], dict] = {}
    for row in rows:
        if row.get("unscored"):
            continue
        r = rollouts.setdefault((row["prompt_id"], row["rollout_id"]), {"ids": []})
        r["reward"] = row["reward"]  # the last segment's (rows in segment order)
        r["ids"] += [t for t, m in zip(row["input_ids"], row["action_mask"], strict=True) if m]
    groups: dict[str, dict] = {}
    for (prompt, _), r in rollouts.items():
        g = groups.setdefault(prompt, {"n": [0, 0], "t": [0, 0], "tokens": {}})
        side = 0 if r["reward"] > 0 else 1
        g["n"][side] += 1
        g["t"][side] += len(r["ids"])
        for v, f in Counter(r["ids"]).items():
            entry = g["tokens"].setdefault(v, [0, 0, 0, 0])  # a, b, f_c, f_w
            entry[side] += 1
            entry[2 + side] += f
    return groups


def weights_by_loop(group: dict, alpha=1.0, beta=1.0, tf=True, top=1.0) -> dict[int, float]:
    """KTAE's weight of each token of a group, in float64 Python, but for the float32 Fisher p
    (:func:`advcli.core.ktae.fisher_p32`, a quirk tested on its own below)."""
    (n_c, n_w), (t_c, t_w), tokens = group["n"], group["t"], group["tokens"]
    if not n_c or not n_w:
        return {}
    n = n_c + n_w
    width = 1 + max(min(a + b, n_c) for a, b, _, _ in tokens.values())

    def h(p: float) -> float:
        return -p * math.log2(p) if p > 0 else 0.0

    def tf_of(f: int, total: int) -> float:
        rate = f / total
        return rate * 3.0 / (rate + 2.0 * (0.5 + 0.5 * total / ((t_c + t_w) / 2)))

    out = {}
    for v, (a, b, f_c, f_w) in tokens.items():
        c, d = n_c - a, n_w - b
        ig = h(n_c / n) + h(n_w / n)
        for x1, x2 in ((a, b), (c, d)):
            if x1 + x2:
                ig -= (x1 + x2) / n * (h(x1 / (x1 + x2)) + h(x2 / (x1 + x2)))
        p32 = K.fisher_p32(np.array([a]), np.array([b]), np.array([c]), np.array([d]), width)[0]
        fisher = 0.0 if p32 == np.float32(1.0) else math.exp(-2 * float(p32))
        x = math.asin(math.sqrt(a / n_c)) - math.asin(math.sqrt(b / n_w))
        if tf:
            tc, tw = tf_of(f_c, t_c), tf_of(f_w, t_w)
            x += tc / (tw + 1e-5) - tw / (tc + 1e-5)
        z = (alpha * fisher + beta * ig) * x / (alpha + beta)
        sigmoid = 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))
        out[v] = 0.0 if v == K.QWEN_EOT else (sigmoid - 0.5) * 2 * top
    return out


def keyed(rows: list[dict]) -> list[dict]:
    return [{"input_ids": r["token_ids"], **r} for r in rows]


@pytest.mark.parametrize("case", cases(SOURCE, CLASS), ids=ids(SOURCE, CLASS))
def test_reproduces_compute_key_tokens(case) -> None:
    """The class's table, indexed by every token of every row (mask 0 too), from
    :func:`advcli.core.ktae.key_weights` on the loop's counts; and the method with the same
    ``--ktae-*`` values: advantages − advantage on the action tokens."""
    params = {CTOR[k]: v for k, v in case["params"].items() if k in CTOR}
    params["ktae_tf"] = bool(params["ktae_tf"])
    (group,) = counts_by_loop(keyed(case["rows"])).values()
    tokens = sorted(group["tokens"])
    a, b, f_c, f_w = np.array([group["tokens"][v] for v in tokens]).T
    n_c, n_w = group["n"]
    w = K.key_weights(a, b, n_correct=n_c, n_wrong=n_w, f_correct=f_c, f_wrong=f_w,
                      t_correct=group["t"][0], t_wrong=group["t"][1],
                      width=1 + np.minimum(a + b, n_c).max(), alpha=params["ktae_alpha"],
                      beta_ig=params["ktae_beta_ig"], tf=params["ktae_tf"],
                      top=params["ktae_top"])  # fmt: skip
    table = dict(zip(tokens, w, strict=True))
    loop = weights_by_loop(group, params["ktae_alpha"], params["ktae_beta_ig"],
                           params["ktae_tf"], params["ktae_top"])  # fmt: skip
    annotated = advcli.annotate_table(case["table"], method="ktae", **params)
    for row, want, got in zip(case["rows"], case["expected"], annotated.to_pylist(),
                              strict=True):  # fmt: skip
        expected = np.asarray(want["advantages"])
        mine = [table.get(t, 0.0) for t in row["token_ids"]]
        np.testing.assert_allclose(mine, expected, rtol=0, atol=1e-6, err_msg=row["rollout_id"])
        np.testing.assert_allclose([loop.get(t, 0.0) for t in row["token_ids"]], expected,
                                   rtol=0, atol=1e-6)  # fmt: skip
        on = np.asarray(row["action_mask"]) == 1
        shaped = np.asarray(got["advantages"]) - np.float32(got["advantage"])
        np.testing.assert_allclose(shaped[on], expected[on], rtol=0, atol=1e-6)


def hand_log() -> list[dict]:
    return [
        {"prompt_id": "a", "rollout_id": "r0", "input_ids": [1, 5, 7], "action_mask": [0, 1, 1],
         "reward": 1.0},
        {"prompt_id": "a", "rollout_id": "r1", "input_ids": [1, 7, 3], "action_mask": [0, 1, 1],
         "reward": 1.0},
        {"prompt_id": "a", "rollout_id": "r2", "input_ids": [1, 5, 9], "action_mask": [0, 1, 1],
         "reward": 0.0},
        {"prompt_id": "a", "rollout_id": "r3", "input_ids": [1, 9, 3], "action_mask": [0, 1, 1],
         "reward": 0.0},
    ]  # fmt: skip


def test_by_hand() -> None:
    """Rewards [1, 1, 0, 0]: mean 0.5, std (ddof 1) 0.57735, sequence part ±0.5/0.577351 =
    ±0.866024. Token 7 only in the correct rollouts, (a, b, c, d) = (2, 0, 0, 2): p = 1/3,
    F = exp(−2/3), IG = 1, x = π/2 + 0.6/1e-5, w = 1.0; token 9 the reverse, w = −1.0;
    tokens 5 and 3 (1, 1, 1, 1): x = 0, w = 0. The prompt token 1 (mask 0): 0."""
    table = advcli.annotate_table(pa.Table.from_pylist(hand_log()), method="ktae")
    seq = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert seq == pytest.approx(0.866024, abs=1e-6)
    expected = [[0, seq, 1 + seq], [0, 1 + seq, seq], [0, -seq, -1 - seq], [0, -1 - seq, -seq]]
    got = table["advantages"].to_pylist()
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(expected), rtol=0, atol=1e-6)
    assert table["correct"].to_pylist() == [True, True, False, False]
    np.testing.assert_allclose(table["advantage"].to_numpy(), [seq, seq, -seq, -seq], atol=1e-6)
    assert np.concatenate(got)[[0, 3, 6, 9]].tolist() == [0.0] * 4


def random_log(seed: int, n_groups: int = 6, segmented: bool = False) -> list[dict]:
    """Groups of 1-12 rollouts, ids from a small vocabulary (and one large id), masks with
    zeros, rewards in {−0.5, 0, 0.5, 1}, an unscored rollout; with ``segmented``, rollouts in
    1-3 rows (the same prompt and rollout id, segment_index 0, 1, ...)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        for r in range(int(rng.integers(1, 13))):
            reward = float(rng.choice([-0.5, 0.0, 0.5, 1.0]))
            unscored = g == 1 and r == 0
            for s in range(int(rng.integers(1, 4)) if segmented else 1):
                n = int(rng.integers(1, 25))
                ids_ = rng.integers(0, int(rng.integers(4, 40)), n)
                ids_[rng.uniform(size=n) < 0.05] = 5_000_000_000  # beyond 2**32
                mask = (rng.uniform(size=n) < 0.8).astype(int).tolist()
                row = {"prompt_id": f"p{g}", "rollout_id": f"p{g}r{r}", "input_ids": ids_.tolist(),
                       "action_mask": mask, "reward": reward, "unscored": unscored}  # fmt: skip
                if segmented:
                    row["segment_index"] = s
                rows.append(row)
    return rows


def advantages_by_loop(rows: list[dict], eps: float = 1e-6) -> list[list[float]]:
    """KTAE per token in float64 Python loops: GRPO (ddof 1; a group of one: mean 0, std 1) plus
    :func:`weights_by_loop`; 0 off the action tokens and for unscored rollouts."""
    groups = counts_by_loop(rows)
    rewards: dict[str, dict[str, float]] = {}
    for row in rows:
        if not row.get("unscored"):
            rewards.setdefault(row["prompt_id"], {})[row["rollout_id"]] = row["reward"]
    weights = {prompt: weights_by_loop(g) for prompt, g in groups.items()}
    out = []
    for row in rows:
        if row.get("unscored"):
            out.append([0.0] * len(row["input_ids"]))
            continue
        group = list(rewards[row["prompt_id"]].values())
        mean, std = 0.0, 1.0
        if len(group) > 1:
            mean = sum(group) / len(group)
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
        seq = (
            0.0 if len(group) > 1 and len(set(group)) == 1 else (row["reward"] - mean) / (std + eps)
        )
        w = weights[row["prompt_id"]]
        pairs = zip(row["input_ids"], row["action_mask"], strict=True)
        out.append([seq + w.get(t, 0.0) if m else 0.0 for t, m in pairs])
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_against_loop(seed) -> None:
    rows = random_log(seed, segmented=seed % 2 == 1)
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="ktae")
    expected = advantages_by_loop(rows)
    for got, want, row in zip(table["advantages"].to_pylist(), expected, rows, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=row["rollout_id"])


def test_pieces_against_loop() -> None:
    """Counts (:func:`advcli.core.ktae.reduce_pairs`), IG and the BM25 tf against loops."""
    rng = np.random.default_rng(5)
    hi = rng.integers(0, 4, 500)
    lo = rng.integers(0, 6, 500) * (1 << 40)  # beyond 2**32
    h, low, n = K.reduce_pairs(hi, lo)
    assert dict(zip(zip(h.tolist(), low.tolist(), strict=True), n[:, 0].tolist(), strict=True)) \
        == Counter(zip(hi.tolist(), lo.tolist(), strict=True))  # fmt: skip
    assert (np.lexsort((low, h)) == np.arange(len(h))).all()
    tables = rng.integers(0, 6, (200, 4))
    ig = K.information_gain(*tables.T)
    for (a, b, c, d), got in zip(tables.tolist(), ig, strict=True):
        n = a + b + c + d

        def h2(*xs: int) -> float:
            return -sum(x / sum(xs) * math.log2(x / sum(xs)) for x in xs if x) if sum(xs) else 0

        want = h2(a + c, b + d) - (a + b) / n * h2(a, b) - (c + d) / n * h2(c, d) if n else 0.0
        assert got == pytest.approx(want, abs=1e-12)
    f, total = rng.integers(0, 9, 50), rng.integers(1, 30, 50)
    want = [(x / t) * 3 / (x / t + 2 * (0.5 + 0.5 * t / 20)) for x, t in zip(f, total, strict=True)]
    np.testing.assert_allclose(K.bm25_tf(f, total, 20.0), want, rtol=1e-12)


def test_fisher_p32_near_exact() -> None:
    """The float32 p is the exact p up to float32 rounding (1e-5), except that a k whose P(k)
    ties P(a) exactly (a mirrored table) counts or not as float32's rounding of the two
    log-probabilities decides (KTAE's quirk); and p is 1 only where the exact p is."""
    quirks = 0
    for n_c, n_w in ((3, 5), (8, 8), (12, 4), (13, 13)):
        t = np.array([(a, b, n_c - a, n_w - b) for a in range(n_c + 1) for b in range(n_w + 1)
                      if a + b])  # fmt: skip
        p32 = K.fisher_p32(t[:, 0], t[:, 1], t[:, 2], t[:, 3], n_c + 1)
        for (a, b, c, d), got in zip(t.tolist(), p32, strict=True):
            n, r1, c1 = a + b + c + d, a + b, a + c
            probs = {k: Fraction(math.comb(c1, k) * math.comb(n - c1, r1 - k), math.comb(n, r1))
                     for k in range(max(0, r1 + c1 - n), min(r1, c1) + 1)}  # fmt: skip
            strict = sum(q for k, q in probs.items() if q < probs[a] or k == a)
            ties = sum(q == probs[a] for k, q in probs.items() if k != a)
            off = [abs(float(got) - float(strict + m * probs[a])) for m in range(ties + 1)]
            assert min(off) < 1e-5
            quirks += off[-1] >= 1e-5
            assert got != 1 or strict + ties * probs[a] == 1
    assert quirks  # (13, 13) has tables whose tie float32 breaks


def test_singletons_no_eot_and_the_eot_weight() -> None:
    """A group of one gets R/(1 + eps) and no key weight, even holding the log's largest id
    (KTAE: IndexError); a log without 151643 runs (KTAE: IndexError); 151643 gets weight 0."""
    eot = K.QWEN_EOT
    rows: list[dict[str, Any]] = [
        {"prompt_id": "s", "input_ids": [3, 4, 999_999], "reward": 0.8},
        {"prompt_id": "g", "input_ids": [3, 7, eot], "reward": 1.0},
        {"prompt_id": "g", "input_ids": [3, 8, 8], "reward": 0.0},
    ]
    for row in rows:
        row["action_mask"] = [1] * len(row["input_ids"])
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="ktae", eps=0.1)
    got = table["advantages"].to_pylist()
    np.testing.assert_allclose(got[0], [0.8 / 1.1] * 3, rtol=0, atol=1e-7)
    seq = 0.5 / (math.sqrt(0.5) + 0.1)
    assert got[1][2] == pytest.approx(seq, abs=1e-6)  # 151643: only in the correct rollout
    assert got[1][1] == pytest.approx(seq + 1.0, abs=1e-6)  # 7 likewise
    assert got[2][1] == pytest.approx(-seq - 1.0, abs=1e-6)
    assert table["group_mean"].to_pylist()[0] == 0.0 and table["group_std"].to_pylist()[0] == 1.0
    no_eot = [dict(r, input_ids=[t % 100 for t in r["input_ids"]]) for r in rows[1:]]
    table = advcli.annotate_table(pa.Table.from_pylist(no_eot), method="ktae", eps=0.1)
    assert table["advantages"].to_pylist()[0][2] == pytest.approx(seq + 1.0, abs=1e-6)


def test_all_correct_or_all_wrong_is_grpo() -> None:
    rows = [{"prompt_id": "a", "input_ids": [i, 9], "action_mask": [1, 1], "reward": r}
            for i, r in ((1, 1.0), (2, 0.5), (3, 0.25))]  # fmt: skip
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="ktae")
    grpo = advcli.annotate_table(pa.Table.from_pylist(rows), method="grpo", convention="verl")
    got, want = (np.concatenate(t["advantages"].to_pylist()) for t in (table, grpo))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_segments_count_once() -> None:
    """A rollout in two rows equals the same rollout in one: it contains an id once, whichever
    segment holds it, with its last segment's reward."""
    rows = hand_log()
    split = [
        dict(rows[0], input_ids=[1, 5], action_mask=[0, 1], segment_index=0, reward=0.0),
        dict(rows[0], input_ids=[7, 7, 5], action_mask=[1, 1, 1], segment_index=1),
    ]
    whole = [dict(rows[0], input_ids=[1, 5, 7, 7, 5], action_mask=[0, 1, 1, 1, 1],
                  segment_index=0)]  # fmt: skip
    rest = [dict(r, segment_index=0) for r in rows[1:]]
    a = advcli.annotate_table(pa.Table.from_pylist(split + rest), method="ktae")
    b = advcli.annotate_table(pa.Table.from_pylist(whole + rest), method="ktae")
    got = a["advantages"].to_pylist()
    assert got[0] + got[1] == b["advantages"].to_pylist()[0]
    assert got[2:] == b["advantages"].to_pylist()[1:]


def test_batches_change_nothing(tmp_path) -> None:
    """Batches of 1, 3 and 7 rows (a rollout's segments shuffled across them, and across two
    files) give the numbers of one batch."""
    rows = random_log(7, n_groups=9, segmented=True)
    rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    paths = []
    for i, part in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2 :])):
        paths.append(str(tmp_path / f"part{i}.parquet"))
        pq.write_table(pa.Table.from_pylist(part), paths[-1])
    tables = []
    for batch_rows in (1, 3, 7, 100_000):
        out = tmp_path / f"out{batch_rows}.parquet"
        advcli.annotate(paths, str(out), method="ktae", batch_rows=batch_rows)
        tables.append(pq.read_table(out))
    for other in tables[1:]:
        assert other.equals(tables[0])
    assert np.abs(np.concatenate(tables[0]["advantages"].to_pylist())).max() > 1.0  # weights


def test_parameters() -> None:
    params = resolve("ktae")
    assert (params.eps, params.ktae_alpha, params.ktae_beta_ig, params.ktae_tf,
            params.ktae_top) == (1e-6, 1.0, 1.0, True, 1.0)  # fmt: skip
    with pytest.raises(UsageError, match="both 0"):
        resolve("ktae", ktae_alpha=0.0, ktae_beta_ig=0.0)
    with pytest.raises(UsageError, match="`ktae_top`"):
        resolve("ktae", ktae_top=float("nan"))


def test_log_without_mask() -> None:
    rows = [{k: v for k, v in r.items() if k != "action_mask"} for r in hand_log()]
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="ktae")
    assert table["advantages"].to_pylist()[0][2] == pytest.approx(1.866024, abs=1e-6)


def test_cli(tmp_path) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", hand_log())
    out = tmp_path / "out.jsonl"
    proc = run("annotate", log, "--method", "ktae", "--out", str(out), "--ktae-top", "0.5")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line)["advantages"] for line in out.read_text().splitlines()]
    seq = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(got[0], [0.0, seq, seq + 0.5], atol=1e-6)


def test_a_side_without_action_tokens() -> None:
    """Wrong rollouts whose tokens are all mask 0: their term frequency is 0 (KTAE: 0/0, NaN),
    so a correct rollout's tokens get +top."""
    rows = hand_log()
    rows[2]["action_mask"] = rows[3]["action_mask"] = [0, 0, 0]
    table = advcli.annotate_table(pa.Table.from_pylist(rows), method="ktae")
    seq = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(table["advantages"].to_pylist()[0], [0, seq + 1, seq + 1], atol=1e-6)
    assert table["advantages"].to_pylist()[2] == [0.0, 0.0, 0.0]
