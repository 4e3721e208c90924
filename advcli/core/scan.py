"""The discounted reverse scan under every temporal estimator.

For each row of a ragged array, ``y[k] = x[k] + c[k] * y[k + 1]`` from the row's end backwards,
with ``y[end] = carry[row]``. Discounted returns (c = gamma) and GAE (c = gamma * lambda) are both
this scan. It is a first-order linear recurrence, computed exactly in float64 without rescaling:

1. reverse the flat array, so the recurrence runs forwards and rows start with ``c = 0``;
2. cut it into chunks of ``CHUNK`` elements and scan every chunk at once, column by column
   (``CHUNK`` vectorised steps), keeping the running product of coefficients;
3. the chunk ends obey the same recurrence one level up (solved recursively), and each element
   adds ``product of its chunk's coefficients so far * true end of the previous chunk``.

All products are of coefficients in [0, 1], so nothing overflows, and no term is divided out.

A discount that is the same for every element (the usual case: gamma, or gamma * lambda) takes a
faster path, :func:`_constant_scan`: rows are laid out in blocks of ``L`` elements (each row
starting on a block), and inside a block the recurrence is a reversed cumulative sum of
``x[t] * c**t`` scaled back by ``c**-j``. ``L`` is chosen so ``c**L`` stays far from underflow,
so every factor is a normal float64; each partial sum holds only terms of its own row, so there
is no cancellation between rows. Blocks of one row are joined by the general scan one level up.
"""

from __future__ import annotations

import numpy as np

CHUNK = 32
_BLOCK_ROWS = 8192  # chunks scanned together: keeps a block's columns in cache
_MAX_BLOCK = 256  # constant-discount path: elements per block
_MIN_POWER = 1e-280  # c**L must stay a normal float64 (min ~2.2e-308)
_CACHE_ELEMENTS = 1 << 18  # constant-discount path: blocks processed together stay in cache


def linear_scan(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Solve ``y[i] = x[i] + a[i] * y[i - 1]`` (with ``y[-1] = 0``) in float64.

    >>> linear_scan(np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.5, 0.5])).tolist()
    [1.0, 1.5, 1.75]
    """
    n = len(x)
    m = -(-n // CHUNK)
    y = np.zeros(m * CHUNK)
    prod = np.zeros(m * CHUNK)
    y[:n] = x
    prod[:n] = a
    y2 = y.reshape(m, CHUNK)
    p2 = prod.reshape(m, CHUNK)
    for lo in range(0, m, _BLOCK_ROWS):
        yb = y2[lo : lo + _BLOCK_ROWS]
        pb = p2[lo : lo + _BLOCK_ROWS]
        for j in range(1, CHUNK):
            yb[:, j] += pb[:, j] * yb[:, j - 1]
            pb[:, j] *= pb[:, j - 1]
    if m > 1:
        ends = linear_scan(y2[:, -1].copy(), p2[:, -1].copy())
        y2[1:] += p2[1:] * ends[:-1, None]
    return y[:n]


def _block_length(c: float) -> int:
    if c >= 1.0:
        return _MAX_BLOCK
    return int(max(1, min(_MAX_BLOCK, np.log(_MIN_POWER) / np.log(c))))


def _constant_scan(x: np.ndarray, c: float, offsets: np.ndarray) -> np.ndarray:
    """Per row, ``y[k] = x[k] + c * y[k + 1]`` (``y = 0`` after the row); ``0 < c <= 1``.

    Rows are taken in pieces of about ``_CACHE_ELEMENTS`` elements, so every pass over a piece
    runs in cache.
    """
    out = np.empty(len(x))
    cuts = np.searchsorted(offsets, np.arange(0, offsets[-1], _CACHE_ELEMENTS), side="right") - 1
    cuts = np.unique(np.r_[cuts, len(offsets) - 1])
    block = _block_length(c)
    powers = c ** np.arange(block, dtype=np.float64)
    inverse = 1.0 / powers
    for lo_row, hi_row in zip(cuts[:-1], cuts[1:], strict=True):
        lo, hi = offsets[lo_row], offsets[hi_row]
        part_offsets = offsets[lo_row : hi_row + 1] - lo
        out[lo:hi] = _constant_scan_piece(x[lo:hi], c, part_offsets, block, powers, inverse)
    return out


def _constant_scan_piece(x, c, offsets, block, powers, inverse) -> np.ndarray:
    lens = np.diff(offsets)
    blocks_per_row = -(-lens // block)
    first_block = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(blocks_per_row, out=first_block[1:])
    m = int(first_block[-1])
    # Where each element sits in the padded (m, block) layout: each row starts a block.
    dest = np.arange(len(x), dtype=np.int64)
    dest += np.repeat(first_block[:-1] * block - offsets[:-1], lens)
    padded = np.zeros(m * block)
    padded[dest] = x
    grid = padded.reshape(m, block)
    # Scaled: grid[b, t] = c**t * x[t], so that y[j] = c**-j * sum_{t >= j} grid[b, t].
    grid *= powers
    # Join the blocks of a row first: first(b) = local_first(b) + c**L * first(b + 1), where
    # local_first(b) is the block's scaled sum. The carry then enters the block's cumulative sum
    # as one more term at its end, c**L * first(b + 1).
    continues = np.ones(m, dtype=bool)
    continues[first_block[1:][blocks_per_row > 0] - 1] = False
    step = c**block * continues
    firsts = linear_scan(grid.sum(axis=1)[::-1], step[::-1])[::-1]
    grid[:-1, -1] += step[:-1] * firsts[1:]
    rev = grid[:, ::-1]
    np.cumsum(rev, axis=1, out=rev)
    grid *= inverse
    return padded[dest]


def reverse_discounted_scan(
    x: np.ndarray,
    coef: float | np.ndarray,
    offsets: np.ndarray,
    carry: np.ndarray | None = None,
) -> np.ndarray:
    """Per row, ``y[k] = x[k] + coef[k] * y[k + 1]``; after the row's last element ``y = carry``.

    ``coef`` is a scalar (the fast path) or one value per element; ``offsets`` start at 0.
    Returns float64 of the same length as ``x``.
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n == 0:
        return np.zeros(0)
    if np.ndim(coef) == 0:
        c = float(coef)
        if carry is not None:
            ends = offsets[1:]
            nonempty = ends > offsets[:-1]
            x = x.copy()
            x[ends[nonempty] - 1] += c * np.asarray(carry, dtype=np.float64)[nonempty]
        return x.copy() if c == 0.0 else _constant_scan(x, c, offsets)
    coef = np.asarray(coef, dtype=np.float64)
    starts = offsets[:-1]
    ends = offsets[1:]
    nonempty = ends > starts
    rx = x[::-1].copy()
    # Reversed: y_r[i] = x_r[i] + coef_r[i] * y_r[i - 1], each element keeping its own coef.
    ra = coef[::-1].copy()
    # The first reversed element of each row (its last element) starts fresh, seeded by carry.
    row_first = n - ends[nonempty]
    ra[row_first] = 0.0
    if carry is not None:
        carry = np.asarray(carry, dtype=np.float64)[nonempty]
        rx[row_first] += coef[ends[nonempty] - 1] * carry
    return linear_scan(rx, ra)[::-1].copy()
