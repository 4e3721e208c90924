"""Helpers on ragged data stored as a flat array plus row offsets."""

from __future__ import annotations

from advcli.lazy_imports import np


def lengths(offsets: np.ndarray) -> np.ndarray:
    """Row lengths: ``offsets[1:] - offsets[:-1]``."""
    return np.diff(offsets)


def row_of(offsets: np.ndarray) -> np.ndarray:
    """The row index of every flat element (int64, length ``offsets[-1] - offsets[0]``)."""
    n_rows = len(offsets) - 1
    return np.repeat(np.arange(n_rows, dtype=np.int64), lengths(offsets))


def positions(offsets: np.ndarray) -> np.ndarray:
    """Each element's position within its row (int64)."""
    starts = np.repeat(offsets[:-1] - offsets[0], lengths(offsets))
    out: np.ndarray = np.arange(int(offsets[-1] - offsets[0]), dtype=np.int64) - starts
    return out


def first_where(offsets: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Per row: the position within the row of its first true flag, its length where none is."""
    first = lengths(offsets).astype(np.int64)
    hits = np.flatnonzero(flags)
    if len(hits):
        rows, at = np.unique(row_of(offsets)[hits], return_index=True)
        first[rows] = hits[at] - (offsets[rows] - offsets[0])
    return first


def first_where_in(offsets: np.ndarray, flags: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`first_where` of the rows ``rows`` alone, without a pass over the others' flags:
    per row, the position of its first true flag, its length where none is.

    >>> first_where_in(np.array([0, 3, 5, 8]), np.array([0, 1, 1, 0, 0, 0, 0, 1]) > 0,
    ...                np.array([2, 0, 1])).tolist()
    [2, 1, 2]
    """
    starts, stops = offsets[rows] - offsets[0], offsets[rows + 1] - offsets[0]
    hits = np.flatnonzero(flags)
    if not len(hits):
        out: np.ndarray = stops - starts
        return out
    first = hits[np.minimum(np.searchsorted(hits, starts), len(hits) - 1)]
    out = np.where((first >= starts) & (first < stops), first, stops) - starts
    return out


def offsets_from_lengths(lens: np.ndarray) -> np.ndarray:
    """Offsets (int64, starting at 0) for rows of the given lengths."""
    out = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(starts[i], starts[i] + lens[i])`` for every i, without a loop."""
    lens = np.asarray(lens, dtype=np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    out_offsets = offsets_from_lengths(lens)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - out_offsets[:-1], lens)
    out: np.ndarray = np.arange(total, dtype=np.int64) + shift
    return out


HASH_BASE = 0x100000001B3  # FNV-1's 64-bit prime: odd, so every power is too
LENGTH_MIX = 0x9E3779B97F4A7C15  # the golden ratio's 64 bits, to mix in the length


def prefix_hashes(values: np.ndarray, offsets: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per row: a 64-bit hash of its first ``ends`` values (integers), equal for equal
    prefixes, wherever the rows lie: Σ_k (v_k + 1)·B^(k+1) mod 2^64, its length mixed in.

    >>> h = prefix_hashes(np.array([5, 6, 7, 5, 6, 9]), np.array([0, 3, 6]), np.array([2, 2]))
    >>> bool(h[0] == h[1]), bool(prefix_hashes(np.array([5, 6]), np.array([0, 2]),
    ...                                        np.array([1]))[0] == h[0])
    (True, False)
    """
    pos = positions(offsets)
    if not len(pos):
        no_tokens = np.zeros(len(offsets) - 1, dtype=np.uint64)
        return no_tokens ^ (ends.astype(np.uint64) * np.uint64(LENGTH_MIX))
    powers = np.cumprod(np.full(int(pos.max()) + 1, HASH_BASE, dtype=np.uint64))  # wraps
    with np.errstate(over="ignore"):
        terms = (values.astype(np.uint64) + np.uint64(1)) * powers[pos]
        terms[pos >= np.repeat(ends, lengths(offsets))] = 0
        summed = np.zeros(len(terms) + 1, dtype=np.uint64)
        np.cumsum(terms, out=summed[1:])
        base = offsets - offsets[0]
        out: np.ndarray = (summed[base[1:]] - summed[base[:-1]]) ^ (
            ends.astype(np.uint64) * np.uint64(LENGTH_MIX)
        )
    return out
