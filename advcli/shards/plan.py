"""Every decision of ``advcli shard``, before any byte is written: pure functions on per-sample
arrays (no Python loop per token).

Which samples are dropped (no signal), how long each is written (``--truncate``), its loss
weight, its split (by a hash of its prompt id), the global order (input order, groups together,
or a seeded shuffle), the packing of samples into output rows (first-fit-decreasing), and the
cut of the output rows into shards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from advcli.errors import DataError, UsageError
from advcli.lazy_imports import np, pa
from advcli.shards.inputs import Samples
from advcli.shards.options import DEFAULT_TOKENS_PER_SHARD, ShardOptions, parse_split


@dataclass
class SplitPlan:
    """One split's output: samples in order, grouped into output rows, cut into shards."""

    name: str
    order: np.ndarray  # sample (table row) of each position
    row_offsets: np.ndarray  # output row r holds order[row_offsets[r]:row_offsets[r + 1]]
    shard_bounds: np.ndarray  # output rows [shard_bounds[s], shard_bounds[s + 1]) per shard


@dataclass
class ShardPlan:
    splits: list[SplitPlan]
    lens: np.ndarray  # tokens written per sample (after --truncate)
    weight: np.ndarray | None  # loss weight per sample (times its loss_mask)
    dropped: dict[str, int]
    truncated: dict[str, int]


def split_of_prompt(keys: pa.Array, splits: list[tuple[str, float]]) -> np.ndarray:
    """Split index of each prompt id (0 = train, i = the i-th named split).

    u = first 8 bytes of blake2b(str(prompt id)) / 2**64, uniform in [0, 1); split i takes
    u in [c_{i-1}, c_i) for the cumulative fractions c, train the rest. The same prompt id is
    in the same split in every run and every log.
    """
    bounds = np.cumsum([f for _, f in splits])
    u = np.array(
        [
            int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big")
            for k in keys.to_pylist()
        ],
        dtype=np.float64,
    )
    u /= 2.0**64
    idx = np.searchsorted(bounds, u, side="right")  # number of bounds <= u
    return np.where(idx < len(splits), idx + 1, 0).astype(np.int64)


def first_fit_decreasing(
    sizes: np.ndarray, capacity: int, groups: np.ndarray | None = None
) -> np.ndarray:
    """Bin of each item: by decreasing size (ties by index), each into the first bin with room.

    With ``groups`` (an int per item) items only share bins with items of the same group.
    Bins are numbered in order of opening. O(n log n): a max segment tree over the bins' free
    space finds the first bin with room.
    """
    n = len(sizes)
    bins = np.empty(n, dtype=np.int64)
    if n == 0:
        return bins
    if int(np.max(sizes)) > capacity:
        msg = f"an item of {int(np.max(sizes))} does not fit in bins of {capacity}"
        raise ValueError(msg)
    group = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups)
    order = np.lexsort((np.arange(n), -np.asarray(sizes, dtype=np.int64), group))
    sorted_group = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    ends = np.r_[starts[1:], n]
    opened = 0
    for a, b in zip(starts, ends, strict=True):
        items = order[a:b].tolist()
        item_sizes = sizes[order[a:b]].tolist()
        leaves = 1
        while leaves < len(items):
            leaves *= 2
        tree = [capacity] * (2 * leaves)
        used = 0
        for item, size in zip(items, item_sizes, strict=True):
            i = 1
            while i < leaves:
                i = 2 * i if tree[2 * i] >= size else 2 * i + 1
            slot = i - leaves
            used = max(used, slot + 1)
            tree[i] -= size
            i //= 2
            while i:
                tree[i] = max(tree[2 * i], tree[2 * i + 1])
                i //= 2
            bins[item] = opened + slot
        opened += used
    return bins


