"""The pure decisions of shard: first-fit-decreasing packing and chunking, against naive loops."""

from __future__ import annotations

import numpy as np

from advcli.shards.plan import chunks, first_fit_decreasing


def naive_ffd(sizes: list[int], cap: int) -> list[list[int]]:
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        for b, room in enumerate(free):
            if room >= sizes[i]:
                bins[b].append(i)
                free[b] -= sizes[i]
                break
        else:
            bins.append([i])
            free.append(cap - sizes[i])
    return bins


def test_first_fit_decreasing_matches_the_naive_algorithm():
    rng = np.random.default_rng(3)
    for _ in range(20):
        sizes = rng.integers(1, 50, rng.integers(0, 80))
        bins = first_fit_decreasing(sizes, 50)
        expected = naive_ffd(sizes.tolist(), 50)
        assert sorted(map(sorted, _groups(bins))) == sorted(map(sorted, expected))
    groups = np.array([0, 0, 1, 1, 1])
    bins = first_fit_decreasing(np.array([5, 5, 5, 5, 5]), 10, groups)
    assert len(set(bins[:2])) == 1 and set(bins[:2]).isdisjoint(bins[2:])
    np.testing.assert_array_equal(chunks(np.array([3, 3, 3, 9, 1]), 6), [0, 2, 3, 4, 5])
    starts = np.array([True, False, True, True, False])
    np.testing.assert_array_equal(chunks(np.array([3, 3, 3, 9, 1]), 6, starts), [0, 2, 3, 5])


def _groups(bins: np.ndarray) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for i, b in enumerate(bins.tolist()):
        out.setdefault(b, []).append(i)
    return list(out.values())
