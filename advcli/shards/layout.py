"""Where every sample goes in the output, and which runs of it are written and held at once.

Positions number the samples of all splits in output order. A *piece* is a run of output rows of
one shard written by one ``write_table`` (a shard's row groups are cut by tokens: at most
``ROW_GROUP_TOKENS``, then at most ``ROW_GROUP_ROWS`` rows). A *bucket* is a run of pieces of at
most ``bucket_tokens`` tokens (or one piece): routing gathers its rows into one temporary file,
and writing holds one bucket in memory at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from advcli.core.ragged import offsets_from_lengths
from advcli.lazy_imports import np
from advcli.shards.plan import ShardPlan, chunks

ROW_GROUP_TOKENS = 1 << 20  # a streaming reader decodes at most ~1 Mi tokens at a time
BUCKET_TOKENS = 1 << 23  # rows held in memory at once while writing (plus one piece)


@dataclass
class Layout:
    order: np.ndarray  # the sample at each position
    position: np.ndarray  # per sample: its position, -1 when dropped
    piece_split: np.ndarray  # per piece: its split, shard and output rows [row0, row1)
    piece_shard: np.ndarray
    piece_row0: np.ndarray
    piece_row1: np.ndarray
    piece_positions: np.ndarray  # piece i holds positions [piece_positions[i], ...[i + 1])
    bucket_pieces: np.ndarray  # bucket j holds pieces [bucket_pieces[j], bucket_pieces[j + 1])

    @property
    def bucket_positions(self) -> np.ndarray:
        positions: np.ndarray = self.piece_positions[self.bucket_pieces]
        return positions

    @property
    def n_buckets(self) -> int:
        return len(self.bucket_pieces) - 1


def layout(plan: ShardPlan, bucket_tokens: int = BUCKET_TOKENS) -> Layout:
    """Cut every shard into pieces (its row groups) and the run of pieces into buckets."""
    cols: list[list[int]] = [[], [], [], [], [], []]  # split, shard, row0, row1, start, tokens
    base = 0  # positions before the split
    for k, sp in enumerate(plan.splits):
        cum = offsets_from_lengths(plan.lens[sp.order])[sp.row_offsets]  # tokens before a row
        row_tokens = np.diff(cum)
        for s in range(len(sp.shard_bounds) - 1):
            a, b = int(sp.shard_bounds[s]), int(sp.shard_bounds[s + 1])
            cuts = a + chunks(row_tokens[a:b], ROW_GROUP_TOKENS)
            r0, r1 = cuts[:-1], cuts[1:]
            values = (k, s, r0, r1, base + sp.row_offsets[r0], cum[r1] - cum[r0])
            for col, v in zip(cols, values, strict=True):
                col.extend(np.broadcast_to(v, len(r0)).tolist())
        base += len(sp.order)
    split, shard, row0, row1, start, tokens = (np.array(c, dtype=np.int64) for c in cols)
    order = np.concatenate([sp.order for sp in plan.splits])
    position = np.full(len(plan.lens), -1, dtype=np.int64)
    position[order] = np.arange(len(order))
    return Layout(
        order=order,
        position=position,
        piece_split=split,
        piece_shard=shard,
        piece_row0=row0,
        piece_row1=row1,
        piece_positions=np.r_[start, len(order)].astype(np.int64),
        bucket_pieces=chunks(tokens, bucket_tokens),
    )