def chunks(weights: np.ndarray, budget: int, starts_ok: np.ndarray | None = None) -> np.ndarray:
    """Boundaries of consecutive chunks: each holds as many whole items as fit in ``budget``.

    A chunk holds at least one item (an item over the budget is a chunk of its own). With
    ``starts_ok`` (bool per item) a chunk may start only where it is True (group boundaries).
    Returns item indices ``[0, b1, b2, ..., n]``. One loop step per chunk.
    """
    n = len(weights)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    block_start = np.flatnonzero(starts_ok) if starts_ok is not None else np.arange(n)
    if len(block_start) == 0 or block_start[0] != 0:
        block_start = np.r_[0, block_start]
    block_w = np.add.reduceat(np.asarray(weights, dtype=np.int64), block_start)
    cum = np.r_[0, np.cumsum(block_w)]
    cuts = [0]
    b = 0
    while b < len(block_w):
        e = int(np.searchsorted(cum, cum[b] + budget, side="right")) - 1
        e = max(e, b + 1)
        cuts.append(e)
        b = e
    bounds: np.ndarray = np.r_[block_start, n][cuts].astype(np.int64)
    return bounds


def drop_without_signal(s: Samples, opts: ShardOptions) -> tuple[np.ndarray, dict[str, int]]:
    """Samples kept after ``--drop-singletons`` and ``--drop-zero-variance``, and the counts."""
    kept = np.ones(s.n_rows, dtype=bool)
    dropped: dict[str, int] = {}
    for flag, wanted in (
        ("singleton", opts.drop_singletons),
        ("zero_variance", opts.drop_zero_variance),
    ):
        if not wanted:
            continue
        if flag not in s.flags:
            option = (
                "`drop_singletons=True`" if flag == "singleton" else "`drop_zero_variance=True`"
            )
            msg = (
                f"{option}: the annotated log has no '{flag}' column (only group methods, "
                "grpo, rloo and batch-mean, flag rows). Hint: drop the option"
            )
            raise UsageError(msg)
        hit = s.flags[flag] & kept
        dropped[flag] = int(hit.sum())
        kept &= ~hit
    return kept, dropped


def truncate(
    s: Samples, kept: np.ndarray, opts: ShardOptions, locate: Callable[[int], str]
) -> tuple[np.ndarray, dict[str, int]]:
    """Tokens written per sample, and what ``--truncate`` cut (``--pack N`` without it: an
    error for a sample longer than N)."""
    tok = s.tokens
    if opts.pack is None:
        return tok.copy(), {}
    over = kept & (tok > opts.pack)
    if over.any() and not opts.truncate:
        row = int(np.flatnonzero(over)[0])
        msg = (
            f"{locate(int(s.source_row[row]))}: a rollout of {tok[row]} tokens does not fit "
            f"in `pack={opts.pack}` ({int(over.sum())} rollouts are longer). Hint: raise "
            "`pack`, or pass `truncate=True` to cut them to `pack` tokens (counted in the manifest)"
        )
        raise DataError(msg)
    lens = np.minimum(tok, opts.pack)
    truncated = {
        "rollouts": int(over.sum()),
        "tokens": int((tok - lens)[kept].sum()),
        "action_tokens": int((s.actions - s.kept_actions)[kept].sum()),
    }
    return lens, truncated


def loss_weights(s: Samples, opts: ShardOptions) -> np.ndarray | None:
    """Per sample, the weight of each of its action tokens (``--loss-weights``)."""
    if opts.loss_weights is None:
        return None
    if opts.loss_weights == "seq-mean-token-mean":
        act = s.kept_actions  # after --truncate
        weights: np.ndarray = np.divide(1.0, act, out=np.zeros(s.n_rows), where=act > 0)
        return weights
    return np.ones(s.n_rows)


