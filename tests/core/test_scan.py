"""linear_scan and reverse_discounted_scan against plain loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advcli.core.ragged import offsets_from_lengths
from advcli.core.scan import CHUNK, linear_scan, reverse_discounted_scan
from tests.core import reference as ref

LENGTHS = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 1000, CHUNK * CHUNK, CHUNK * CHUNK + 1, 100_000]


def _close(actual, expected):
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max())) if len(expected) else 1.0
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-10 * scale)


def test_linear_scan_doc_example():
    y = linear_scan(np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.5, 0.5]))
    assert y.tolist() == [1.0, 1.5, 1.75]


@pytest.mark.parametrize("n", LENGTHS)
def test_linear_scan_matches_loop(n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n)
    a = rng.uniform(0, 1, n)
    y = linear_scan(x, a)
    assert y.dtype == np.float64 and y.shape == (n,)
    _close(y, ref.linear_scan(x, a))


@pytest.mark.parametrize("n", [CHUNK + 1, 1000, 100_000])
def test_linear_scan_coefficient_one_is_cumsum(n):
    """a == 1 everywhere: a plain prefix sum (no damping hides errors across chunk ends)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, n)
    _close(linear_scan(x, np.ones(n)), ref.linear_scan(x, np.ones(n)))


def test_linear_scan_zero_coefficients_cut():
    x = np.arange(1.0, 101.0)
    a = np.ones(100)
    a[[0, 33, 64]] = 0.0  # restarts, two of them on chunk boundaries
    y = linear_scan(x, a)
    _close(y, ref.linear_scan(x, a))
    assert y[64] == 65.0


@pytest.mark.parametrize("n", LENGTHS)
def test_reverse_scan_single_row_with_carry(n):
    rng = np.random.default_rng(1000 + n)
    x = rng.uniform(-1, 1, n)
    c = rng.uniform(0, 1, n)  # per-element coefficients
    offsets = np.array([0, n])
    carry = np.array([0.75])
    y = reverse_discounted_scan(x, c, offsets, carry)
    assert y.shape == (n,)
    _close(y, ref.reverse_scan_rows(x, c, offsets, carry))


def test_reverse_scan_per_element_coefficients_by_hand():
    # y2 = 1 + 0.1 * 2 = 1.2; y1 = 1 + 0.25 * 1.2 = 1.3; y0 = 1 + 0.5 * 1.3 = 1.65
    y = reverse_discounted_scan(
        np.ones(3), np.array([0.5, 0.25, 0.1]), np.array([0, 3]), np.array([2.0])
    )
    np.testing.assert_allclose(y, [1.65, 1.3, 1.2], rtol=0, atol=1e-15)


@pytest.mark.parametrize("n", [CHUNK - 1, CHUNK, CHUNK + 1, 1000])
def test_reverse_scan_many_rows_across_chunks(n):
    """Rows of lengths around the chunk size, some empty, laid end to end."""
    rng = np.random.default_rng(n)
    lens = np.array([n, 0, 1, n + 3, 0, CHUNK, 2 * CHUNK + 5, 0])
    offsets = offsets_from_lengths(lens)
    total = int(offsets[-1])
    x = rng.uniform(-1, 1, total)
    c = rng.uniform(0, 1, total)
    carry = rng.uniform(-1, 1, len(lens))
    _close(
        reverse_discounted_scan(x, c, offsets, carry), ref.reverse_scan_rows(x, c, offsets, carry)
    )
    _close(reverse_discounted_scan(x, c, offsets), ref.reverse_scan_rows(x, c, offsets))


def test_reverse_scan_empty():
    assert reverse_discounted_scan(np.zeros(0), np.zeros(0), np.array([0, 0, 0])).shape == (0,)


@st.composite
def ragged(draw):
    lens = draw(st.lists(st.integers(0, 3 * CHUNK), min_size=1, max_size=6))
    total = sum(lens)
    unit = st.floats(0, 1, allow_nan=False, allow_subnormal=False)
    x = draw(st.lists(st.floats(-4, 4, allow_subnormal=False), min_size=total, max_size=total))
    c = draw(st.lists(unit, min_size=total, max_size=total))
    carry = draw(
        st.lists(st.floats(-4, 4, allow_subnormal=False), min_size=len(lens), max_size=len(lens))
    )
    return offsets_from_lengths(np.array(lens)), np.array(x), np.array(c), np.array(carry)


@settings(max_examples=60, deadline=None)
@given(ragged(), st.booleans())
def test_reverse_scan_property(data, use_carry):
    offsets, x, c, carry = data
    carry = carry if use_carry else None
    _close(
        reverse_discounted_scan(x, c, offsets, carry), ref.reverse_scan_rows(x, c, offsets, carry)
    )


@settings(max_examples=60, deadline=None)
@given(ragged())
def test_reverse_scan_rows_are_independent(data):
    """Each row computed alone equals the same row computed with the others."""
    offsets, x, c, carry = data
    together = reverse_discounted_scan(x, c, offsets, carry)
    for r in range(len(offsets) - 1):
        lo, hi = offsets[r], offsets[r + 1]
        alone = reverse_discounted_scan(
            x[lo:hi], c[lo:hi], np.array([0, hi - lo]), carry[r : r + 1]
        )
        np.testing.assert_allclose(together[lo:hi], alone, rtol=1e-12, atol=1e-12)
