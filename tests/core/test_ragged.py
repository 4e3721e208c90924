"""Ragged helpers: the first flag of some rows equals the first flag of every row, taken at
those rows; a prompt's hash is the same from its row or from its prefix alone."""

from __future__ import annotations

import numpy as np
import pytest

from advcli.core.ragged import first_where, first_where_in, offsets_from_lengths, prefix_hashes


@pytest.mark.parametrize("seed", range(5))
def test_first_where_in_some_rows_is_first_where_at_them(seed):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 12, 40)
    offsets = offsets_from_lengths(lens) + 7  # offsets need not start at 0
    flags = rng.uniform(0, 1, int(lens.sum())) < 0.2  # some rows without a flag
    rows = rng.choice(40, 15, replace=False)
    assert (
        first_where_in(offsets, flags, rows).tolist() == first_where(offsets, flags)[rows].tolist()
    )
    assert first_where_in(offsets, np.zeros_like(flags), rows).tolist() == lens[rows].tolist()


def test_a_prefix_hashes_alike_in_its_row_and_alone():
    ids = np.array([5, 6, 7, 8, 5, 6, 9])
    offsets = np.array([0, 4, 7])
    ends = np.array([2, 2])
    whole = prefix_hashes(ids, offsets, ends)
    alone = prefix_hashes(np.array([5, 6]), np.array([0, 2]), np.array([2]))
    assert whole[0] == whole[1] == alone[0]