def global_order(s: Samples, kept: np.ndarray, opts: ShardOptions) -> np.ndarray:
    """The kept samples in output order: input order, groups together, or a seeded
    permutation (of groups, with ``--keep-groups``)."""
    rows = np.flatnonzero(kept)
    if opts.shuffle:
        rng = np.random.default_rng(opts.seed)
        if opts.keep_groups:
            assert s.group is not None and s.group_keys is not None
            rank = rng.permutation(len(s.group_keys))
            return rows[np.lexsort((rows, rank[s.group[rows]]))]
        return rng.permutation(rows)
    if opts.keep_groups:
        assert s.group is not None
        return rows[np.lexsort((rows, s.group[rows]))]
    return rows


def pack(
    s: Samples, order: np.ndarray, lens: np.ndarray, opts: ShardOptions
) -> tuple[np.ndarray, np.ndarray]:
    """``(order, row_offsets)``: samples grouped into output rows, one each without ``--pack``;
    with it, first-fit-decreasing into rows of at most N tokens, the rows in order of their
    first sample."""
    if opts.pack is None:
        return order, np.arange(len(order) + 1, dtype=np.int64)
    groups = s.group[order] if opts.keep_groups and s.group is not None else None
    bins = first_fit_decreasing(lens[order], opts.pack, groups)
    first = np.full(int(bins.max()) + 1 if len(bins) else 0, len(order), dtype=np.int64)
    np.minimum.at(first, bins, np.arange(len(order)))
    pos = np.lexsort((np.arange(len(order)), first[bins]))
    key = first[bins][pos]
    order = order[pos]
    if not len(order):
        return order, np.zeros(1, dtype=np.int64)
    row_offsets = np.r_[np.flatnonzero(np.r_[True, key[1:] != key[:-1]]), len(order)]
    return order, row_offsets.astype(np.int64)


def cut_shards(
    s: Samples, order: np.ndarray, row_offsets: np.ndarray, lens: np.ndarray, opts: ShardOptions
) -> np.ndarray:
    """Output rows ``[bounds[k], bounds[k + 1])`` of each shard: ``--rows-per-shard`` rows or
    ``--tokens-per-shard`` tokens, a group not split across shards with ``--keep-groups``."""
    starts_ok = None
    if opts.keep_groups and len(order):
        assert s.group is not None
        g = s.group[order[row_offsets[:-1]]]
        starts_ok = np.r_[True, g[1:] != g[:-1]]
    if opts.rows_per_shard is not None:
        return chunks(np.ones(len(row_offsets) - 1, dtype=np.int64), opts.rows_per_shard, starts_ok)
    cum = np.r_[0, np.cumsum(lens[order])]
    weights = np.diff(cum[row_offsets])
    return chunks(weights, opts.tokens_per_shard or DEFAULT_TOKENS_PER_SHARD, starts_ok)


def plan_shards(s: Samples, opts: ShardOptions, locate: Callable[[int], str]) -> ShardPlan:
    """Drop, truncate, weigh, split, order, pack and cut. ``locate`` names an input row in an
    error (file, row, column)."""
    kept, dropped = drop_without_signal(s, opts)
    needs_groups = [
        o for o, on in (("`keep_groups=True`", opts.keep_groups), ("`split`", opts.split)) if on
    ]
    if needs_groups and s.group is None:
        msg = (
            f"{needs_groups[0]} needs prompt ids, and the log has no 'prompt_id' column. "
            "Hint: name its column with `col`"
        )
        raise UsageError(msg)
    lens, truncated = truncate(s, kept, opts, locate)
    weight = loss_weights(s, opts)
    splits = parse_split(opts.split)
    split_code = np.zeros(s.n_rows, dtype=np.int64)
    if splits:
        assert s.group_keys is not None and s.group is not None
        split_code = split_of_prompt(s.group_keys, splits)[s.group]
    rows = global_order(s, kept, opts)
    out = []
    for code, name in enumerate(["train", *(nm for nm, _ in splits)]):
        order, row_offsets = pack(s, rows[split_code[rows] == code], lens, opts)
        bounds = cut_shards(s, order, row_offsets, lens, opts)
        out.append(SplitPlan(name, order, row_offsets, bounds))
    return ShardPlan(out, lens, weight, dropped, truncated)
