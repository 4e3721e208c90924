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
faster path, :func:`_constant_scan`: rows are laid out in blocks of ``BLOCK`` elements (each row
starting on a block), one block per row of a grid. A block's first value on its own is
``sum_t c**t * x[t]``, and the true first values of a row's blocks obey the same scan with
discount ``c**BLOCK`` (solved by the same function, one level up). Each block then receives
``c * first(next block)`` at its last element and is scanned column by column, all blocks at
once. Every operation is elementwise and per row, so the result does not depend on how rows are
batched (a BLAS product, though faster, would not promise that).
"""

from __future__ import annotations

from advcli.core.ragged import offsets_from_lengths, ranges
from advcli.lazy_imports import np

CHUNK = 32
_BLOCK_ROWS = 8192  # chunks scanned together: keeps a block's columns in cache
BLOCK = 16  # constant-discount path: elements per block (8-64 measured alike; 16)
_PIECE_ELEMENTS = 1 << 20  # constant-discount path: elements laid out together (8 MB, in L3)
_CACHE_BLOCKS = (1 << 18) // BLOCK  # blocks scanned column by column together (2 MB, in L2)


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


def _constant_scan(x: np.ndarray, c: float, offsets: np.ndarray) -> np.ndarray:
    """Per row, ``y[k] = x[k] + c * y[k + 1]`` (``y = 0`` after the row); ``0 <= c <= 1``.

    Rows are taken in pieces of about ``_PIECE_ELEMENTS`` (a batch is usually one piece), so
    the layout's arrays stay in the last-level cache.
    """
    if len(x) <= _PIECE_ELEMENTS:
        return _constant_scan_piece(x, c, offsets)
    out = np.empty(len(x))
    cuts = np.searchsorted(offsets, np.arange(0, offsets[-1], _PIECE_ELEMENTS), side="right") - 1
    cuts = np.unique(np.r_[cuts, len(offsets) - 1])
    for lo_row, hi_row in zip(cuts[:-1], cuts[1:], strict=True):
        lo, hi = offsets[lo_row], offsets[hi_row]
        out[lo:hi] = _constant_scan_piece(x[lo:hi], c, offsets[lo_row : hi_row + 1] - lo)
    return out


def _constant_scan_piece(x: np.ndarray, c: float, offsets: np.ndarray) -> np.ndarray:
    lens = np.diff(offsets)
    blocks_per_row = -(-lens // BLOCK)
    first_block = offsets_from_lengths(blocks_per_row)
    m = int(first_block[-1])
    # The padded (m, BLOCK) layout: each row starts a block; its last block is padded with 0s.
    # A boolean mask moves the data in and out (twice as fast as an index array).
    pad = blocks_per_row * BLOCK - lens
    holds = np.ones(m * BLOCK, dtype=bool)
    holds[ranges(first_block[1:] * BLOCK - pad, pad)] = False
    padded = np.zeros(m * BLOCK)
    padded[holds] = x
    grid = padded.reshape(m, BLOCK)
    if blocks_per_row.max(initial=0) > 1:
        powers = c ** np.arange(BLOCK, dtype=np.float64)
        own_first = np.einsum("bt,t->b", grid, powers)  # numpy's own loop, not BLAS
        firsts = _constant_scan(own_first, c**BLOCK, first_block)
        # The next block's first value enters as c * first at this block's last element.
        continues = np.ones(m, dtype=bool)
        continues[first_block[1:][blocks_per_row > 0] - 1] = False
        grid[:-1, -1] += np.where(continues[:-1], c * firsts[1:], 0.0)
    for lo in range(0, m, _CACHE_BLOCKS):  # column by column, a slice that stays in L2
        part = grid[lo : lo + _CACHE_BLOCKS]
        for j in range(BLOCK - 2, -1, -1):
            part[:, j] += c * part[:, j + 1]
    return padded[holds]


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
        return _constant_scan(x, c, offsets)
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
    y: np.ndarray = linear_scan(rx, ra)[::-1].copy()
    return y
