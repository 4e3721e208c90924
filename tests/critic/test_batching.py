"""Padded batches for a critic, against plain loops: sorting, budgets, padding and alignment."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from advcli.core.ragged import offsets_from_lengths
from advcli.critic import batching


def test_keep_last_cuts_only_long_rows():
    starts, lens, cut = batching.keep_last(np.array([0, 3, 10, 12]), 4)
    assert starts.tolist() == [0, 6, 10] and lens.tolist() == [3, 4, 2] and cut.tolist() == [1]


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(0, 30), min_size=0, max_size=25),
    budget=st.integers(1, 120),
    max_rows=st.one_of(st.none(), st.integers(1, 5)),
)
def test_batches_take_rows_longest_first_within_the_budget(lens, budget, max_rows):
    lens = np.array(lens, dtype=np.int64)
    seen = []
    for rows, width in batching.batches(lens, budget, max_rows=max_rows):
        assert width == lens[rows[0]] == lens[rows].max()
        assert len(rows) == 1 or len(rows) * width <= budget  # a longer row runs alone
        assert max_rows is None or len(rows) <= max_rows
        seen.extend(rows.tolist())
    nonempty = [i for i in sorted(range(len(lens)), key=lambda i: (-lens[i], i)) if lens[i]]
    assert seen == nonempty


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(0, 12), min_size=1, max_size=8), shift=st.booleans())
def test_pad_and_unpad_against_a_loop(lens, shift):
    lens = np.array(lens, dtype=np.int64)
    offsets = offsets_from_lengths(lens)
    ids = np.arange(1, int(offsets[-1]) + 1, dtype=np.int64)
    width = max(1, int(lens.max()))
    batch = batching.pad(
        ids, offsets[:-1], lens, len(lens) + 1, width, ids_dtype=np.int64, mask_dtype=np.int32
    )
    for r, n in enumerate(lens):
        assert batch.ids[r, :n].tolist() == ids[offsets[r] : offsets[r] + n].tolist()
        assert batch.mask[r].tolist() == [1] * n + [0] * (width - n)
    assert not batch.ids[len(lens)].any()  # a padding row
    out = batch.ids.astype(np.float32) * 10  # a "model" that remembers each position's token
    values = np.full(len(ids), np.nan, dtype=np.float32)
    batching.unpad(out, batch, values, shift=shift)
    for r, n in enumerate(lens):
        row = values[offsets[r] : offsets[r] + n]
        expect = ids[offsets[r] : offsets[r] + n] * 10.0
        if shift:
            assert np.isnan(row[:1]).all() and row[1:].tolist() == expect[:-1].tolist()
        else:
            assert row.tolist() == expect.tolist()
