"""KTAE's key-token weights (Key-token Advantage Estimation, xiaolizh1/KTAE @ ea9fb77f,
``verl/workers/actor/compute_key_tokens.py`` ``ComputeKeyTokens``): how strongly a token id
tells a group's correct rollouts (reward > 0) from its wrong ones (reward <= 0).

For a token id v of a group with N_c correct and N_w wrong rollouts, counting only action
tokens, the 2x2 table of rollouts is

    a = correct rollouts containing v      b = wrong rollouts containing v
    c = N_c − a                            d = N_w − b

and with f_c, f_w the occurrences of v among the correct (wrong) side's T_c (T_w) action tokens:

- IG (:func:`information_gain`), in bits: H(Y) − [(a+b)/n·H2(a/(a+b)) + (c+d)/n·H2(c/(c+d))],
  Y the side, n = a+b+c+d;
- F (:func:`fisher_weight`): exp(−2p) with p the two-sided Fisher exact test's p-value (the
  hypergeometric P(k) summed over every k with P(k) <= P(a)), and 0 where p == 1;
- x (:func:`cohen_h`): Cohen's h, asin √(a/N_c) − asin √(b/N_w), plus (with ``tf``)
  tf_c/(tf_w + 1e-5) − tf_w/(tf_c + 1e-5), tf the BM25 term frequency of :func:`bm25_tf`;
- w(v) = (sigmoid((α·F + β·IG)·x / (α + β)) − 0.5)·2·top = top·tanh((α·F + β·IG)·x / (2(α + β))).

A token in correct rollouts only has tf_w = 0, so |x| is about 1e5 and w = ±top. KTAE's trainer
adds w(token) to GRPO's (R − mean)/(std + eps) on every action token (:mod:`advcli.methods.ktae`).

The one quirk reproduced bit for bit is KTAE's float32 Fisher p (:func:`fisher_p32`), in two
ways. In float32 the p of a table whose observed count is the hypergeometric mode sums to 1
only up to rounding (0.99999988 for [1, 1, 1, 1]), so KTAE's ``p != 1.0`` guard lets most such
"neutral" tokens through with F = exp(−2) ≈ 0.135 where exact arithmetic gives 0 (their weights
move by a few hundredths). And a k whose P(k) ties P(a) exactly (mirrored tables) is in the sum or
not as the rounding of the two float32 log-probabilities decides, so p can be the exact p less
those terms. Everything else is float64 (KTAE's float32 differs from it by ~1e-7), but the
rates inside Cohen's h (:func:`cohen_h`).

Two correct rollouts [5, 7], [7, 3] and two wrong ones [5, 9], [9, 3] (T_c = T_w = 4): token 7
is in both correct rollouts and no wrong one, (a, b, c, d) = (2, 0, 0, 2): IG = 1 bit; the
hypergeometric P(k) = 1/6, 4/6, 1/6 for k = 0, 1, 2, so p = P(0) + P(2) = 1/3 and
F = exp(−2/3) = 0.5134; tf_c = 0.5·3/(0.5 + 2) = 0.6, tf_w = 0, so x = π/2 + 0.6/1e-5 and
w(7) = tanh((0.5134 + 1)·60001.6/4) = 1.0. Token 5, (1, 1, 1, 1): IG = 0, x = 0 + 0, w(5) = 0
(its float32 p is 0.99999988, F = exp(−2), but x is 0):

>>> w = key_weights(np.array([2, 1]), np.array([0, 1]), n_correct=2, n_wrong=2,
...                 f_correct=np.array([2, 1]), f_wrong=np.array([0, 1]), t_correct=4,
...                 t_wrong=4, width=3)
>>> w.round(6).tolist()
[1.0, 0.0]
"""

from __future__ import annotations

import math

from advcli.lazy_imports import np

QWEN_EOT = 151643
"""Qwen2.5's ``<|endoftext|>`` (its pad and base-model eos): KTAE sets this id's weight to 0."""

K1, BM25_B = 2.0, 0.5  # KTAE's compute_tf: k1 and b, hard-coded
TF_EPS = 1e-5  # the ratio's guard, x += tf_c/(tf_w + 1e-5) − tf_w/(tf_c + 1e-5)
COHEN_EPS = 1e-10  # a/(a + c + 1e-10): lost in float32 for N_c >= 1, as here

_VEC = 8  # floats per vector of ATen's CPU sum kernel (AVX2, also what AVX512 builds use)
_ILP = 4  # its independent accumulators per row
_LEVEL = 16  # its cascade's level step (2^4: every row shorter than 2^20)
_CHUNK = 1 << 22  # grid cells computed at once


