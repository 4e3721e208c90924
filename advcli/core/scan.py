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
"""

from __future__ import annotations

import numpy as np

CHUNK = 32
_BLOCK_ROWS = 8192  # chunks scanned together: keeps a block's columns in cache


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


def reverse_discounted_scan(
    x: np.ndarray, coef: np.ndarray, offsets: np.ndarray, carry: np.ndarray | None = None
) -> np.ndarray:
    """Per row, ``y[k] = x[k] + coef[k] * y[k + 1]``; after the row's last element ``y = carry``.

    ``coef`` is per element (so per-row discounts are a broadcast); ``offsets`` start at 0.
    Returns float64 of the same length as ``x``.
    """
    x = np.asarray(x, dtype=np.float64)
    coef = np.asarray(coef, dtype=np.float64)
    n = len(x)
    if n == 0:
        return np.zeros(0)
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
