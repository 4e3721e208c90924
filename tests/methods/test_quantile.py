"""``--method quantile`` (QAE): A = R − Q_K(R_group), linear interpolation. Only the paper
defines it: hand-computed examples, a float64 loop of our own, and the real command."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from advcli.core import group as G
from tests.conftest import rollout, run, write_jsonl
from tests.core.test_group import grouped


def _quantile_by_loop(values: list[float], q: float) -> float:
    """The K-quantile of a list, linear between order statistics, one value at a time."""
    ordered = sorted(values)
    h = q * (len(ordered) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def _qae_by_loop(rewards: np.ndarray, codes: np.ndarray, q: float, raw: bool) -> list[float]:
    out = []
    for r, c in zip(rewards.tolist(), codes.tolist(), strict=True):
        peers = [x for x, d in zip(rewards.tolist(), codes.tolist(), strict=True) if d == c]
        if len(peers) == 1:
            out.append(r if raw else 0.0)
        elif max(peers) - min(peers) <= 1e-9:
            out.append(0.0)
        else:
            out.append(r - _quantile_by_loop(peers, q))
    return out


def _qae(rewards, codes, q, singleton="zero"):
    rewards, codes = np.asarray(rewards, float), np.asarray(codes)
    stats = G.group_stats(rewards, codes, int(codes.max()) + 1, ddof=0, tol=1e-9)
    return G.quantile_baseline(rewards, codes, stats, q=q, singleton=singleton)


def test_by_hand() -> None:
    # [0, 0, 1, 1, 1], K = 0.4: h = 0.4·4 = 1.6, Q = 0 + 0.6·(1 − 0) = 0.6
    np.testing.assert_allclose(_qae([0, 0, 1, 1, 1], [0] * 5, 0.4), [-0.6, -0.6, 0.4, 0.4, 0.4])
    # a hard prompt (1 success in 5): Q_0.4 = 0, so the success gets 1 and the failures 0
    np.testing.assert_allclose(_qae([1, 0, 0, 0, 0], [0] * 5, 0.4), [1, 0, 0, 0, 0])
    # the median of [3, -1, 0.5, 2] is (0.5 + 2) / 2 = 1.25
    np.testing.assert_allclose(_qae([3, -1, 0.5, 2], [0] * 4, 0.5), [1.75, -2.25, -0.75, 0.75])
    # K = 0 is the group's minimum, K = 1 its maximum
    np.testing.assert_allclose(_qae([3, -1, 0.5], [0] * 3, 0.0), [4, 0, 1.5])
    np.testing.assert_allclose(_qae([3, -1, 0.5], [0] * 3, 1.0), [0, -4, -2.5])


def test_singletons_and_zero_variance() -> None:
    assert _qae([2.0, 0.5, 0.5], [0, 1, 1], 0.3).tolist() == [0.0, 0.0, 0.0]
    assert _qae([2.0, 0.5, 0.5], [0, 1, 1], 0.3, singleton="raw").tolist() == [2.0, 0.0, 0.0]


@settings(max_examples=100, deadline=None)
@given(grouped(), st.sampled_from([0.0, 0.1, 0.25, 0.4, 0.5, 0.9, 1.0]), st.booleans())
def test_matches_loop(data, q, raw) -> None:
    rewards, codes = data
    got = _qae(rewards, codes, q, singleton="raw" if raw else "zero")
    np.testing.assert_allclose(got, _qae_by_loop(rewards, codes, q, raw), rtol=1e-12, atol=1e-12)


def test_cli_writes_the_quantile_advantage(tmp_path) -> None:
    rows = [rollout("a", r) for r in (0.0, 0.0, 1.0, 1.0, 1.0)] + [rollout("b", 1.0)]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "quantile", "--quantile", "0.4", "--out", str(out),
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    np.testing.assert_allclose(table["advantage"].to_pylist(), [-0.6, -0.6, 0.4, 0.4, 0.4, 0.0],
                               rtol=1e-6)  # fmt: skip
    assert table["advantages"][2].as_py() == [0.0, 0.0, np.float32(0.4), np.float32(0.4),
                                              np.float32(0.4)]  # fmt: skip
    assert orjson.loads(proc.stdout)["singleton_groups"] == 1
    bad = run("annotate", log, "--method", "quantile", "--quantile", "1.5", "--out", str(out))
    assert bad.returncode == 2
    assert b"--quantile 1.5: expected a number in [0, 1]" in bad.stderr