def reduce_pairs(
    hi: np.ndarray, lo: np.ndarray, values: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (hi, lo) pairs, sorted by hi then lo, and the sum of ``values`` (int64,
    one row of counts per pair; None: ones) over each.

    >>> h, l, n = reduce_pairs(np.array([1, 0, 1, 1]), np.array([5, 9, 5, 2]))
    >>> h.tolist(), l.tolist(), n[:, 0].tolist()
    ([0, 1, 1], [9, 2, 5], [1, 1, 2])
    """
    hi = np.asarray(hi, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    if values is None:
        values = np.ones((len(hi), 1), dtype=np.int64)
    if not len(hi):
        return hi, lo, np.zeros((0, values.shape[1]), dtype=np.int64)
    if hi.min() >= 0 and lo.min() >= 0 and hi.max() < (1 << 31) and lo.max() < (1 << 32):
        order = np.argsort((hi << 32) | lo, kind="stable")  # one int64 key: a faster sort
    else:
        order = np.lexsort((lo, hi))
    h, low = hi[order], lo[order]
    starts = np.flatnonzero(np.r_[True, (h[1:] != h[:-1]) | (low[1:] != low[:-1])])
    sums = np.add.reduceat(values[order], starts, axis=0).astype(np.int64)
    return h[starts], low[starts], sums


def unique_rows(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of an int64 array [k, n] (as ``np.unique(axis=1)``) and the index
    of each column's among them.

    >>> u, back = unique_rows(np.array([[1, 0, 1], [2, 5, 2]]))
    >>> u.tolist(), back.tolist()
    ([[0, 1], [5, 2]], [1, 0, 1])
    """
    key = np.zeros(columns.shape[1], dtype=np.int64)
    radix = 1
    for row in columns:
        values, rank = np.unique(row, return_inverse=True)
        radix *= len(values)
        if radix >= 1 << 62:  # too many combinations for one int64 key
            u, back = np.unique(columns, axis=1, return_inverse=True)
            return u, back.ravel()
        key = key * len(values) + rank.ravel()
    _, first, back = np.unique(key, return_index=True, return_inverse=True)
    return columns[:, first], back.ravel()


def lgamma32(n_max: int) -> np.ndarray:
    """float32 lgamma(j) for j = 0 .. n_max + 1 (lgamma(0) = inf): the values of float32
    ``torch.lgamma`` at those integers (double lgamma rounded to float32; checked equal for
    j < 10638).

    >>> lgamma32(3).tolist()[1:]
    [0.0, 0.0, 0.6931471824645996, 1.7917594909667969]
    """
    out = np.empty(n_max + 2, dtype=np.float32)
    out[0] = np.inf
    out[1:] = np.array([math.lgamma(j) for j in range(1, n_max + 2)], dtype=np.float64)
    return out


def aten_sum32(terms: np.ndarray) -> np.ndarray:
    """float32 sums of the rows of ``terms`` [m, W] in the order of ATen's CPU sum over the
    last dimension (``torch.sum(dim=1)`` of a contiguous float32 tensor): W >= 8 as 8 lanes,
    each lane's vectors summed by 4 accumulators (the leftover vectors into the first, then
    ((p0 + p1) + p2) + p3), then the leftover W mod 8 scalars in order, then the lanes in
    order; W < 8 as one lane of scalars.

    >>> x = np.array([[1e8, 1.0, -1e8, 1.0, 1.0]], dtype=np.float32)
    >>> aten_sum32(x).tolist(), float(x[0, :4].sum() + x[0, 4]), float(x.astype(np.float64).sum())
    ([1.0], 2.0, 3.0)
    """
    terms = np.asarray(terms, dtype=np.float32)
    m, width = terms.shape
    if width < _VEC:
        return _row_sum(terms.reshape(m, width, 1))[:, 0]
    n_vec = width // _VEC
    lanes = _row_sum(terms[:, : n_vec * _VEC].reshape(m, n_vec, _VEC))
    total = np.zeros(m, dtype=np.float32)
    for j in range(n_vec * _VEC, width):
        total = total + terms[:, j]
    for lane in range(_VEC):
        total = total + lanes[:, lane]
    return total


def _row_sum(x: np.ndarray) -> np.ndarray:
    """ATen's ``row_sum`` over axis 1 of x [m, size, lanes] (float32): 4 accumulators."""
    size = x.shape[1]
    n_ilp = size // _ILP
    partial = _multi_row_sum(x[:, : n_ilp * _ILP].reshape(x.shape[0], n_ilp, _ILP, x.shape[2]))
    first = partial[:, 0]
    for i in range(n_ilp * _ILP, size):
        first = first + x[:, i]
    for k in range(1, _ILP):
        first = first + partial[:, k]
    return first


def _multi_row_sum(y: np.ndarray) -> np.ndarray:
    """ATen's ``multi_row_sum`` over axis 1 of y [m, size, 4, lanes]: a 4-level cascade."""
    size = y.shape[1]
    acc = np.zeros((4, y.shape[0], *y.shape[2:]), dtype=np.float32)
    i = 0
    while i + _LEVEL <= size:
        for _ in range(_LEVEL):
            acc[0] = acc[0] + y[:, i]
            i += 1
        for j in range(1, 4):
            acc[j] = acc[j] + acc[j - 1]
            acc[j - 1] = 0.0
            if i & ((_LEVEL - 1) << (4 * j)):
                break
    while i < size:
        acc[0] = acc[0] + y[:, i]
        i += 1
    for j in range(1, 4):
        acc[0] = acc[0] + acc[j]
    out: np.ndarray = acc[0]
    return out


def fisher_p32(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, width: np.ndarray | int
) -> np.ndarray:
    """KTAE's ``fisher_exact_test`` in its float32 arithmetic: the two-sided p of each table
    [a, b, c, d] (integers), p = Σ_{k: P(k) <= P(a)} P(k) over k in [max(0, R1 + C1 − n),
    min(R1, C1)], R1 = a + b, C1 = a + c, P(k) = C(C1, k)·C(n − C1, R1 − k)/C(n, R1).

    Each log P(k) is lgamma's float32 differences in KTAE's order (the same float32 numbers as
    torch's, so P(k) <= P(a) is decided as KTAE decides it, ties included), its exp rounded to
    float32 (torch's CPU exp, MKL's, differs from that in the last bit for ~1% of inputs), and
    the terms are summed over a grid of ``width`` columns k = 0 .. width − 1 (KTAE's: 1 + the
    largest min(R1, C1) of the group's table) in ATen's order (:func:`aten_sum32`). So p == 1
    exactly where KTAE's is, but for the rare table whose sum an exp's last bit moves across 1
    (none in groups of up to 16 rollouts checked against torch 2.13, ~1 token in 7000 in groups
    of up to 80).

    >>> fisher_p32(*np.array([[1, 1, 1, 1], [1, 1, 2, 2], [2, 0, 0, 2]]).T, 3).tolist()
    [0.9999998807907104, 0.9999999403953552, 0.3333333134651184]
    """
    tables = np.stack(np.broadcast_arrays(a, b, c, d), axis=1).astype(np.int64)
    widths = np.broadcast_to(np.asarray(width, dtype=np.int64), (len(tables),))
    out = np.ones(len(tables), dtype=np.float32)
    if not len(tables):
        return out
    lg = lgamma32(int(tables.sum(axis=1).max()))
    for w in np.unique(widths):
        at = np.flatnonzero(widths == w)
        for lo in range(0, len(at), max(1, _CHUNK // int(w))):
            rows = at[lo : lo + max(1, _CHUNK // int(w))]
            out[rows] = _fisher_rows(tables[rows], int(w), lg)
    return out


def _fisher_rows(t: np.ndarray, width: int, lg: np.ndarray) -> np.ndarray:
    a, b, c, d = t.T
    r1, c1 = a + b, a + c
    n = r1 + c + d
    k_min = np.maximum(0, r1 + c1 - n)
    k_max = np.minimum(r1, c1)
    if (k_max >= width).any():
        raise ValueError("fisher_p32: width is below 1 + min(R1, C1)")
    k = np.arange(width, dtype=np.int64)[None, :]
    valid = (k >= k_min[:, None]) & (k <= k_max[:, None])
    k = np.where(valid, k, k_min[:, None])  # off the support: any valid k, then masked

    def log_comb(top: np.ndarray, low: np.ndarray) -> np.ndarray:
        out: np.ndarray = (lg[top + 1] - lg[low + 1]) - lg[top - low + 1]
        return out

    c1g, r1g, ng = (np.broadcast_to(x[:, None], k.shape) for x in (c1, r1, n))
    log_p = (log_comb(c1g, k) + log_comb(ng - c1g, r1g - k)) - log_comb(ng, r1g)
    p_k = np.exp(log_p.astype(np.float64)).astype(np.float32)
    p_obs = p_k[np.arange(len(a)), a]  # KTAE's P(a), computed apart with the same operations
    terms = np.where(valid & (p_k <= p_obs[:, None]), p_k, np.float32(0.0))
    return aten_sum32(terms)


def fisher_weight(p: np.ndarray) -> np.ndarray:
    """F = exp(−2p) where p != 1 (KTAE's guard, on its float32 p), else 0.

    >>> fisher_weight(np.array([1.0, 0.99999988, 0.5], dtype=np.float32)).round(4).tolist()
    [0.0, 0.1353, 0.3679]
    """
    f: np.ndarray = np.where(p != np.float32(1.0), np.exp(-2.0 * p.astype(np.float64)), 0.0)
    return f


def _entropy(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return out


def information_gain(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """IG of the side given whether the rollout contains the token, in bits (0 for an empty
    table): H(Y) − [(a+b)/n·H2(a/(a+b)) + (c+d)/n·H2(c/(c+d))].

    >>> information_gain(*np.array([[2, 0, 0, 2], [1, 1, 1, 1], [0, 0, 0, 0]]).T).tolist()
    [1.0, 0.0, 0.0]
    """
    a, b, c, d = (np.asarray(x, dtype=np.float64) for x in (a, b, c, d))
    n = a + b + c + d
    with np.errstate(divide="ignore", invalid="ignore"):
        h_y = _entropy((a + c) / n) + _entropy((b + d) / n)

        def h2(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
            total = x1 + x2
            out: np.ndarray = np.where(total > 0, _entropy(x1 / total) + _entropy(x2 / total), 0.0)
            return out

        ig = h_y - ((a + b) / n * h2(a, b) + (c + d) / n * h2(c, d))
    out: np.ndarray = np.where(n > 0, ig, 0.0)
    return out


def cohen_h(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Cohen's h of the two sides' rates: asin √(a/(a+c)) − asin √(b/(b+d)) (KTAE adds 1e-10
    to each denominator and clamps the rates to [0, 1]). The rates and their square roots are
    float32, as KTAE's: near a rate of 1, asin's slope would turn a float64 1e-10 into 1e-5.

    >>> cohen_h(*np.array([[2, 0, 0, 2], [1, 1, 1, 1]]).T).round(6).tolist()
    [1.570796, 0.0]
    """
    a, b, c, d = (np.asarray(x, dtype=np.float32) for x in (a, b, c, d))
    eps = np.float32(COHEN_EPS)  # float32, as KTAE's: lost in a + c >= 1
    rc = np.sqrt(np.clip(a / (a + c + eps), 0.0, 1.0)).astype(np.float64)
    rw = np.sqrt(np.clip(b / (b + d + eps), 0.0, 1.0)).astype(np.float64)
    out: np.ndarray = np.arcsin(rc) - np.arcsin(rw)
    return out


def bm25_tf(f: np.ndarray, total: np.ndarray | float, avg: np.ndarray | float) -> np.ndarray:
    """KTAE's BM25 term frequency of a token with ``f`` occurrences among a side's ``total``
    action tokens, ``avg`` = (T_c + T_w)/2: (f/T)(k1 + 1)/(f/T + k1(1 − b + b·T/avg)), k1 = 2,
    b = 0.5; 0 for a side without action tokens (KTAE: NaN).

    >>> bm25_tf(np.array([2.0, 0.0]), 4.0, 4.0).round(6).tolist()
    [0.6, 0.0]
    """
    f = np.asarray(f, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = f / total
        k = K1 * (1.0 - BM25_B + BM25_B * total / avg)
        out: np.ndarray = np.where(total > 0, rate * (K1 + 1.0) / (rate + k), 0.0)
    return out


def key_weights(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_correct: np.ndarray | int,
    n_wrong: np.ndarray | int,
    f_correct: np.ndarray,
    f_wrong: np.ndarray,
    t_correct: np.ndarray | int,
    t_wrong: np.ndarray | int,
    width: np.ndarray | int,
    alpha: float = 1.0,
    beta_ig: float = 1.0,
    tf: bool = True,
    top: float = 1.0,
) -> np.ndarray:
    """w per (group, token) entry (float64), from its rollout counts ``a``, ``b``, its
    occurrences ``f_correct``, ``f_wrong`` and its group's ``n_correct``, ``n_wrong``
    rollouts, ``t_correct``, ``t_wrong`` action tokens and Fisher grid ``width`` (1 + the
    largest min(a + b, n_correct) of the group's tokens); see the module's docstring. The
    defaults are the values KTAE's trainer hard-codes. ``alpha + beta_ig`` must be > 0."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    c = np.asarray(n_correct, dtype=np.int64) - a
    d = np.asarray(n_wrong, dtype=np.int64) - b
    ig = information_gain(a, b, c, d) if beta_ig else np.zeros(len(a))
    fisher = np.zeros(len(a))
    if alpha:
        tables, back = unique_rows(np.stack(np.broadcast_arrays(a, b, c, d, width)))
        fisher = fisher_weight(fisher_p32(*tables))[back]
    x = cohen_h(a, b, c, d)
    if tf:
        t_c = np.asarray(t_correct, dtype=np.float64)
        t_w = np.asarray(t_wrong, dtype=np.float64)
        avg = (t_c + t_w) / 2.0
        tf_c = bm25_tf(f_correct, t_c, avg)
        tf_w = bm25_tf(f_wrong, t_w, avg)
        x = x + (tf_c / (tf_w + TF_EPS) - tf_w / (tf_c + TF_EPS))
    z = (alpha * fisher + beta_ig * ig) * x / (alpha + beta_ig)
    out: np.ndarray = top * np.tanh(z / 2.0)
    return out
