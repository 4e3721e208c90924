"""Helpers on ragged data stored as a flat array plus row offsets."""

from __future__ import annotations

import numpy as np


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
